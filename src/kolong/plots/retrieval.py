"""Retrieval score against document length or the target's depth, one line per reader (`kolong plot retrieval`)."""

from __future__ import annotations

import json
from pathlib import Path

from kolong.errors import DataError
from kolong.plots.figures import save_figure
from kolong.retrieval.evaluate import bucket_order


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


def same_task_merged(results: list[dict]) -> list[dict]:
    """Runs of one task over the same queries (readers evaluated apart) drawn as one panel: their rows joined, a
    reader both hold taken from the first."""
    merged: dict[tuple, dict] = {}
    for result in results:
        key = (result.get("task"), frozenset(result["rows"][0].get("per_query_ndcg10", {})) or id(result))
        if key not in merged:
            merged[key] = {**result, "rows": list(result["rows"])}
            continue
        known = {row["reader"] for row in merged[key]["rows"]}
        merged[key]["rows"] += [row for row in result["rows"] if row["reader"] not in known]
    return list(merged.values())


BUCKETS = {"length": "document length (tokens)", "depth": "the target's first token"}


def plot_by_length(results: list[dict], output: str | Path, readers: list[str] | None = None, dpi: int = 100,
                   by: str = "length") -> Path:  # fmt: skip
    """One panel per task: nDCG@10 with its 95% interval in each document-length bucket (`by="depth"`: each bucket
    of the target's depth), one line per reader. With
    many readers it stays readable: the hybrids (`bm25 + ...`) in a row of panels of their own, a distinct colour
    per reader (the same reader the same colour everywhere), points dodged apart within a bucket, and the legend
    outside the data."""
    if by not in BUCKETS:
        raise DataError(f"--by must be one of {', '.join(BUCKETS)}, got {by!r}")
    results = same_task_merged(results)
    key = f"by_{by}"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = [
        [row for row in result["rows"] if not readers or row["reader"] in readers] for result in results
    ]
    names = list(dict.fromkeys(row["reader"] for rows in chosen for row in rows))
    palette = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    colours = {name: palette(index % palette.N) for index, name in enumerate(names)}
    facets = [("readers", lambda r: not r["reader"].startswith("bm25 + "))]
    if any(row["reader"].startswith("bm25 + ") for rows in chosen for row in rows):
        facets.append(("with BM25 (reciprocal rank fusion)", lambda r: r["reader"].startswith("bm25 + ")))
    figure, axes = plt.subplots(len(facets), len(results), figsize=(6 * len(results) + 3, 4.2 * len(facets)),
                                squeeze=False)  # fmt: skip
    for column, (result, rows) in enumerate(zip(results, chosen, strict=True)):
        for line, (facet, keeps) in enumerate(facets):
            axis, shown = axes[line][column], [row for row in rows if keeps(row)]
            for index, row in enumerate(shown):
                buckets = sorted(row.get(key, {}), key=bucket_order)
                dodge = (index - (len(shown) - 1) / 2) * min(0.06, 0.6 / max(1, len(shown)))
                means = [row[key][b]["mean"] for b in buckets]
                errors = [[m - row[key][b]["low"] for b, m in zip(buckets, means, strict=True)],
                          [row[key][b]["high"] - m for b, m in zip(buckets, means, strict=True)]]  # fmt: skip
                axis.errorbar([i + dodge for i in range(len(buckets))], means, yerr=errors, marker="o", capsize=2,
                              color=colours[row["reader"]], label=row["reader"], linewidth=1.2, markersize=4)  # fmt: skip
                axis.set_xticks(range(len(buckets)), [f"{b}\n({row[key][b]['n']} q)" for b in buckets])
            axis.set_title(f"{result['task']} ({result['queries']} queries): {facet}", fontsize=9)
            axis.set_xlabel(BUCKETS[by])
            axis.set_ylabel("nDCG@10")
            axis.set_ylim(0, 1.02)
            axis.grid(alpha=0.3)
            if shown:
                axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    figure.tight_layout()
    return save_figure(figure, output, dpi)
