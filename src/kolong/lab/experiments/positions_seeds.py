"""`kolong experiment positions --seeds`: the study once per seed, and each claim across seeds.

Each seed runs the whole study in WORK/seed-S (initialisation, masks, data order, the NSMC and KorQuAD
splits). Per seed, a relative scheme is compared with `learned` (and the MeCab vocabulary with plain
WordPiece): held-out MLM loss of the final models, row by row on the same held-out rows with the same
masks (paired bootstrap 95% over rows), and NSMC-style accuracy and KorQuAD F1 (verdicts from the
bootstrap 95% intervals over reviews / questions). A claim holds across seeds only when every seed
gives it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from kolong.evaluation.bootstrap import agreed, paired_difference, verdict
from kolong.io import atomic_write_json, atomic_write_text
from kolong.lab.experiments.positions import PositionStudyArguments, run_position_study
from kolong.lab.experiments.stages import Deadline, run_stage
from kolong.plots.figures import save_figure

BASELINE = "learned"
# (title, task in a run's results, metric, scale to percent); higher is better for both
DOWNSTREAM = (("NSMC-style accuracy", "nsmc", "accuracy", 1.0), ("KorQuAD F1", "korquad", "f1", 1.0))
MASK_DRAWS = 4  # masks per held-out row: a row's loss averages them, so the comparison is not about one draw


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
    deadline = Deadline(args.max_minutes)  # one limit for the whole command, every seed's runs included
    outcomes = {}
    for index, seed in enumerate(seeds):
        folder = work / f"seed-{seed}"
        one = replace(args, seed=seed, work_dir=str(folder), results=str(folder / "results.json"),
                      figures=str(folder), vocab_speed_sizes=args.vocab_speed_sizes if index == 0 else ())  # fmt: skip
        outcomes[seed] = run_position_study(
            one, on_step=lambda message, s=seed: on_step(f"seed {s}: {message}"), deadline=deadline
        )
        if not outcomes[seed]["finished"]:
            return outcomes[seed]
        on_step(f"seed {seed}: held-out loss row by row")
        outcomes[seed]["row_losses"] = run_stage(folder / "result-heldout-rows.json",
                                                 lambda o=outcomes[seed], f=folder, s=seed: heldout_rows(o, f, s))  # fmt: skip
    summary = {
        "finished": True,
        "arguments": {**asdict(args), "seeds": list(seeds)},
        **across_seeds(outcomes),
    }
    summary["vocab_speed"] = outcomes[seeds[0]].get("vocab_speed", [])
    atomic_write_json(args.results, summary)
    atomic_write_text(Path(args.results).with_suffix(".md"), seeds_markdown(summary))
    plot_seeds(summary, outcomes, Path(args.figures) / f"positions-study-{args.scale}-seeds.png")
    return summary


def heldout_rows(outcome: dict, folder: Path, seed: int) -> dict:
    """{run: each held-out row's mean MLM loss} for the MeCab-vocabulary runs (one corpus, so the same rows).

    Rows and masks as `kolong pretrain mlm` evaluates (the corpus's validation blocks, documents packed,
    the collator's seeded eval streams), `MASK_DRAWS` draws per row; every run of a seed sees the same.
    """
    import numpy as np
    import torch
    from transformers import AutoModelForMaskedLM

    from kolong.checkpoints import load_tokenizer
    from kolong.data.corpus import load_corpus
    from kolong.training.mlm_collator import MaskingCollator

    datasets, metadata = load_corpus(folder / "corpus-mecab")
    rows = datasets["validation"].with_format("numpy")
    losses = {}
    for name, run in outcome["runs"].items():
        if run["vocabulary"] != "mecab":
            continue
        model = AutoModelForMaskedLM.from_pretrained(run["mlm"]["model"]).eval()
        collator = MaskingCollator.for_tokenizer(load_tokenizer(run["mlm"]["model"]), seed=seed, packing="documents",
                                                 max_length=metadata["max_length"])  # fmt: skip
        draws = []
        for draw in range(MASK_DRAWS):
            collator.use_stream(f"eval-{draw}", restart=True)
            per_row = []
            with torch.inference_mode():
                for start in range(0, len(rows), 32):
                    batch = collator([rows[i] for i in range(start, min(start + 32, len(rows)))])
                    labels = batch.pop("labels")
                    logits = model(**batch).logits.float()
                    token = torch.nn.functional.cross_entropy(
                        logits.transpose(1, 2), labels, reduction="none"
                    )
                    counted = (labels != -100).sum(dim=1).clamp(min=1)
                    per_row += (token.sum(dim=1) / counted).tolist()
            draws.append(per_row)
        losses[name] = np.mean(draws, axis=0).tolist()
    return losses


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
    Each outcome carries `row_losses` ({run: held-out loss per row}, `heldout_rows`).
    """
    first = next(iter(outcomes.values()))["runs"]
    runs = {name: {str(seed): {"held_out_loss": _last_loss(o["runs"][name]),
                               **{task: _scored(o["runs"][name], task, metric, scale)
                                  for _, task, metric, scale in DOWNSTREAM}}
                   for seed, o in outcomes.items()}
            for name in first}  # fmt: skip
    rows = {str(seed): o["row_losses"] for seed, o in outcomes.items()}
    claims = []
    if BASELINE in first:
        for name, run in first.items():
            if run["vocabulary"] == "mecab" and name != BASELINE:
                claims += _claims(name, BASELINE, runs, rows)
            elif run["vocabulary"] != "mecab":
                claims += _claims(BASELINE, name, runs, None)
    return {"runs": runs, "claims": claims}


def _across(per_seed: dict) -> str:
    return agreed(one["verdict"] for one in per_seed.values())


def _claims(name: str, against: str, runs: dict, rows: dict | None) -> list[dict]:
    """`name` better than `against`: lower held-out loss (paired over rows; same vocabulary only), higher
    downstream scores (unpaired intervals)."""
    seeds = list(runs[name])
    out = []
    if rows is not None:
        per_seed = {}
        for s in seeds:
            difference = paired_difference(rows[s][name], rows[s][against])
            claim = difference["high"] < 0 or difference["low"] > 0
            per_seed[s] = {"difference": difference["mean"], "interval": [difference["low"], difference["high"]],
                           "verdict": ("reproduced" if difference["high"] < 0 else "refuted") if claim
                           else "inconclusive"}  # fmt: skip
        out.append({"run": name, "against": against, "metric": "held-out MLM loss", "per_seed": per_seed,
                    "verdict": _across(per_seed)})  # fmt: skip
    for title, task, _, _ in DOWNSTREAM:
        per_seed = {}
        for s in seeds:
            mine, theirs = runs[name][s][task], runs[against][s][task]
            per_seed[s] = {"difference": mine["value"] - theirs["value"],
                           "verdict": verdict(mine["value"] > theirs["value"], mine, theirs)}  # fmt: skip
        out.append({"run": name, "against": against, "metric": title, "per_seed": per_seed,
                    "verdict": _across(per_seed)})  # fmt: skip
    return out


def seeds_markdown(summary: dict) -> str:
    seeds = [str(s) for s in summary["arguments"]["seeds"]]
    listed = ", ".join(seeds)
    lines = [
        f"# kolong experiment positions across seeds {listed} (scale {summary['arguments']['scale']})",
        "",
        f"Per run, one value per seed ({listed}): held-out MLM loss at the last evaluation; NSMC-style accuracy "
        "and KorQuAD F1 with bootstrap 95% intervals over test reviews / questions.",
        "",
        "| run | held-out MLM loss | NSMC-style accuracy | KorQuAD F1 |",
        "|---|---|---|---|",
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
        "verdict. Held-out loss: the run minus the other on the same held-out rows and masks, paired bootstrap "
        "95% over rows; downstream: whether the two intervals separate. Across seeds: the verdict when every "
        "seed gives it, else inconclusive.",
        "",
        "| run | against | metric | " + " | ".join(f"seed {s}" for s in seeds) + " | across seeds |",
        "|---|---|---|" + "---|" * len(seeds) + "---|",
    ]
    for claim in summary["claims"]:
        cells = []
        for s in seeds:
            one = claim["per_seed"][s]
            if "interval" in one:
                low, high = one["interval"]
                cells.append(f"{one['difference']:+.3f} [{low:+.3f}, {high:+.3f}] {one['verdict']}")
            else:
                cells.append(f"{one['difference']:+.1f} {one['verdict']}")
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
            steps, losses = zip(
                *run["mlm"]["held_out"][1:], strict=True
            )  # step 0 (~ln V) would flatten the rest
            first = seed == next(iter(outcomes))
            axes[0].plot(steps, losses, color=colours[name], alpha=0.7, label=name if first else None)
    axes[0].set(title="held-out MLM loss, every seed\n(MeCab vocabulary; from the first evaluation on)",
                xlabel="step", ylabel="loss")  # fmt: skip
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
        axis.set_title(f"{title} (95% bootstrap)\nseeds {', '.join(seeds)}, light to dark")
    return save_figure(figure, path)
