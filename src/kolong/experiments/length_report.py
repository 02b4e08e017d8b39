"""What `kolong experiment length` reports: F1 by document length, paired differences, table and figure.

A variant is compared with the reference (the shortest sliding variant by default, 512-sliding) question by question: both answered
the same evaluation questions, so the paired bootstrap over questions (`paired_difference`) is the
interval that decides whether one reads long documents better, overall and in each length bucket.
"""

from __future__ import annotations

from pathlib import Path

from kolong.plots.figures import save_figure

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
