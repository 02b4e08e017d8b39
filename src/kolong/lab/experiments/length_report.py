"""What `kolong experiment length` reports: scores over seeds, by answer position, paired, with verdicts.

Every reader answers the same held-out questions, once per seed. A reader's per-question EM / F1 is the
mean over its seeds (the units of every interval); its F1 by seed shows the spread seeds alone make. The
comparison that decides is paired: each reader minus the reference (512-sliding) on the same questions, judged
by kolong's verdict rule (`kolong.evaluation.verdicts`: resampled by article, and over seeds where several ran,
at a margin of `MARGIN` F1 points), and no verdict at all when the reference is too weak for a difference to
mean anything (F1 below `WEAK_REFERENCE_F1`).

Buckets: the answer's position in the article, in tokens from its start (the claim is about answers
a 512-token window cannot see together with the question), and the article's length.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kolong.plots.figures import save_figure

WEAK_REFERENCE_F1 = 30.0
"""Below this F1 the reference has barely learned the task: a verdict would compare noise."""
MARGIN = 1.0
"""F1 points within which two readers are equivalent (`kolong.evaluation.verdicts`)."""

ANSWER_BUCKETS = ((0, 512, "0-511"), (512, 1024, "512-1023"), (1024, 10**9, "1024+"))
DOCUMENT_BUCKETS = (
    (-1, 512, "<=512"),
    (512, 1024, "513-1024"),
    (1024, 2048, "1025-2048"),
    (2048, 10**9, ">2048"),
)


def bucket_of(tokens: int) -> str:
    """The document-length bucket of an article of `tokens` tokens."""
    return next(label for low, high, label in DOCUMENT_BUCKETS if low < tokens <= high)


def answer_bucket_of(position: int | None) -> str | None:
    """The bucket of an answer starting at token `position` of its article (None: no answer)."""
    if position is None:
        return None
    return next(label for low, high, label in ANSWER_BUCKETS if low <= position < high)


def answer_token_positions(tokenizer, examples) -> dict[str, int | None]:
    """{question id: index of the token its first gold answer starts in}, counted in the article alone
    (no question, no special tokens); None for a question without an answer. Each article is tokenised once."""
    positions, ends_of = {}, {}
    for example in examples:
        if not example.answers:
            positions[example.id] = None
            continue
        if example.context not in ends_of:
            offsets = tokenizer(example.context, add_special_tokens=False, return_offsets_mapping=True)
            ends_of[example.context] = [end for _, end in offsets["offset_mapping"]]
        ends = ends_of[example.context]
        positions[example.id] = min(
            bisect.bisect_right(ends, example.answers[0].start), max(0, len(ends) - 1)
        )
    return positions


@dataclass
class Questions:
    """The held-out questions every reader answers, and what each is grouped by."""

    gold: list  # (id, gold texts, is_impossible), as `gold_answers` gives
    articles: dict  # id -> article
    answer_positions: dict  # id -> token index of the answer in its article (None: unanswerable)
    document_tokens: dict  # id -> tokens in its article
    examples: list = field(default_factory=list)  # the QAExamples themselves, for prediction

    def labels(self, grouping: str) -> np.ndarray:
        if grouping == "answer_position":
            return np.asarray([answer_bucket_of(self.answer_positions[q]) or "" for q, _, _ in self.gold])
        return np.asarray([bucket_of(self.document_tokens[q]) for q, _, _ in self.gold])

    def groups(self) -> np.ndarray:
        return np.asarray([self.articles[q] for q, _, _ in self.gold])


GROUPINGS = {"answer_position": ANSWER_BUCKETS, "document_length": DOCUMENT_BUCKETS}


def per_question(questions: Questions, predictions: dict) -> dict[str, np.ndarray]:
    """Per-question EM and F1 in percent (a missing prediction scores 0)."""
    from kolong.evaluation.korquad import question_scores

    scores = question_scores(questions.gold, predictions)
    return {name: 100.0 * np.asarray(scores[name], dtype=np.float64) for name in ("exact_match", "f1")}


def seed_mean(questions: Questions, runs: list[dict]) -> dict[str, np.ndarray]:
    """Per-question EM and F1 averaged over a reader's seeds."""
    scored = [per_question(questions, run["predictions"]) for run in runs]
    return {name: np.mean([s[name] for s in scored], axis=0) for name in ("exact_match", "f1")}


def summarise(variant: str, runs: list[dict], questions: Questions) -> dict:
    """One reader over its seeds: EM / F1 with intervals over questions, F1 by seed, and by bucket."""
    from kolong.evaluation.bootstrap import interval

    def scored(chosen) -> dict:
        out = {}
        for name in ("exact_match", "f1"):
            summary = interval(means[name][chosen])
            out[name], out[f"{name}_interval"] = summary["mean"], [summary["low"], summary["high"]]
        return {**out, "questions": int(chosen.sum())}

    means = seed_mean(questions, runs)
    everything = np.ones(len(questions.gold), dtype=bool)
    first = runs[0]
    row = {"variant": variant, "max_length": first["max_length"], "kind": first["kind"],
           "seeds": [run["seed"] for run in runs], **scored(everything),
           "f1_by_seed": {str(run["seed"]): run["f1"] for run in runs},
           "eval_windows": first["eval_windows"], "train": first["train"]}  # fmt: skip
    for grouping, buckets in GROUPINGS.items():
        labels = questions.labels(grouping)
        row[f"by_{grouping}"] = {
            label: scored(labels == label) for _, _, label in buckets if (labels == label).any()
        }
    return row


def per_seed(questions: Questions, runs: list[dict]) -> dict[int, np.ndarray]:
    """{seed: per-question F1} of one reader."""
    return {run["seed"]: per_question(questions, run["predictions"])["f1"] for run in runs}


def paired_against(reference: str, runs: dict[str, list[dict]], questions: Questions, margin: float = MARGIN,
                   seed: int = 0) -> dict:  # fmt: skip
    """{variant: {"all" | answer bucket: the verdict rule's result}}: the reader's F1 minus the reference's on the
    same questions, seed by seed where both ran a seed (else their seed means), resampled by article and, from two
    shared seeds on, also over seeds (the wider interval decides: `verdicts.seeded_verdict`); {} when the reference
    has not run."""
    from kolong.evaluation.verdicts import seeded_verdict

    if not runs.get(reference):
        return {}
    reference_f1 = per_seed(questions, runs[reference])
    labels, groups = questions.labels("answer_position"), questions.groups()

    def compared(first, second, chosen) -> dict:
        articles = len(set(groups[chosen]))
        if articles < 2:  # one article: no interval by article can be drawn
            mean = float((first[:, chosen] - second[:, chosen]).mean())
            return {"mean": mean, "low": None, "high": None, "n": int(chosen.sum()), "unit": "article", "units": 1,
                    "coverage": 0.95, "margin": margin, "minimum_detectable": None, "verdict": "undecided",
                    "articles": articles}  # fmt: skip
        found = seeded_verdict(
            first[:, chosen], second[:, chosen], margin=margin, groups=groups[chosen], seed=seed
        )
        return {**found, "articles": articles}

    differences = {}
    for variant, variant_runs in runs.items():
        if variant == reference or not variant_runs:
            continue
        mine = per_seed(questions, variant_runs)
        shared = sorted(set(mine) & set(reference_f1))
        if shared:
            first, second = np.stack([mine[s] for s in shared]), np.stack([reference_f1[s] for s in shared])
        else:  # no seed in common: the seed means
            first = np.mean(list(mine.values()), axis=0)[None]
            second = np.mean(list(reference_f1.values()), axis=0)[None]
        differences[variant] = {"all": compared(first, second, np.ones(first.shape[1], dtype=bool))}
        for _, _, label in ANSWER_BUCKETS:
            if (labels == label).any():
                differences[variant][label] = compared(first, second, labels == label)
    return differences


def verdict(difference: dict, reference_f1: float) -> str:
    """The verdict rule's word, or 'too weak to decide' whatever the interval when the reference is below
    WEAK_REFERENCE_F1."""
    if reference_f1 < WEAK_REFERENCE_F1:
        return "too weak to decide"
    return difference["verdict"]


def verdicts(paired: dict, rows: list[dict]) -> dict:
    """{variant: {"all" | bucket: verdict}} against the reference of `paired`."""
    reference = next((row for row in rows if row["variant"] == paired.get("reference")), None)
    if reference is None:
        return {}
    return {
        variant: {key: verdict(difference, reference["f1"]) for key, difference in by_key.items()}
        for variant, by_key in paired.get("variants", {}).items()
    }


def seed_wins(runs: dict[str, list[dict]], reference: str) -> dict[str, str]:
    """{variant: "k/n"}: in how many of the seeds both ran the reader's F1 beat the reference's."""
    reference_f1 = {run["seed"]: run["f1"] for run in runs.get(reference, [])}
    wins = {}
    for variant, variant_runs in runs.items():
        shared = [run for run in variant_runs if run["seed"] in reference_f1]
        if variant != reference and shared:
            won = sum(run["f1"] > reference_f1[run["seed"]] for run in shared)
            wins[variant] = f"{won}/{len(shared)}"
    return wins


def model_label(model: str) -> str:
    """A hub id as given; a local directory with its parent (`runs/base/model` -> `base/model`)."""
    path = Path(str(model))
    return str(model) if not path.exists() or not path.parent.name else f"{path.parent.name}/{path.name}"


def _present(rows: list[dict], grouping: str) -> list[str]:
    return [label for _, _, label in GROUPINGS[grouping] if any(label in r[f"by_{grouping}"] for r in rows)]


def to_markdown(report: dict) -> str:
    """results.md: the readers' scores, the paired differences with verdicts, F1 by article length."""
    rows, settings = report["variants"], report["settings"]
    positions = _present(rows, "answer_position")
    lines = [f"# kolong experiment length: {settings['model']}", "", settings["summary"], "",
             "| reader | seeds | EM | F1 | F1 by seed | " + " | ".join(f"F1, answer at {label}" for label in positions)
             + " | train windows | epochs | eval windows |",
             "|---|---|---|---|---|" + "---|" * len(positions) + "---|---|---|"]  # fmt: skip
    for row in rows:
        cells = [_bucket_cell(row["by_answer_position"].get(label)) for label in positions]
        by_seed = ", ".join(f"{f1:.1f}" for f1 in row["f1_by_seed"].values())
        train = row.get("train", {})
        lines.append(
            f"| {row['variant']} | {len(row['seeds'])} | {_with_interval(row, 'exact_match')} | "
            f"{_with_interval(row, 'f1')} | {by_seed} | "
            + " | ".join(cells)
            + f" | {train.get('train_windows', '')} | {_epochs(train)} | {row['eval_windows']} |"
        )
    paired = report.get("paired_f1_difference") or {}
    if paired.get("variants"):
        lines += _paired_table(paired, report.get("verdicts", {}), report.get("seed_wins", {}), positions)
        reference = next((r for r in rows if r["variant"] == paired["reference"]), None)
        if reference and reference["f1"] < WEAK_REFERENCE_F1:
            lines += ["", f"**Too weak to decide**: {paired['reference']} reaches F1 {reference['f1']:.1f} on the "
                      f"held-out articles, below {WEAK_REFERENCE_F1:.0f}; the readers have barely learned the task, so "
                      "their differences say nothing about reading length. A base that reads the language well, "
                      "more fine-tuning steps (`--steps`) or more training questions make the comparison decide."]  # fmt: skip
    lengths = _present(rows, "document_length")
    lines += ["", "F1 by the article's length in tokens:", "",
              "| reader | " + " | ".join(lengths) + " |", "|---|" + "---|" * len(lengths)]  # fmt: skip
    for row in rows:
        cells = [_bucket_cell(row["by_document_length"].get(label)) for label in lengths]
        lines.append(f"| {row['variant']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _bucket_cell(bucket: dict | None) -> str:
    return f"{_with_interval(bucket, 'f1')} (n={bucket['questions']})" if bucket else ""


def _epochs(train: dict) -> str:
    seen = train.get("epochs_seen")
    return f"{seen:.2f}" if seen is not None else ""


def _paired_table(paired: dict, found: dict, wins: dict, labels: list[str]) -> list[str]:
    from kolong.evaluation.verdicts import header

    reference = paired["reference"]
    margin = paired.get("margin", MARGIN)
    lines = [
        "",
        f"F1 minus {reference}'s on the same questions, {header('article (or seed, whichever is wider)', margin)}: "
        "seed by seed, resampled by article (the questions of one article are not independent) and, with several "
        "seeds, a t-interval over the seeds; the wider decides. equivalent: the 90% interval inside the margin; "
        "better / worse: the 95% interval excludes 0; otherwise undecided. Detectable: the smallest difference "
        "found with 80% power. Seeds won: in how many seeds the reader's F1 beat the reference's.",
        "",
        f"| reader - {reference} | seeds won | all | "
        + " | ".join(f"answer at {label}" for label in labels)
        + " |",
        "|---|---|---|" + "---|" * len(labels),
    ]
    for variant, differences in paired["variants"].items():
        cells = [
            _difference(differences.get(key), found.get(variant, {}).get(key)) for key in ("all", *labels)
        ]
        lines.append(f"| {variant} | {wins.get(variant, '')} | " + " | ".join(cells) + " |")
    return lines


def _difference(difference: dict | None, said: str | None) -> str:
    if not difference:
        return ""
    if difference.get("low") is None:
        text = f"{difference['mean']:+.2f} (one article)"
    else:
        text = (f"{difference['mean']:+.2f} [{difference['low']:+.2f}, {difference['high']:+.2f}] by "
                f"{difference['unit']} ({difference['units']}), detectable {difference['minimum_detectable']:.2f}")  # fmt: skip
    if said in ("better", "worse", "equivalent"):
        return f"**{text} {said}**"
    return f"{text} {said}" if said else text


def _with_interval(scores: dict, name: str) -> str:
    low_high = scores.get(f"{name}_interval")
    return f"{scores[name]:.1f}" + (f" [{low_high[0]:.1f}, {low_high[1]:.1f}]" if low_high else "")


def plot_f1_by_answer_position(report: dict, path: Path) -> Path:
    """F1 by the answer's token position per reader; beside it, each reader minus the reference with its
    interval over articles (the one that decides)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["variants"]
    paired = report.get("paired_f1_difference") or {}
    differences = paired.get("variants") or {}
    labels = _present(rows, "answer_position")
    figure, axes = plt.subplots(
        1, 2 if differences else 1, figsize=(15 if differences else 8, 4.5), squeeze=False
    )
    colours = {row["variant"]: f"C{index}" for index, row in enumerate(rows)}
    axis, width = axes[0][0], 0.8 / max(1, len(rows))
    for index, row in enumerate(rows):
        buckets = [row["by_answer_position"].get(label, {}) for label in labels]
        values = [bucket.get("f1", 0.0) for bucket in buckets]
        low = [b.get("f1_interval", [v, v])[0] for v, b in zip(values, buckets, strict=True)]
        high = [b.get("f1_interval", [v, v])[1] for v, b in zip(values, buckets, strict=True)]
        _bars(axis, index, len(rows), width, values, low, high, colours[row["variant"]],
              f"{row['variant']} (F1 {row['f1']:.1f})")  # fmt: skip
    counts = [max((r["by_answer_position"].get(label, {}).get("questions", 0) for r in rows), default=0)
              for label in labels]  # fmt: skip
    axis.set_xticks(
        range(len(labels)), [f"{label}\n(n={n})" for label, n in zip(labels, counts, strict=True)]
    )
    axis.set(xlabel="answer's first token in the article", ylabel="KorQuAD F1",
             title="F1 by answer position (seed mean, 95% interval over questions)")  # fmt: skip
    axis.legend(fontsize=8)
    if differences:
        keys, axis = ["all", *labels], axes[0][1]
        for index, (variant, by_key) in enumerate(differences.items()):
            cells = [by_key.get(key) or {"mean": 0.0} for key in keys]
            low = [c["mean"] if c.get("low") is None else c["low"] for c in cells]
            high = [c["mean"] if c.get("high") is None else c["high"] for c in cells]
            _bars(axis, index, len(differences), 0.8 / len(differences), [c["mean"] for c in cells], low, high,
                  colours.get(variant), variant)  # fmt: skip
        axis.axhline(0, color="black", linewidth=0.8)
        axis.set_xticks(range(len(keys)), keys)
        axis.set(xlabel="answer position", ylabel=f"F1 minus {paired['reference']}'s (same questions)",
                 title="Paired difference (95% interval by article or seed)")  # fmt: skip
        axis.legend(fontsize=8)
    return save_figure(figure, path, dpi=110)


def _bars(axis, index, count, width, values, low, high, colour, label) -> None:
    errors = [
        [v - lo for v, lo in zip(values, low, strict=True)],
        [hi - v for v, hi in zip(values, high, strict=True)],
    ]
    positions = [i + (index - (count - 1) / 2) * width for i in range(len(values))]
    axis.bar(positions, values, width, yerr=errors, capsize=2, color=colour, label=label)
