"""Retrieval score against document length, one line per reader (`kolong plot retrieval`)."""

from __future__ import annotations

import json
from pathlib import Path

from kolong.errors import DataError
from kolong.plots.figures import save_figure


def read_results(path: str | Path) -> dict:
    """A `kolong evaluate retrieval` results file (retrieval.json, or the folder holding it)."""
    path = Path(path)
    if path.is_dir():
        path = path / "retrieval.json"
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DataError(f"{path}: not a readable retrieval results file ({error})") from None
    if not isinstance(results, dict) or not results.get("rows"):
        raise DataError(f"{path}: no rows (write it with `kolong evaluate retrieval ... -o DIR`)")
    return results


def plot_by_length(
    results: list[dict], output: str | Path, readers: list[str] | None = None, dpi: int = 100
) -> Path:
    """One panel per task: nDCG@10 with its 95% interval in each document-length bucket, one line per reader."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.2), squeeze=False)
    for axis, result in zip(axes[0], results, strict=True):
        for row in result["rows"]:
            if readers and row["reader"] not in readers:
                continue
            buckets = list(row.get("by_length", {}))
            means = [row["by_length"][b]["mean"] for b in buckets]
            errors = [[m - row["by_length"][b]["low"] for b, m in zip(buckets, means, strict=True)],
                      [row["by_length"][b]["high"] - m for b, m in zip(buckets, means, strict=True)]]  # fmt: skip
            axis.errorbar(range(len(buckets)), means, yerr=errors, marker="o", capsize=3, label=row["reader"])
            axis.set_xticks(range(len(buckets)), [f"{b}\n({row['by_length'][b]['n']} q)" for b in buckets])
        axis.set_title(f"{result['task']} ({result['queries']} queries)")
        axis.set_xlabel("document length (tokens)")
        axis.set_ylabel("nDCG@10")
        axis.set_ylim(0, 1.02)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    return save_figure(figure, output, dpi)
