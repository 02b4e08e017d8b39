"""kolong's one rule for comparing two readers, models or variants on the same examples.

The paired difference (first - second) is resampled by the unit that makes observations dependent: whole groups
(the questions of one article) where the examples carry one, else the examples themselves; with several seeds, a
t-interval over the per-seed mean differences (each seed's training is the unit then). The verdict:

- **equivalent** when the 90% interval lies inside +-margin (two one-sided tests at 5% each, TOST);
- otherwise **better** / **worse** when the 95% interval excludes 0;
- otherwise **undecided**.

Beside it, the minimum detectable difference: the true difference this design finds (95% interval excluding 0)
with 80% power, (z_0.975 + z_0.8) x its standard error (t quantiles over seeds). A difference smaller than that
is one the comparison could not have shown.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kolong.errors import ConfigError

# The documented default margin of each measure, in its own units: what counts as no practical difference.
MARGINS = {"ndcg@10": 0.02, "mrr@10": 0.02, "f1": 1.0, "exact_match": 1.0, "accuracy": 0.5, "mlm_loss": 0.02}
VERDICTS = ("better", "worse", "equivalent", "undecided")
COVERAGE = 0.95  # of the interval shown; the equivalence test reads the 90% one
POWER = 0.8


def plural(count: int, unit: str) -> str:
    """`unit` as English counts `count` of it: 1 step, 2 steps, 2 branches, 120 queries."""
    if count == 1:
        return unit
    if unit.endswith("y") and unit[-2:-1] not in tuple("aeiou"):
        return unit[:-1] + "ies"
    return unit + ("es" if unit.endswith(("s", "sh", "ch", "x")) else "s")


def default_margin(measure: str) -> float:
    try:
        return MARGINS[measure.lower()]
    except KeyError:
        raise ConfigError(f"no default --margin for {measure!r}; give one") from None


def check_margin(margin: float, option: str = "--margin") -> float:
    if not margin > 0 or not np.isfinite(margin):
        raise ConfigError(
            f"{option} must be a positive number (the difference that does not matter), got {margin}"
        )
    return float(margin)


def decide(low95: float, high95: float, low90: float, high90: float, margin: float) -> str:
    """The verdict of the rule above from the two intervals."""
    if -margin < low90 and high90 < margin:
        return "equivalent"
    if low95 > 0:
        return "better"
    if high95 < 0:
        return "worse"
    return "undecided"


def _groups(groups: Sequence | None, size: int, unit: str) -> np.ndarray | None:
    if groups is None:
        return None
    labels = list(groups)
    if len(labels) != size:
        raise ConfigError(f"{len(labels)} {unit} labels for {size} paired values")
    missing = sum(label is None or label == "" for label in labels)
    if missing == size:
        return None
    if missing:
        raise ConfigError(
            f"{missing} of {size} examples have no {unit} while the others do: give every one a {unit}"
        )
    if len(set(labels)) < 2:
        raise ConfigError(f"every example is in one {unit}: an interval by {unit} needs at least two")
    return np.asarray(labels)


def paired_verdict(first, second, *, margin: float, groups: Sequence | None = None, unit: str = "article",
                   resamples: int = 2000, seed: int = 0) -> dict:  # fmt: skip
    """The rule on per-example values of two systems over the same examples; resampled by `groups` (named
    `unit`) where given, else by example."""
    check_margin(margin)
    first, second = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if first.shape != second.shape or first.ndim != 1:
        raise ConfigError(f"paired values need the same examples: {first.shape} vs {second.shape}")
    differences = first - second
    if differences.size < 2:
        raise ConfigError(f"a paired comparison needs at least two examples, got {differences.size}")
    labels = _groups(groups, differences.size, unit)
    rng = np.random.default_rng(seed)
    if labels is None:
        drawn = rng.integers(0, differences.size, (resamples, differences.size))
        means = differences[drawn].mean(axis=1)
        unit, units = "example", differences.size
    else:
        names, index = np.unique(labels, return_inverse=True)
        sums = np.bincount(index, weights=differences, minlength=len(names))
        counts = np.bincount(index, minlength=len(names))
        drawn = rng.integers(0, len(names), (resamples, len(names)))
        means = sums[drawn].sum(axis=1) / counts[drawn].sum(axis=1)
        units = len(names)
    low95, high95, low90, high90 = np.percentile(means, [2.5, 97.5, 5.0, 95.0])
    error = float(means.std(ddof=1))
    from scipy.stats import norm

    return _result(float(differences.mean()), low95, high95, low90, high90, margin, unit, units,
                   (norm.ppf(0.975) + norm.ppf(POWER)) * error, n=int(differences.size), method="bootstrap")  # fmt: skip


def seeds_verdict(per_seed: Sequence[float], *, margin: float) -> dict:
    """The rule on each seed's mean paired difference (one value per seed, each over the same examples): a
    t-interval over seeds, whose trainings are the independent units."""
    from scipy.stats import t

    check_margin(margin)
    values = np.asarray(per_seed, dtype=np.float64)
    if values.size < 2:
        raise ConfigError(f"an interval over seeds needs at least two seeds, got {values.size}")
    mean, error, df = float(values.mean()), float(values.std(ddof=1) / np.sqrt(values.size)), values.size - 1
    half95, half90 = t.ppf(0.975, df) * error, t.ppf(0.95, df) * error
    return _result(mean, mean - half95, mean + half95, mean - half90, mean + half90, margin, "seed", int(values.size),
                   (t.ppf(0.975, df) + t.ppf(POWER, df)) * error, n=int(values.size), method="t")  # fmt: skip


def seeded_verdict(first_by_seed, second_by_seed, *, margin: float, groups: Sequence | None = None,
                   unit: str = "article", seed: int = 0) -> dict:  # fmt: skip
    """The rule where each seed scored the same examples: (seeds, examples) values of two systems. Two sources make
    the examples' differences dependent, the seed's training and the example's group; the interval by each is
    computed (seed means resampled by group, and a t-interval over the seeds' mean differences, from two seeds
    on) and the wider one decides, the other kept under "also"."""
    first, second = np.asarray(first_by_seed, dtype=np.float64), np.asarray(second_by_seed, dtype=np.float64)
    if first.ndim != 2 or first.shape != second.shape:
        raise ConfigError(
            f"per-seed values need the same seeds and examples: {first.shape} vs {second.shape}"
        )
    by_group = paired_verdict(first.mean(axis=0), second.mean(axis=0), margin=margin, groups=groups, unit=unit,
                              seed=seed)  # fmt: skip
    if first.shape[0] < 2:
        return by_group
    by_seed = seeds_verdict((first - second).mean(axis=1), margin=margin)
    wider, other = sorted((by_group, by_seed), key=lambda r: r["high"] - r["low"], reverse=True)
    also = {k: other[k] for k in ("low", "high", "unit", "units", "verdict", "minimum_detectable")}
    return {**wider, "n": int(first.shape[1]), "seeds": int(first.shape[0]), "also": also}


def _result(mean, low95, high95, low90, high90, margin, unit, units, detectable, n, method) -> dict:
    return {"mean": mean, "low": float(low95), "high": float(high95), "low90": float(low90), "high90": float(high90),
            "n": n, "unit": unit, "units": units, "coverage": COVERAGE, "method": method, "margin": margin,
            "minimum_detectable": float(detectable),
            "verdict": decide(low95, high95, low90, high90, margin)}  # fmt: skip


def describe(result: dict, digits: int = 3) -> str:
    """ "+0.044 [+0.005, +0.085] better (95% by article, 25 articles; margin 0.02, detectable 0.081)"."""
    number = f"{{:+.{digits}f}}"
    units = result["units"]
    found = result.get("minimum_detectable")
    detectable = "" if found is None else f", detectable {found:.{digits}f}"
    return (f"{number.format(result['mean'])} [{number.format(result['low'])}, {number.format(result['high'])}] "
            f"{result['verdict']} ({result['coverage']:.0%} by {result['unit']}, {units} {result['unit']}"
            f"{'' if units == 1 else 's'}; margin {result['margin']:g}{detectable})")  # fmt: skip


def header(unit: str, margin: float, coverage: float = COVERAGE) -> str:
    """The words a table's difference column carries: its interval's unit and coverage, and the margin."""
    return f"difference [{coverage:.0%} interval by {unit}], verdict at margin {margin:g}"
