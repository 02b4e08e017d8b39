"""`kolong experiment base`: a Korean base encoder made by kolong, since none can be downloaded here.

A MeCab-morpheme WordPiece encoder with 512 learned positions, pre-trained with `kolong pretrain mlm`
(the BERT length curriculum 128 then 512) on the shared NSMC reviews, whole KorQuAD articles and KLUE
dev sentences. KorQuAD articles are split by article first (`heldout_articles`): the held-out articles
are never pre-trained on, so the extension study reads them as unseen long documents and the QA
experiment evaluates on them.

Pre-training runs in two phases of `kolong pretrain mlm`. First `steps` with documents packed and
positions restarting in each (`packing="documents"`, attention inside each review or article): short
documents teach local context fast. Then `full_rows_steps` with the same packing but positions numbered
across each 512-token row (`full_rows_packing="documents-continuous"`, Megatron's reset_position_ids=False),
so that every one of the 512 position rows is trained: almost every text here is a review or a sentence far
shorter than 512 tokens, so with restarting positions alone the rows past ~128 stay near their random start,
and a base whose late rows are noise cannot say how new rows should start. Contiguous blocks across
documents (`full_rows_packing="concatenate"`, RoBERTa's FULL-SENTENCES, an earlier recipe) moved
the late rows without giving them structure at the CPU scale, and contiguous blocks alone from the start
stayed at the unigram plateau in 2,000 CPU steps, so the first phase is not optional at this scale.

Stages (each resumable; a rerun skips what is done and `--max-minutes` stops pre-training at a checkpoint
so that a time-limited job can run it): documents -> tokenizer -> corpus -> pre-training (two phases) -> model card. The result is a
normal checkpoint (`AutoModelForMaskedLM` after `import kolong`) with its tokenizer, `loss.png`,
`kolong_pretrain_results.json` and a README model card.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kolong.io import atomic_write_json, atomic_write_text
from kolong.lab.experiments.stages import Deadline, run_stage

# `kolong pretrain mlm --packing` of each phase
PACKING = dict(packing="documents", full_rows_packing="documents-continuous")
READS = {
    "documents": "packed documents, positions restarting in each",
    "documents-continuous": "packed documents, positions numbered across each 512-token row",
    "concatenate": "contiguous 512-token blocks",
}
# Korean text besides NSMC, KorQuAD and KLUE: the sentences of KorSTS and KorNLI (shared data) and KoNLPy's
# Constitution and National Assembly bills (`kolong[demo]`)
MORE_TEXT = ("korsts", "kornli", "konlpy")
SCALES = {
    # tokens per step = batch_size x 512 (4x the rows while the curriculum is at 128); steps: the documents
    # phase, then full_rows_steps with positions numbered across each row; klue_sentences None: all 12k
    "tiny": dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                 vocab_size=600, reviews=300, klue_sentences=2000, steps=4, batch_size=2, learning_rate=1e-3,
                 curriculum="128:0.5,512", eval_blocks=8, full_rows_steps=2, full_rows_learning_rate=5e-4,
                 more_text=[], **PACKING),
    "cpu": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                vocab_size=16000, reviews=100000, klue_sentences=None, steps=1600, batch_size=8,
                learning_rate=1e-3, curriculum="128:0.8,512", eval_blocks=200, full_rows_steps=800,
                full_rows_learning_rate=1e-3, more_text=[], **PACKING),
    # a real vocabulary size (32,000, as KLUE's and KoELECTRA's) and (5,500 + 1,000) x 16,384 = 106M tokens;
    # about 35M parameters; every Korean text of the shared data and KoNLPy's corpus but the held-out articles
    # and the last ~19,600 reviews (the unseen text its held-out losses read)
    "gpu-mini": dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8, intermediate_size=2048,
                     vocab_size=32000, reviews=620000, klue_sentences=None, steps=5500, batch_size=32,
                     learning_rate=7e-4, curriculum="128:0.8,512", eval_blocks=1000, full_rows_steps=1000,
                     full_rows_learning_rate=3e-4, more_text=list(MORE_TEXT), **PACKING),
    "gpu": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                vocab_size=32000, reviews=620000, klue_sentences=None, steps=25000, batch_size=64,
                learning_rate=5e-4, curriculum="128:0.9,512", eval_blocks=2000, full_rows_steps=5000,
                full_rows_learning_rate=2e-4, more_text=list(MORE_TEXT), **PACKING),
}  # fmt: skip
MODEL_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


@dataclass
class BaseModelArguments:
    """Arguments of `kolong experiment base`."""

    work_dir: str = "runs/base"
    scale: str = "cpu"
    shared_data: str = "../shared/data"
    heldout_fraction: float = 0.2
    """Share of KorQuAD articles kept out of pre-training (the evaluation articles of the studies)."""
    seed: int = 42
    max_minutes: float = 0.0
    """Stop pre-training at a checkpoint after this many minutes (0: run to the end); rerun to resume."""
    overrides: dict = field(default_factory=dict)


def settings_of(scale: str, overrides: dict) -> dict:
    from kolong.lab.experiments.scales import scale_settings

    settings = scale_settings(SCALES, scale, overrides)
    for name in PACKING:
        if settings[name] not in READS:
            raise ValueError(f"setting {name}={settings[name]!r} is not one of {', '.join(READS)}")
    return settings


def heldout_articles(shared_data: str | Path, fraction: float, seed: int) -> tuple[list, list]:
    """Article-level KorQuAD examples split by article: (pre-training articles, held-out articles)."""
    from kolong.data.squad import build_long_documents, read_squad, split_by_article

    dataset = read_squad(Path(shared_data) / "korquad" / "KorQuAD_v1.0_dev.shared.json")
    return split_by_article(build_long_documents(dataset), fraction, seed)


def _documents(args: BaseModelArguments, settings: dict) -> list[str]:
    from kolong.data.corpus import read_documents

    trained_on, _ = heldout_articles(args.shared_data, args.heldout_fraction, args.seed)
    articles = list(dict.fromkeys(e.context for e in trained_on))  # whole articles, paragraphs joined
    reviews = list(read_documents(["nsmc"], args.shared_data, limit=settings["reviews"]))
    klue = read_documents(["klue"], args.shared_data, limit=settings["klue_sentences"])
    return (
        reviews + articles + list(klue) + more_documents(settings["more_text"], args.shared_data, args.seed)
    )


def more_documents(names: list[str], shared_data: str | Path, seed: int) -> list[str]:
    """The texts of `MORE_TEXT` sources: each sentence of KorSTS / KorNLI once, KoNLPy's law and bills whole."""
    from kolong.data.classification import NAMED

    texts: list[str] = []
    for name in names:
        if name not in MORE_TEXT:
            raise ValueError(f"setting more_text: {name!r} is not one of {', '.join(MORE_TEXT)}")
        if name == "konlpy":
            from kolong.data.konlpy_corpus import read_bills, read_constitution

            copied = Path(shared_data) / "konlpy"  # a bundle's copy, where the package is not installed
            texts += [read_constitution(copied), *read_bills(copied).values()]
            continue
        data = NAMED[name](Path(shared_data), seed)
        sentences = (t for e in [*data.train, *data.eval] for t in (e.text, e.pair) if t)
        texts += list(dict.fromkeys(sentences))
    return texts


def _stage(work: Path, name: str, make: Callable[[], dict]) -> dict:
    return run_stage(work / f"stage-{name}.json", make)


def build_base_model(args: BaseModelArguments, on_step: Callable[[str], None] = print) -> dict:
    """Run (or resume) every stage; returns the summary (also in WORK/base.json)."""
    from kolong.checkpoints import load_tokenizer
    from kolong.data.corpus import build_corpus
    from kolong.tokenizers.training import save_tokenizer, train_tokenizer
    from kolong.training.pretrain import PretrainArguments, pretrain_mlm

    settings = settings_of(args.scale, args.overrides)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    deadline = Deadline(args.max_minutes)  # one limit for both phases: the call must return within it

    def documents() -> dict:
        texts = _documents(args, settings)
        atomic_write_text(work / "documents.txt", "\n".join(" ".join(t.split()) for t in texts) + "\n")
        return {"documents": len(texts), "characters": sum(len(t) for t in texts)}

    on_step(
        "1/5 documents (NSMC + whole KorQuAD pre-training articles + KLUE"
        + "".join(f" + {name}" for name in settings["more_text"])
        + ")"
    )
    data = _stage(work, "documents", documents)

    def tokenizer() -> dict:
        lines = (work / "documents.txt").read_text(encoding="utf-8").splitlines()
        save_tokenizer(
            train_tokenizer(lines, analyser="mecab", vocab_size=settings["vocab_size"]), work / "tokenizer"
        )
        return {"path": str(work / "tokenizer")}

    on_step(f"2/5 MeCab WordPiece tokenizer ({settings['vocab_size']:,} entries)")
    _stage(work, "tokenizer", tokenizer)

    def corpus() -> dict:
        build_corpus([str(work / "documents.txt")], load_tokenizer(str(work / "tokenizer"), role="tokenizer"), work / "corpus", max_length=512,
                     held_out=0.01, seed=args.seed, overwrite=True, workers=0)  # fmt: skip
        return {"path": str(work / "corpus")}

    on_step("3/5 corpus of 512-token blocks")
    _stage(work, "corpus", corpus)

    def phase(name: str, **arguments) -> Callable[[], dict]:
        def run() -> dict:
            steps = arguments["max_steps"]
            metrics = pretrain_mlm(
                PretrainArguments(
                    corpus=str(work / "corpus"), output_dir=str(work / name), batch_size=settings["batch_size"],
                    seed=args.seed, eval_every=str(max(1, steps // 10)), save_steps=max(1, steps // 20),
                    logging_steps=max(1, steps // 100), eval_blocks=settings["eval_blocks"], save_total_limit=2,
                    extra={"disable_tqdm": True}, **arguments,
                ),
                callbacks=deadline.callbacks(),
            )  # fmt: skip
            finished = metrics.get("finished", True)
            if finished:  # resuming needs them no more, and a finished study is copied off the machine whole
                for checkpoint in (work / name).glob("checkpoint-*"):
                    shutil.rmtree(checkpoint)
            return {"finished": finished, **metrics}

        return run

    total = settings["steps"] + settings["full_rows_steps"]
    on_step(
        f"4/5 pre-training: {settings['steps']:,} steps of {settings['batch_size'] * 512:,} tokens, "
        f"{_reads(settings['packing'])}"
    )
    first = _stage(work, "pretrain", phase(
        "pretrain-documents", preset="tiny", overrides={k: settings[k] for k in MODEL_FIELDS},
        curriculum=settings["curriculum"], max_steps=settings["steps"], learning_rate=settings["learning_rate"],
        packing=settings["packing"], warmup_ratio=0.05,
    ))  # fmt: skip
    second = None
    if first["finished"]:
        on_step(
            f"4/5 then {settings['full_rows_steps']:,} steps on {_reads(settings['full_rows_packing'])} "
            "(all position rows)"
        )
        second = _stage(work, "pretrain-full-rows", phase(
            "model", model=str(work / "pretrain-documents"), max_steps=settings["full_rows_steps"],
            learning_rate=settings["full_rows_learning_rate"], packing=settings["full_rows_packing"], warmup_ratio=0.1,
        ))  # fmt: skip
    if second is None or not second["finished"]:
        done = first["steps"] + (second["steps"] if second else 0)
        on_step(f"stopped at step {done:,} of {total:,}: run the same command to resume")
        return {"finished": False, "steps": done, "work_dir": str(work)}

    on_step("5/5 held-out MLM loss on unseen articles and reviews, model card, the loss curve of both phases")
    unseen = _stage(work, "unseen", lambda: unseen_losses(work / "model", args, settings))
    _plot_phases(work, settings, args.scale)
    summary = {
        "finished": True, "model": str(work / "model"), "scale": args.scale, "settings": settings,
        "data": data, "steps": total, "tokens": total * settings["batch_size"] * 512,
        "held_out_loss": second.get("eval_loss"), "train_loss": second.get("train_loss"),
        "held_out_loss_documents_phase": first.get("eval_loss"), "unseen_loss": unseen,
        "heldout_fraction": args.heldout_fraction, "seed": args.seed, "shared_data": args.shared_data,
        "minutes_this_call": (time.perf_counter() - started) / 60,
    }  # fmt: skip
    atomic_write_text(work / "model" / "README.md", model_card(summary))
    atomic_write_json(work / "base.json", summary)
    return summary


def unseen_losses(model_dir: Path, args: BaseModelArguments, settings: dict) -> dict:
    """MLM loss (15% of tokens masked, fixed masks) on text the base never read, 512-token blocks: the held-out
    KorQuAD articles, and the NSMC reviews after its training ones back to back. Per set: the mean over
    blocks of each block's mean loss at its masked tokens, with a 95% bootstrap interval over blocks."""
    import numpy as np
    import torch
    from transformers import AutoModelForMaskedLM

    from kolong.checkpoints import load_model, load_tokenizer
    from kolong.evaluation.bootstrap import interval
    from kolong.lab.experiments.extension_eval import (
        evaluation_blocks,
        heldout_reviews,
        token_losses,
        unique_contexts,
    )

    tokenizer = load_tokenizer(model_dir)
    model = load_model(model_dir, AutoModelForMaskedLM).eval()
    model.to("cuda" if torch.cuda.is_available() else "cpu")
    _, held_out = heldout_articles(args.shared_data, args.heldout_fraction, args.seed)
    sets = {
        "articles": evaluation_blocks(tokenizer, unique_contexts(held_out), 512, 0.15, args.seed,
                                      settings["eval_blocks"]),
        "reviews": evaluation_blocks(tokenizer, heldout_reviews(args.shared_data, settings["reviews"]), 512, 0.15,
                                     args.seed, settings["eval_blocks"], stream=True),
    }  # fmt: skip
    found = {}
    for name, (ids, masks) in sets.items():
        if len(ids):
            per_block = np.nanmean(token_losses(model, ids, masks, tokenizer.mask_token_id, 16), axis=1)
            found[name] = {**interval(per_block), "blocks": len(ids)}
    return found


def _reads(packing: str) -> str:
    return READS[packing]  # settings_of admits only these


def _plot_phases(work: Path, settings: dict, scale: str) -> None:
    """MODEL/loss.png over both phases (the second phase's steps continue the first's)."""
    from kolong.training.pretrain import plot_losses, read_log

    first = read_log(work / "pretrain-documents")["log_history"]
    second = [{**h, "step": h["step"] + settings["steps"]} for h in read_log(work / "model")["log_history"]]
    plot_losses(first + second, work / "model" / "loss.png",
                title=f"base ({scale}): {settings['packing']}, then {settings['full_rows_packing']} "
                      f"from {settings['steps']:,}")  # fmt: skip


def model_card(summary: dict) -> str:
    s, data = summary["settings"], summary["data"]
    loss = summary["held_out_loss"]
    return "\n".join([
        "---", "language: ko", "library_name: transformers", "tags: [kolong, fill-mask, korean]", "---", "",
        f"# kolong Korean base ({summary['scale']})", "",
        f"A MeCab-morpheme WordPiece encoder with 512 learned positions, pre-trained from scratch by "
        f"`kolong experiment base --scale {summary['scale']}` (masked language modelling: length curriculum "
        f"{s['curriculum']} on {_reads(s['packing'])}, then {s['full_rows_steps']:,} steps on "
        f"{_reads(s['full_rows_packing'])} so that every position row is trained). "
        "Load it with `AutoModelForMaskedLM.from_pretrained` after `import kolong`.",
        "",
        f"- model: hidden {s['hidden_size']}, {s['num_hidden_layers']} layers, {s['num_attention_heads']} heads, "
        f"FFN {s['intermediate_size']}; vocabulary {s['vocab_size']:,} (MeCab-ko + WordPiece)",
        f"- data: {data['documents']:,} documents, {data['characters']:,} characters: NSMC reviews "
        f"(up to {s['reviews']:,}), whole KorQuAD 1.0 dev articles of the pre-training split "
        f"({1 - summary['heldout_fraction']:.0%} of articles, split by article with seed {summary['seed']}), "
        "KLUE dev sentences (NLI, STS, NER, DP)"
        + ("; " + ", ".join({"korsts": "KorSTS sentences", "kornli": "KorNLI sentences",
                             "konlpy": "KoNLPy's Constitution and bills"}[n] for n in s["more_text"])
           if s.get("more_text") else ""),
        f"- training: {summary['steps']:,} steps, {summary['tokens']:,} tokens, peak lr {s['learning_rate']}",
        f"- held-out MLM loss: {loss:.3f}" if loss is not None else "- held-out MLM loss: not evaluated",
        *[f"- MLM loss on unseen {name} ({found['blocks']:,} blocks of 512 tokens, 15% masked): {found['mean']:.3f} "
          f"[{found['low']:.3f}, {found['high']:.3f}]" for name, found in summary.get("unseen_loss", {}).items()],
        "", "Licences: the data's (see the shared data README); for research on length extension, not production.",
        "",
    ])  # fmt: skip
