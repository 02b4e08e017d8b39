"""The goals `kolong bench encoder` holds kolong to, and how far each measured cell is from its goal.

Relative positions are worth little if they train far slower than learned ones where encoders are
pre-trained, and learned positions must not cost more than HF's `BertModel`. The goals are stated for one
setting per device: on CUDA, BERT-base's shape (12 x 768, 12 heads, FFN 3,072), bf16, compiled, 16,384 tokens
per step, no attention dropout; on CPU, the bench's small model in fp32 on 2 cores. Every run is judged
against its device's goals and its table header states its own setting, so a reader sees when the two differ.
A missed goal is reported with its gap, never averaged away.

A speed ratio is of two steps timed in the same interleaved rounds, so each round gives one ratio, with the load
of that moment on both sides: the goal's value is the median of the rounds' ratios, and its interval the
median's distribution-free interval from their order statistics (`median_interval`). A goal is met or missed
only where the interval lies wholly on one side of the target; otherwise it is undecided, whichever side its
median falls on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

RELATIVE = ("shaw", "shaw-value", "t5", "alibi", "rope")
MIN_ROUNDS = 5  # fewer, and even min-max holds the median less than 94% of the time: no interval
VS = "vs learned positions (the faster of learned and HF BertModel)"


def _key(name: str) -> Callable[[dict, dict], float | None]:
    return lambda cell, cells: cell.get(name)


def _vs_learned_positions(mode: str) -> Callable[[dict, dict], float | None]:
    """`mode`'s tokens/s over the faster of kolong's learned positions and HF BertModel at the same length.

    The two compute the same thing, so on a shared machine their gap is noise, and a ratio to the slower one
    would flatter the scheme (CPU runs have measured HF BertModel well above learned at 2,048 tokens).
    A cell without absolute figures (a stored result recounted) falls back to its ratio to learned."""
    key = f"{mode}_tokens_per_s"

    def value(cell: dict, cells: dict) -> float | None:
        bar = _bar(cell, cells, key)
        if cell.get(key) and bar:
            return cell[key] / bar[key]
        return cell.get(f"{key}_vs_learned")

    return value


def _bar(cell: dict, cells: dict, key: str) -> dict | None:
    """The cell of the faster, by `key`'s median, of learned positions and HF BertModel at `cell`'s length."""
    bars = [cells.get((name, cell["length"]), {}) for name in ("learned", "hf-bert")]
    return max((bar for bar in bars if bar.get(key)), key=lambda bar: bar[key], default=None)


def _rounds_vs_learned_positions(mode: str) -> Callable[[dict, dict], list[float] | None]:
    """The same ratio round by round: the bar (the faster of learned and HF BertModel by median) over the cell's
    seconds in each round they were both timed."""
    key, seconds = f"{mode}_tokens_per_s", f"{mode}_seconds"

    def rounds(cell: dict, cells: dict) -> list[float] | None:
        bar = _bar(cell, cells, key)
        if not cell.get(seconds) or not bar or not bar.get(seconds):
            return None
        return _paired(bar[seconds], cell[seconds])

    return rounds


def _paired(numerators: list[float], denominators: list[float]) -> list[float] | None:
    """numerator / denominator of each round, or None where the two were not timed in the same rounds."""
    if len(numerators) != len(denominators):
        return None
    return [a / b for a, b in zip(numerators, denominators, strict=True)]


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float, float]:
    """(median, low, high, coverage) of per-round values: [x_(k), x_(n+1-k)] of the sorted values, k the largest
    with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2, which holds the population median with probability
    `coverage` >= `confidence` whatever the distribution (11 rounds: the 2nd and 10th, 98.8%). Below 6 rounds no
    k reaches it: min-max, with its own coverage (1 - 2^(1 - n))."""
    ordered, n = sorted(values), len(values)

    def below(k: int) -> float:  # P(X <= k - 1)
        return sum(math.comb(n, i) for i in range(k)) / 2**n

    k = 1
    while k + 1 <= (n + 1) // 2 and below(k + 1) <= (1 - confidence) / 2:
        k += 1
    return statistics.median(ordered), ordered[k - 1], ordered[n - k], 1 - 2 * below(k)


def _learned_vs_hf(cell: dict, cells: dict) -> float | None:
    """learned's training tokens/s over HF BertModel's at the same length."""
    hf = cells.get(("hf-bert", cell["length"]), {}).get("training_tokens_per_s")
    return cell["training_tokens_per_s"] / hf if hf and "training_tokens_per_s" in cell else None


def _rounds_learned_vs_hf(cell: dict, cells: dict) -> list[float] | None:
    hf = cells.get(("hf-bert", cell["length"]), {}).get("training_seconds")
    return _paired(hf, cell["training_seconds"]) if hf and cell.get("training_seconds") else None


@dataclass(frozen=True)
class Goal:
    text: str
    implementations: tuple[str, ...]
    value: Callable[[dict, dict], float | None]  # (cell, every cell by (implementation, length)) -> measured
    applies: Callable[[int], bool]  # at which lengths
    target: float
    at_least: bool = True
    percent: bool = False  # a fraction shown in percent (MFU); otherwise a ratio shown as 1.23x
    rounds: Callable[[dict, dict], list[float] | None] | None = None  # the value round by round, where paired


GOALS: dict[str, tuple[Goal, ...]] = {
    "cuda": (
        Goal(f"training tokens/s {VS}, up to 2,048 tokens", RELATIVE, _vs_learned_positions("training"),
             lambda n: n <= 2048, 0.8, rounds=_rounds_vs_learned_positions("training")),
        Goal(f"training tokens/s {VS}, 8,192 tokens and longer", RELATIVE, _vs_learned_positions("training"),
             lambda n: n >= 8192, 0.6, rounds=_rounds_vs_learned_positions("training")),
        Goal(f"inference tokens/s {VS}", RELATIVE, _vs_learned_positions("inference"), lambda n: True, 0.8,
             rounds=_rounds_vs_learned_positions("inference")),
        Goal("training peak memory vs learned, 2,048 tokens and longer", RELATIVE,
             _key("training_peak_mb_vs_learned"), lambda n: n >= 2048, 1.3, at_least=False),
        Goal("inference peak memory vs learned, 2,048 tokens and longer", RELATIVE,
             _key("inference_peak_mb_vs_learned"), lambda n: n >= 2048, 1.3, at_least=False),
        Goal("learned vs HF BertModel, training tokens/s", ("learned",), _learned_vs_hf, lambda n: True, 1.0,
             rounds=_rounds_learned_vs_hf),
        Goal("learned, training MFU at 512 tokens", ("learned",), _key("training_mfu"), lambda n: n == 512, 0.4,
             percent=True),
    ),
    "cpu": (
        Goal(f"training tokens/s {VS}, up to 2,048 tokens", ("shaw", "t5"), _vs_learned_positions("training"),
             lambda n: n <= 2048, 0.8, rounds=_rounds_vs_learned_positions("training")),
        Goal("Shaw's training peak memory growth vs learned", ("shaw",), _key("training_peak_mb_vs_learned"),
             lambda n: True, 1.3, at_least=False),
    ),
}  # fmt: skip


def judged(value: float, target: float, at_least: bool = True, interval: tuple | None = None) -> dict:
    """A measured value against its goal: met or not, and the gap (value - target: below 0 a shortfall of an
    at-least goal, above 0 an excess of an at-most one). Every bench's goals are judged here. With an
    `interval` (low, high, coverage) the verdict is `decided` only where it lies wholly on one side of the
    target."""
    met = value >= target if at_least else value <= target
    row = {"value": value, "target": target, "at_least": at_least, "met": met, "gap": value - target}
    if interval is not None:
        low, high, coverage = interval
        decided = low >= target or high < target if at_least else high <= target or low > target
        row.update({"low": low, "high": high, "coverage": coverage, "decided": decided})
    return row


def goal_rows(cells: list[dict], device: str) -> list[dict]:
    """One row per (goal, implementation, length) that this run measured: the value, the target, met or not,
    and the gap (value - target: below 0 a shortfall of an at-least goal, above 0 an excess of an at-most one)."""
    by_key = {(cell["implementation"], cell["length"]): cell for cell in cells}
    rows = []
    for goal in GOALS["cuda" if device.startswith("cuda") else "cpu"]:
        for (name, length), cell in by_key.items():
            if name not in goal.implementations or not goal.applies(length):
                continue
            value, interval = goal.value(cell, by_key), None
            rounds = goal.rounds(cell, by_key) if goal.rounds is not None else None
            if rounds and len(rounds) >= MIN_ROUNDS:
                value, low, high, coverage = median_interval(rounds)
                interval = (low, high, coverage)
            if value is None:
                continue
            rows.append({"goal": goal.text, "implementation": name, "length": length, "percent": goal.percent,
                         **judged(value, goal.target, goal.at_least, interval)})  # fmt: skip
    return rows


def goal_verdict(row: dict) -> str:
    """met / missed, or undecided where the value's interval holds the target (it then decides nothing)."""
    if row.get("decided") is False:
        return "undecided"
    return "met" if row["met"] else "missed"


def _cell(row: dict) -> str:
    if row["percent"]:
        value, gap = f"{row['value']:.1%}", f"{abs(row['gap']) * 100:.1f} points"
    else:
        value, gap = f"{row['value']:.2f}x", f"{abs(row['gap']):.2f}x"
    if "low" in row:
        value += f" [{row['low']:.2f}, {row['high']:.2f}]"
    verdict = goal_verdict(row)
    if verdict == "missed":
        return f"**{value} missed: {gap} {'short' if row['at_least'] else 'over'}**"
    return f"{value} {verdict}"


def goals_markdown(rows: list[dict], args: dict) -> list[str]:
    """The goals table: one line per (goal, implementation), a cell per length, each missed one with its gap."""
    lengths = sorted({row["length"] for row in rows})
    verdicts = [goal_verdict(row) for row in rows]
    met, missed, undecided = (verdicts.count(word) for word in ("met", "missed", "undecided"))
    device = "CUDA: BERT-base's shape, bf16, compiled, 16,384 tokens per step, no attention dropout" if str(
        args["device"]).startswith("cuda") else "CPU: the bench's small model, fp32, 2 cores"  # fmt: skip
    intervals = [row["coverage"] for row in rows if "coverage" in row]
    lines = [
        f"## Goals (set for {device}): {met} met, {missed} missed, {undecided} undecided of {len(rows)}",
        "",
    ]
    if intervals:
        lines += [f"Speed ratios: the median of the per-round ratios (the two steps timed in the same rounds) and, in "
                  f"brackets, the median's interval from the rounds' order statistics (coverage "
                  f"{min(intervals):.1%} or more). met / missed: the interval lies wholly on one side of the target; "
                  "undecided: it holds the target.", ""]  # fmt: skip
    lines += ["| goal | target | implementation | " + " | ".join(f"{n:,}" for n in lengths) + " |",
              "|---|---:|---|" + "---:|" * len(lengths)]  # fmt: skip
    table: dict[tuple[str, str], dict[int, dict]] = {}
    for row in rows:
        table.setdefault((row["goal"], row["implementation"]), {})[row["length"]] = row
    for (goal, name), by_length in table.items():
        first = next(iter(by_length.values()))
        sign = ">=" if first["at_least"] else "<="
        target = f"{first['target']:.0%}" if first["percent"] else f"{first['target']}x"
        cells = [_cell(by_length[n]) if n in by_length else "—" for n in lengths]
        lines.append(f"| {goal} | {sign} {target} | {name} | " + " | ".join(cells) + " |")
    return lines
