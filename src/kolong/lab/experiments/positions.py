"""`kolong experiment positions`: relative vs absolute positions for a small Korean encoder (seeds.md §3).

The relative-position Korean BERT paper reports that Shaw's relation-aware attention makes a 3-layer
Korean BERT converge much faster than absolute positions and score higher on KorQuAD (F1 86.62 vs
72.83 at 100k steps) and NSMC (87.9 vs 87.6), and that a MeCab morpheme vocabulary beats a plain
WordPiece one. This recipe repeats the comparison at a size the machine allows, same budget for
every variant:

1. tokenizers: MeCab-morpheme WordPiece and plain WordPiece, same vocabulary size, trained on the same
   NSMC reviews + KorQuAD contexts (`kolong tokenizer train`);
2. corpora: those documents packed into blocks (`kolong data corpus`, 2% of documents held out);
3. pre-training (`kolong pretrain mlm`): one model per position scheme (MeCab vocabulary), plus
   `learned` on the plain WordPiece vocabulary; same steps, batch, learning rate and seed;
4. fine-tuning: NSMC-style sentiment (`kolong finetune cls --data nsmc`) and article-level KorQuAD
   (`kolong finetune qa`, articles split into train / eval, sliding windows longer than the
   pre-training blocks, as in the paper where the model pre-trained at 128 is fine-tuned longer; the
   CPU scales keep articles of at most a few thousand characters to bound the number of windows);
5. vocabulary size vs training speed: MLM tokens/s of the same model at 32k / 64k / 128k entries.

Every stage writes its result as soon as it ends and a rerun skips finished stages, so an interrupted
study resumes; `--max-minutes` stops the call's training at a checkpoint and a rerun resumes it there.
Results: JSON + markdown + plots (held-out MLM loss curves, downstream scores).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kolong.io import atomic_write_json, atomic_write_text
from kolong.lab.experiments.stages import Deadline, StoppedByDeadline, fresh_start, run_stage
from kolong.plots.figures import save_figure

SCALES = {
    # model size, steps and data per scale; "cpu-quick" fits within half an hour on 2 quiet cores. Its 1,200
    # steps: the schemes' held-out losses part after about 300 (a probe: shaw 0.03 nats below learned at 300
    # steps, 0.70 below at 750).
    "cpu-quick": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
                      steps=1200, batch_size=16, vocab_size=8000, reviews=30000, nsmc_limit=2000,
                      qa_train_questions=120, qa_eval_questions=60, qa_max_context_chars=2500),
    "cpu": dict(hidden_size=256, num_hidden_layers=3, num_attention_heads=4, intermediate_size=1024,
                steps=4000, batch_size=32, vocab_size=32000, reviews=200000, nsmc_limit=20000,
                qa_train_questions=1500, qa_eval_questions=400, qa_max_context_chars=6000),
    # a study for one GPU at the size of `kolong experiment base --scale gpu-mini` (6 x 512, 32,000 entries) and
    # as many tokens (6,500 steps x 128 blocks of 128: 106M), the full balanced NSMC-style split and all of
    # article-level KorQuAD; each stage resumes, so a time-limited job run again finishes it
    "gpu-mini": dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8, intermediate_size=2048,
                     steps=6500, batch_size=128, vocab_size=32000, reviews=639599, nsmc_limit=1_000_000,
                     qa_train_questions=0, qa_eval_questions=0, qa_max_context_chars=100000),
    "gpu": dict(hidden_size=768, num_hidden_layers=3, num_attention_heads=12, intermediate_size=3072,
                steps=100000, batch_size=256, vocab_size=32000, reviews=639599, nsmc_limit=100000,
                qa_train_questions=0, qa_eval_questions=0, qa_max_context_chars=100000),
}  # fmt: skip


@dataclass
class PositionStudyArguments:
    """Arguments of `kolong experiment positions`."""

    work_dir: str = "runs/position-study"
    """Tokenizers, corpora, checkpoints (resumable)."""
    results: str = ""
    """Results JSON (markdown beside); empty: WORK_DIR/positions.json."""
    figures: str = ""
    """Where the plots go; empty: WORK_DIR."""
    scale: str = "cpu-quick"
    schemes: tuple[str, ...] = ("learned", "shaw", "rope", "alibi")
    shared_data: str = "../shared/data"
    learning_rate: float = 1e-3
    qa_max_length: int = 256
    seed: int = 42
    vocab_speed_sizes: tuple[int, ...] = (32000, 64000, 128000)
    max_minutes: float = 0.0
    """Stop training at a checkpoint after this many minutes of the call (0: no limit); rerun to resume."""
    overrides: dict = field(default_factory=dict)
    """Scale fields to override (steps, hidden_size, ...)."""

    def __post_init__(self) -> None:  # a study writes under its own folder unless told otherwise
        self.results = self.results or str(Path(self.work_dir) / "positions.json")
        self.figures = self.figures or self.work_dir


def _settings(args: PositionStudyArguments) -> dict:
    from kolong.lab.experiments.scales import scale_settings

    return scale_settings(SCALES, args.scale, args.overrides, "study setting")


def study_documents(args, settings) -> list[str]:
    from kolong.data.corpus import read_documents

    reviews = list(read_documents(["nsmc"], args.shared_data, limit=settings["reviews"]))
    return reviews + list(read_documents(["korquad"], args.shared_data))


def study_tokenizer(work: Path, analyser: str, documents: list[str], vocab_size: int) -> Path:
    from kolong.tokenizers.training import save_tokenizer, train_tokenizer

    out = work / f"tokenizer-{analyser}"
    if not (out / "tokenizer.json").is_file():
        save_tokenizer(train_tokenizer(documents, analyser=analyser, vocab_size=vocab_size), out)
    return out


def study_corpus(work: Path, name: str, tokenizer: Path, documents: list[str]) -> Path:
    from kolong.checkpoints import load_tokenizer
    from kolong.data.corpus import build_corpus

    out = work / f"corpus-{name}"
    if not (out / "corpus.json").is_file():
        text = work / "documents.txt"
        if not text.is_file():
            atomic_write_text(text, "\n".join(d.replace("\n", " ") for d in documents) + "\n")
        build_corpus(
            [str(text)],
            load_tokenizer(str(tokenizer), role="tokenizer"),
            out,
            max_length=128,
            held_out=0.02,
            overwrite=True,
        )
    return out


def _qa_data(work: Path, args, settings) -> tuple[Path, Path]:
    from kolong.data.squad import build_long_documents, read_squad, split_by_article, write_squad

    train_path, eval_path = work / "korquad-train.json", work / "korquad-eval.json"
    if not eval_path.is_file():
        dataset = read_squad(Path(args.shared_data) / "korquad" / "KorQuAD_v1.0_dev.shared.json")
        articles = [
            e for e in build_long_documents(dataset) if len(e.context) <= settings["qa_max_context_chars"]
        ]
        train, evaluation = split_by_article(articles, 0.2, args.seed)
        rng = random.Random(args.seed)
        if settings["qa_train_questions"]:
            train = rng.sample(train, min(len(train), settings["qa_train_questions"]))
        if settings["qa_eval_questions"]:
            evaluation = rng.sample(evaluation, min(len(evaluation), settings["qa_eval_questions"]))
        write_squad(train, train_path)
        write_squad(evaluation, eval_path)
    return train_path, eval_path


def _run(work: Path, name: str, stage: Callable[..., dict], *stage_args) -> dict:
    return run_stage(work / f"{name}.json", lambda: stage(*stage_args))


def pretrain_stage(work, name, corpus, scheme, args, settings, deadline: Deadline) -> dict:
    from kolong.training.pretrain import PretrainArguments, pretrain_mlm, read_log

    out = work / f"mlm-{name}"
    resumed = not fresh_start(out)
    model = {
        k: settings[k]
        for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    }
    started = time.perf_counter()
    metrics = pretrain_mlm(PretrainArguments(
        corpus=str(corpus), output_dir=str(out), preset="tiny", position_encoding=scheme, overrides=model,
        max_steps=settings["steps"], batch_size=settings["batch_size"], learning_rate=args.learning_rate,
        warmup_ratio=0.05, eval_every=max(50, settings["steps"] // 10), save_steps=max(50, settings["steps"] // 4),
        logging_steps=max(10, settings["steps"] // 40), seed=args.seed, overwrite=not resumed,
        extra={"disable_tqdm": True},
    ), callbacks=deadline.callbacks())  # fmt: skip
    deadline.check(f"{name}: pre-training")
    history = read_log(out)["log_history"]
    return {
        "model": str(out),
        "minutes": (time.perf_counter() - started) / 60,  # of the call that finished it
        "resumed": resumed,
        "final": metrics,
        "held_out": [(h["step"], h["eval_loss"]) for h in history if "eval_loss" in h],
        "train": [(h["step"], h["loss"]) for h in history if "loss" in h],
        "tokens_per_second": [h["tokens_per_second"] for h in history if "tokens_per_second" in h],
    }


def _nsmc(work, name, model, args, settings, deadline: Deadline) -> dict:
    from kolong.training.classification import ClassificationArguments, finetune_cls

    out = work / f"nsmc-{name}"
    metrics = finetune_cls(ClassificationArguments(
        model=model, data="nsmc", output_dir=str(out), shared_data=args.shared_data,
        max_length=64, epochs=2, learning_rate=3e-4, batch_size=32, limit=settings["nsmc_limit"], seed=args.seed,
        overwrite=fresh_start(out), extra={"disable_tqdm": True},
    ), callbacks=deadline.callbacks())  # fmt: skip
    deadline.check(f"{name}: NSMC")
    return {k: metrics[k] for k in ("accuracy", "macro_f1", "train_examples", "eval_examples", "intervals")}


def _korquad(work, name, model, args, train, evaluation, deadline: Deadline) -> dict:
    from kolong.training.qa import QAFinetuneArguments, finetune_qa

    out = work / f"korquad-{name}"
    metrics = finetune_qa(QAFinetuneArguments(
        model=model, train=str(train), eval=str(evaluation), output_dir=str(out),
        max_length=args.qa_max_length, doc_stride=args.qa_max_length // 4, epochs=2, learning_rate=3e-4,
        batch_size=16, seed=args.seed, overwrite=fresh_start(out), extra={"disable_tqdm": True},
    ), callbacks=deadline.callbacks())  # fmt: skip
    deadline.check(f"{name}: KorQuAD")
    pick = {k.removeprefix("eval_"): v for k, v in metrics.items() if k in ("eval_exact_match", "eval_f1")}
    return {**pick, "train_windows": metrics["train_windows"], "intervals": metrics["intervals"]}


def _vocab_speed(args, settings) -> list[dict]:
    """Training tokens/s of the study's model (learned positions) at each vocabulary size (sparse MLM head)."""
    import torch

    from kolong.models import KolongConfig, KolongForMaskedLM

    rows = []
    for vocab in args.vocab_speed_sizes:
        torch.manual_seed(args.seed)
        model = KolongForMaskedLM(KolongConfig(
            vocab_size=vocab, hidden_size=settings["hidden_size"], num_hidden_layers=settings["num_hidden_layers"],
            num_attention_heads=settings["num_attention_heads"], intermediate_size=settings["intermediate_size"],
            max_position_embeddings=128, sparse_prediction=True,
        )).train()  # fmt: skip
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(5, vocab, (settings["batch_size"], 128))
        labels = torch.where(torch.rand(ids.shape) < 0.15, ids, torch.full_like(ids, -100))
        times = []
        for _ in range(8):
            start = time.perf_counter()
            model(ids, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - start)
        seconds = sorted(times[2:])[len(times[2:]) // 2]
        rows.append({"vocab_size": vocab, "tokens_per_second": ids.numel() / seconds,
                     "parameters": sum(p.numel() for p in model.parameters())})  # fmt: skip
    return rows


def _vocab_rows(args, settings) -> dict:
    return {"rows": _vocab_speed(args, settings)}


def run_position_study(
    args: PositionStudyArguments, on_step: Callable[[str], None] = print, deadline: Deadline | None = None
) -> dict:
    """Run (or resume) every stage; the results (also in `args.results`), or ``{"finished": False}`` when the
    call's `--max-minutes` (or `deadline`, shared by the seeds of `--seeds`) stopped a training run."""
    try:
        return _study(args, on_step, deadline or Deadline(args.max_minutes))
    except StoppedByDeadline as stop:
        on_step(str(stop))
        return {"finished": False, "stopped_during": stop.stage}


def _study(args: PositionStudyArguments, on_step: Callable[[str], None], deadline: Deadline) -> dict:
    settings = _settings(args)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    on_step("reading documents")
    documents = study_documents(args, settings)
    tokenizers = {}
    for analyser in ("mecab", "none"):
        on_step(f"tokenizer ({analyser})")
        tokenizers[analyser] = study_tokenizer(work, analyser, documents, settings["vocab_size"])
    corpora = {}
    for analyser, tokenizer in tokenizers.items():
        on_step(f"corpus ({analyser})")
        corpora[analyser] = study_corpus(work, analyser, tokenizer, documents)
    train_qa, eval_qa = _qa_data(work, args, settings)
    runs = [(scheme, "mecab", scheme) for scheme in args.schemes] + [("learned-wordpiece", "none", "learned")]
    results = {"finished": True, "arguments": asdict(args), "settings": settings, "runs": {}}
    for name, analyser, scheme in runs:
        on_step(f"{name}: pre-training")
        pretrained = _run(
            work,
            f"result-mlm-{name}",
            pretrain_stage,
            work,
            name,
            corpora[analyser],
            scheme,
            args,
            settings,
            deadline,
        )
        on_step(f"{name}: NSMC")
        nsmc = _run(
            work, f"result-nsmc-{name}", _nsmc, work, name, pretrained["model"], args, settings, deadline
        )
        on_step(f"{name}: KorQuAD")
        korquad = _run(work, f"result-korquad-{name}", _korquad, work, name, pretrained["model"], args, train_qa,
                       eval_qa, deadline)  # fmt: skip
        results["runs"][name] = {"scheme": scheme, "vocabulary": analyser, "mlm": pretrained, "nsmc": nsmc,
                                 "korquad": korquad}  # fmt: skip
        atomic_write_json(args.results, results)
    on_step("vocabulary size vs speed")
    results["vocab_speed"] = _run(work, "result-vocab-speed", _vocab_rows, args, settings)["rows"]
    for analyser in tokenizers:
        metadata = json.loads((Path(corpora[analyser]) / "corpus.json").read_text(encoding="utf-8"))
        results.setdefault("vocabulary_sizes", {})[analyser] = metadata["vocab_size"]
    atomic_write_json(args.results, results)
    plot_study(results, Path(args.figures))
    return results


def plot_study(results: dict, figures: Path) -> list[Path]:

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mecab = {name: run for name, run in results["runs"].items() if run["vocabulary"] == "mecab"}
    figure, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for name, run in mecab.items():
        steps, losses = zip(*run["mlm"]["held_out"], strict=True)
        axes[0].plot(steps, losses, marker="o", label=name)
    axes[0].set_title("held-out MLM loss (MeCab vocabulary)")
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("loss")
    axes[0].legend()
    names = list(results["runs"])
    for axis, task, metric in ((axes[1], "nsmc", "accuracy"), (axes[2], "korquad", "f1")):
        scale = 1  # both in percent
        values = [results["runs"][n][task].get(metric, 0) * scale for n in names]
        spans = [results["runs"][n][task].get("intervals", {}).get(metric) for n in names]
        errors = [[v - (s["low"] * scale if s else v) for v, s in zip(values, spans, strict=True)],
                  [(s["high"] * scale if s else v) - v for v, s in zip(values, spans, strict=True)]]  # fmt: skip
        axis.bar(names, values, yerr=errors, capsize=3, color=["C0", "C1", "C2", "C3", "C7"][: len(names)])
        axis.set_title(
            f"{'NSMC-style accuracy' if task == 'nsmc' else 'KorQuAD (article-level) F1'} (95% bootstrap)"
        )
        axis.tick_params(axis="x", rotation=30)
        for index, value in enumerate(values):
            axis.text(index, value, f"{value:.1f}", ha="center", va="bottom", fontsize=8)
    return [save_figure(figure, figures / f"positions-study-{results['arguments']['scale']}.png")]


def _cell(scores: dict, name: str, scale: float = 1) -> str:
    """The metric and its bootstrap 95% interval (absent from results recorded before intervals were)."""
    span = scores.get("intervals", {}).get(name)
    value = f"{scores.get(name, 0) * scale:.2f}"
    return value + (f" [{span['low'] * scale:.1f}, {span['high'] * scale:.1f}]" if span else "")


def to_markdown(results: dict) -> str:
    settings = results["settings"]
    lines = [
        f"Model: hidden {settings['hidden_size']}, {settings['num_hidden_layers']} layers, "
        f"{settings['num_attention_heads']} heads; {settings['steps']} steps x {settings['batch_size']} blocks of 128 "
        f"tokens; vocabulary {results.get('vocabulary_sizes', {})}.",
        "",
        "Downstream metrics with bootstrap 95% intervals over test reviews / questions.",
        "",
        "| run | held-out MLM loss (first -> last) | minutes | NSMC acc | NSMC macro F1 | KorQuAD EM | KorQuAD F1 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, run in results["runs"].items():
        held = run["mlm"]["held_out"]
        lines.append(
            f"| {name} | {held[0][1]:.3f} -> {held[-1][1]:.3f} | {run['mlm']['minutes']:.1f}"
            f"{'*' if run['mlm'].get('resumed') else ''} | "
            f"{_cell(run['nsmc'], 'accuracy')} | {_cell(run['nsmc'], 'macro_f1')} | "
            f"{_cell(run['korquad'], 'exact_match')} | {_cell(run['korquad'], 'f1')} |"
        )
    if any(run["mlm"].get("resumed") for run in results["runs"].values()):
        lines += [
            "",
            "*: resumed; minutes of the call that finished pre-training (earlier calls trained part).",
        ]
    if results.get("vocab_speed"):
        base = results["vocab_speed"][0]["tokens_per_second"]
        lines += [
            "",
            "| vocabulary | parameters | training tokens/s | time per step vs the first |",
            "|---:|---:|---:|---:|",
        ]
        for row in results["vocab_speed"]:
            lines.append(f"| {row['vocab_size']:,} | {row['parameters']:,} | {row['tokens_per_second']:,.0f} | "
                         f"{base / row['tokens_per_second']:.2f}x |")  # fmt: skip
    return "\n".join(lines) + "\n"
