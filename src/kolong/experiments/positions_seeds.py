"""`kolong experiment positions --seeds`: the study once per seed, and each claim across seeds.

Each seed runs the whole study in WORK/seed-S (initialisation, masks, data order, the NSMC and KorQuAD
splits). Per seed, a relative scheme is compared with `learned` (and the MeCab vocabulary with plain
WordPiece): held-out MLM loss at the last evaluation (one number per seed, on the same held-out blocks,
so the claim is its sign), NSMC-style accuracy and KorQuAD F1 (verdicts from the bootstrap 95%
intervals over reviews / questions). A claim holds across seeds only when every seed gives it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from kolong.evaluation.bootstrap import verdict
from kolong.experiments.positions import PositionStudyArguments, run_position_study
from kolong.io import atomic_write_json, atomic_write_text
from kolong.plots.figures import save_figure

BASELINE = "learned"
# (metric, where in a run's results, scale to percent, higher is better)
DOWNSTREAM = (("NSMC-style accuracy", "nsmc", "accuracy", 100.0), ("KorQuAD F1", "korquad", "f1", 1.0))


def run_position_study_seeds(
    args: PositionStudyArguments, seeds: tuple[int, ...], on_step: Callable[[str], None] = print
) -> dict:
    """The study once per seed (WORK/seed-S, its results and figure there), then every claim across seeds.

    Writes `args.results` (JSON), the same path with `.md`, and `positions-study-SCALE-seeds.png` in
    `args.figures`. Vocabulary sizes are timed in the first seed only (they do not depend on it).
    """
    if len(set(seeds)) < 2:
        raise ValueError("--seeds: give at least two different seeds (one seed: use --seed)")
    work = Path(args.work_dir)
    outcomes = {}
    for index, seed in enumerate(seeds):
        folder = work / f"seed-{seed}"
        one = replace(args, seed=seed, work_dir=str(folder), results=str(folder / "results.json"),
                      figures=str(folder), vocab_speed_sizes=args.vocab_speed_sizes if index == 0 else ())  # fmt: skip
        outcomes[seed] = run_position_study(
            one, on_step=lambda message, s=seed: on_step(f"seed {s}: {message}")
        )
    summary = {"arguments": {**asdict(args), "seeds": list(seeds)}, **across_seeds(outcomes)}
    summary["vocab_speed"] = outcomes[seeds[0]].get("vocab_speed", [])
    atomic_write_json(args.results, summary)
    atomic_write_text(Path(args.results).with_suffix(".md"), seeds_markdown(summary))
    plot_seeds(summary, outcomes, Path(args.figures) / f"positions-study-{args.scale}-seeds.png")
    return summary


def _last_loss(run: dict) -> float:
    return run["mlm"]["held_out"][-1][1]


def _scored(run: dict, task: str, metric: str, scale: float) -> dict:
    """A downstream metric in percent with its interval (the value itself where none was recorded)."""
    value = run[task].get(metric, 0.0) * scale
    span = run[task].get("intervals", {}).get(metric)
    if not span:
        return {"value": value, "low": value, "high": value}
    return {"value": value, "low": span["low"] * scale, "high": span["high"] * scale}


def across_seeds(outcomes: dict[int, dict]) -> dict:
    """{"runs": per run and seed, the last held-out loss and downstream scores; "claims": per comparison}.

    Every MeCab-vocabulary scheme is compared with `learned` (the relative-position claim), and `learned`
    with each plain-WordPiece run (the vocabulary claim; MLM losses over different tokens do not compare).
    """
    first = next(iter(outcomes.values()))["runs"]
    runs = {name: {str(seed): {"held_out_loss": _last_loss(o["runs"][name]),
                               **{task: _scored(o["runs"][name], task, metric, scale)
                                  for _, task, metric, scale in DOWNSTREAM}}
                   for seed, o in outcomes.items()}
            for name in first}  # fmt: skip
    claims = []
    if BASELINE in first:
        for name, run in first.items():
            if run["vocabulary"] == "mecab" and name != BASELINE:
                claims += _claims(name, BASELINE, runs, comparable_loss=True)
            elif run["vocabulary"] != "mecab":
                claims += _claims(BASELINE, name, runs, comparable_loss=False)
    return {"runs": runs, "claims": claims}


def _claims(name: str, against: str, runs: dict, comparable_loss: bool) -> list[dict]:
    """`name` better than `against`: lower held-out loss (same vocabulary only), higher downstream scores."""
    seeds = list(runs[name])
    out = []
    if comparable_loss:
        differences = {s: runs[name][s]["held_out_loss"] - runs[against][s]["held_out_loss"] for s in seeds}
        signs = {"reproduced" if d < 0 else "refuted" for d in differences.values()}
        out.append({"run": name, "against": against, "metric": "held-out MLM loss", "per_seed": {
            s: {"difference": d, "verdict": "reproduced" if d < 0 else "refuted"} for s, d in differences.items()},
            "verdict": signs.pop() if len(signs) == 1 else "inconclusive"})  # fmt: skip
    for title, task, _, _ in DOWNSTREAM:
        per_seed = {}
        for s in seeds:
            mine, theirs = runs[name][s][task], runs[against][s][task]
            per_seed[s] = {"difference": mine["value"] - theirs["value"],
                           "verdict": verdict(mine["value"] > theirs["value"], mine, theirs)}  # fmt: skip
        verdicts = {one["verdict"] for one in per_seed.values()}
        out.append({"run": name, "against": against, "metric": title, "per_seed": per_seed,
                    "verdict": verdicts.pop() if len(verdicts) == 1 else "inconclusive"})  # fmt: skip
    return out


def seeds_markdown(summary: dict) -> str:
    seeds = [str(s) for s in summary["arguments"]["seeds"]]
    header = " | ".join(f"seed {s}" for s in seeds)
    lines = [
        f"# kolong experiment positions across seeds {', '.join(seeds)} (scale {summary['arguments']['scale']})",
        "",
        "Held-out MLM loss at the last evaluation; NSMC-style accuracy and KorQuAD F1 with bootstrap 95% "
        "intervals over test reviews / questions.",
        "",
        f"| run | held-out MLM loss: {header} | NSMC accuracy: {header} | KorQuAD F1: {header} |",
        "|---|" + "---|" * 3,
    ]
    for name, per_seed in summary["runs"].items():
        loss = ", ".join(f"{per_seed[s]['held_out_loss']:.3f}" for s in seeds)
        cells = [
            "; ".join(f"{per_seed[s][task]['value']:.1f} [{per_seed[s][task]['low']:.1f}, "
                      f"{per_seed[s][task]['high']:.1f}]" for s in seeds)
            for _, task, _, _ in DOWNSTREAM
        ]  # fmt: skip
        lines.append(f"| {name} | {loss} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Claims (the paper: relative schemes and the MeCab vocabulary do better): each seed's difference and "
        "verdict (loss: its sign; downstream: whether the intervals separate); across seeds: the verdict "
        "when every seed gives it, else inconclusive.",
        "",
        f"| run | against | metric | {header} | across seeds |",
        "|---|---|---|" + "---|" * len(seeds) + "---|",
    ]
    for claim in summary["claims"]:
        digits = 3 if claim["metric"] == "held-out MLM loss" else 1
        cells = [
            f"{claim['per_seed'][s]['difference']:+.{digits}f} {claim['per_seed'][s]['verdict']}"
            for s in seeds
        ]
        lines.append(f"| {claim['run']} | {claim['against']} | {claim['metric']} | " + " | ".join(cells)
                     + f" | **{claim['verdict']}** |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot_seeds(summary: dict, outcomes: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary["runs"])
    colours = {name: f"C{i}" for i, name in enumerate(names)}
    figure, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for seed, outcome in outcomes.items():
        for name, run in outcome["runs"].items():
            if run["vocabulary"] != "mecab":
                continue
            steps, losses = zip(*run["mlm"]["held_out"], strict=True)
            first = seed == next(iter(outcomes))
            axes[0].plot(steps, losses, color=colours[name], alpha=0.7, label=name if first else None)
    axes[0].set(title="held-out MLM loss, every seed (MeCab vocabulary)", xlabel="step", ylabel="loss")
    axes[0].legend()
    seeds = [str(s) for s in summary["arguments"]["seeds"]]
    width = 0.8 / len(seeds)
    for axis, (title, task, _, _) in zip(axes[1:], DOWNSTREAM, strict=True):
        for j, seed in enumerate(seeds):
            scores = [summary["runs"][n][seed][task] for n in names]
            values = [s["value"] for s in scores]
            errors = [[v - s["low"] for v, s in zip(values, scores, strict=True)],
                      [s["high"] - v for v, s in zip(values, scores, strict=True)]]  # fmt: skip
            positions = [i + (j - (len(seeds) - 1) / 2) * width for i in range(len(names))]
            axis.bar(positions, values, width, yerr=errors, capsize=2, label=f"seed {seed}",
                     color=[colours[n] for n in names], alpha=0.45 + 0.5 * j / max(1, len(seeds) - 1))  # fmt: skip
        axis.set_xticks(range(len(names)), names, rotation=30)
        axis.set_title(f"{title} (95% bootstrap), seeds {', '.join(seeds)}")
    return save_figure(figure, path)
