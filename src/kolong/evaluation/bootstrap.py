"""Bootstrap confidence intervals over independent units (questions, reviews, documents).

`interval` resamples the units with replacement and reports the mean with its percentile interval;
`paired_difference` resamples the same units for two systems at once (the interval of the difference
is what decides whether they differ); `cluster_interval` resamples whole groups of units (the
questions of one article) where the units are not independent. `verdict` turns two intervals into reproduced / refuted /
inconclusive the way docs/reproductions.md uses them.
"""

from __future__ import annotations

import numpy as np


def interval(values, resamples: int = 2000, level: float = 0.95, seed: int = 0) -> dict:
    """Mean of `values` (one per unit) and its bootstrap percentile interval."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return {"mean": float("nan"), "low": float("nan"), "high": float("nan"), "n": 0}
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, (resamples, values.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return {"mean": float(values.mean()), "low": float(low), "high": float(high), "n": int(values.size)}


def statistic_interval(
    statistic, size: int, resamples: int = 1000, level: float = 0.95, seed: int = 0
) -> dict:
    """`statistic(indices)` over all `size` units and its bootstrap percentile interval.

    For statistics that are not means of per-unit values (macro F1, Pearson correlation): each resample
    draws `size` unit indices with replacement and recomputes the statistic on them.
    """
    if size == 0:
        return {"mean": float("nan"), "low": float("nan"), "high": float("nan"), "n": 0}
    rng = np.random.default_rng(seed)
    values = [statistic(rng.integers(0, size, size)) for _ in range(resamples)]
    tail = (1 - level) / 2 * 100
    low, high = np.nanpercentile(values, [tail, 100 - tail])
    return {"mean": float(statistic(np.arange(size))), "low": float(low), "high": float(high), "n": int(size)}


def summed_interval(counts, statistic, resamples: int = 1000, level: float = 0.95, seed: int = 0) -> dict:
    """`statistic_interval` of `statistic(counts summed over the drawn units)`: for statistics that are functions
    of per-unit counts (F1 from true positives, predictions and gold per class), a resample sums rows instead of
    recomputing the metric from the examples. `counts`: (units, ...)."""
    counts = np.asarray(counts, dtype=np.float64)
    return statistic_interval(lambda index: statistic(counts[index].sum(axis=0)), counts.shape[0], resamples,
                              level, seed)  # fmt: skip


def paired_difference(first, second, resamples: int = 2000, level: float = 0.95, seed: int = 0) -> dict:
    """Mean of first - second over the same units, with its bootstrap interval."""
    first, second = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if first.shape != second.shape:
        raise ValueError(f"paired values need the same units: {first.shape} vs {second.shape}")
    return interval(first - second, resamples, level, seed)


def cluster_interval(values, clusters, resamples: int = 2000, level: float = 0.95, seed: int = 0) -> dict:
    """Mean of `values` with an interval that resamples whole clusters (the questions of one article).

    Units of one cluster are not independent (an article that a model reads well answers many of its
    questions), so resampling units alone gives intervals that are too narrow; each resample here draws
    clusters with replacement and averages every unit in them. With one unit per cluster it draws the
    same indices as `interval` and gives its result.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return {"mean": float("nan"), "low": float("nan"), "high": float("nan"), "n": 0, "clusters": 0}
    names, index = np.unique(np.asarray(clusters), return_inverse=True)
    sums = np.bincount(index, weights=values, minlength=len(names))
    counts = np.bincount(index, minlength=len(names))
    rng = np.random.default_rng(seed)
    drawn = rng.integers(0, len(names), (resamples, len(names)))
    means = sums[drawn].sum(axis=1) / counts[drawn].sum(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return {"mean": float(values.mean()), "low": float(low), "high": float(high), "n": int(values.size),
            "clusters": len(names)}  # fmt: skip


def separated(a: dict, b: dict) -> bool:
    """Whether two intervals do not overlap."""
    return a["high"] < b["low"] or b["high"] < a["low"]


def verdict(claim_holds: bool, a: dict, b: dict) -> str:
    """reproduced / refuted when the intervals separate (in the claimed direction or not), else inconclusive."""
    if not separated(a, b):
        return "inconclusive"
    return "reproduced" if claim_holds else "refuted"


def agreed(verdicts) -> str:
    """The verdict every run (seed) gives, else inconclusive."""
    distinct = set(verdicts)
    return distinct.pop() if len(distinct) == 1 else "inconclusive"
