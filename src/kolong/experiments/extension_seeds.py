"""`kolong experiment extension-init --seeds`: the study once per seed, and each comparison across seeds.

Each seed runs the whole study in WORK/seed-S (its masks, random rows and continued pre-training data
order; the continued pre-training corpus is shared); a claim holds across seeds only when every seed
gives the same verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from kolong.evaluation.bootstrap import agreed
from kolong.experiments.extension_init import ExtensionInitArguments, run_extension_init
from kolong.experiments.extension_report import CONTINUED, SET_TITLES
from kolong.experiments.stages import Deadline
from kolong.io import atomic_write_json, atomic_write_text


def run_extension_init_seeds(
    args: ExtensionInitArguments, seeds: tuple[int, ...], on_step: Callable[[str], None] = print
) -> dict:
    """The study once per seed (WORK/seed-S: masks, random rows, data order), then each comparison across seeds.

    Writes WORK/seeds.json and WORK/seeds.md; a claim holds across seeds only when every seed gives the
    same verdict.
    """
    if len(set(seeds)) < 2:
        raise ValueError("--seeds: give at least two different seeds (one seed: use --seed)")
    work = Path(args.work_dir)
    deadline = Deadline(args.max_minutes)  # one limit for the whole command, every seed's runs included
    outcomes = {}
    for seed in seeds:
        on_step(f"seed {seed} ({len(outcomes) + 1} of {len(seeds)})")
        one = replace(args, seed=seed, work_dir=str(work / f"seed-{seed}"),
                      corpus_dir=args.corpus_dir or str(work / f"corpus-{args.length}"))  # fmt: skip
        outcome = run_extension_init(one, on_step, deadline)
        if not outcome["finished"]:
            return outcome
        outcomes[seed] = outcome
    results = {
        "finished": True,
        "arguments": {**asdict(args), "seeds": list(seeds)},
        **across_seeds(outcomes),
    }
    atomic_write_json(work / "seeds.json", results)
    atomic_write_text(work / "seeds.md", seeds_markdown(results))
    return results


def across_seeds(outcomes: dict[int, dict]) -> dict:
    """Per set and comparison (steps, bucket, which two variants): each seed's paired difference and verdicts.

    The comparisons: `random` minus `copy` / `interpolate`, and each extended variant minus the 512 control."""
    sets = {}
    for seed, outcome in outcomes.items():
        for set_name, part in outcome["sets"].items():
            labelled = [(f"random - {c['against']}", c) for c in part["comparisons"]]
            labelled += [(f"{c['method']} - {CONTINUED}", c) for c in part.get("context", [])]
            for comparison, c in labelled:
                key = f"{c['steps']}|{c['bucket']}|{comparison}"
                entry = sets.setdefault(set_name, {}).setdefault(
                    key, {"steps": c["steps"], "bucket": c["bucket"], "comparison": comparison, "seeds": {}}
                )
                entry["seeds"][str(seed)] = {k: c[k] for k in ("difference", "verdict", "paired_verdict")}
    for comparisons in sets.values():
        for entry in comparisons.values():
            entry["verdict"] = agreed(one["verdict"] for one in entry["seeds"].values())
            entry["mean_difference"] = float(
                np.mean([one["difference"]["mean"] for one in entry["seeds"].values()])
            )
    return {"sets": {name: list(comparisons.values()) for name, comparisons in sets.items()}}


def seeds_markdown(results: dict) -> str:
    seeds = results["arguments"]["seeds"]
    lines = [
        f"# kolong experiment extension-init across seeds {', '.join(map(str, seeds))}", "",
        f"Differences of MLM loss (nats): random minus copied/interpolated rows, and extended variants minus "
        f"{CONTINUED} (the 512 base continued as long); each seed's paired difference [95% over blocks] and verdict "
        "from the unpaired intervals; across seeds: the verdict when all seeds agree, else inconclusive.",
    ]  # fmt: skip
    for set_name, comparisons in results["sets"].items():
        lines += ["", f"## {SET_TITLES.get(set_name, set_name)}", "",
                  "| steps | bucket | comparison | " + " | ".join(f"seed {s}" for s in seeds) + " | across seeds |",
                  "|---:|---|---|" + "---|" * len(seeds) + "---|"]  # fmt: skip
        for entry in comparisons:
            cells = []
            for seed in seeds:
                one = entry["seeds"][str(seed)]
                d = one["difference"]
                cells.append(f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] {one['verdict']}")
            lines.append(f"| {entry['steps']} | {entry['bucket']} | {entry['comparison']} | " + " | ".join(cells)
                         + f" | {entry['mean_difference']:+.3f} {entry['verdict']} |")  # fmt: skip
    return "\n".join(lines) + "\n"
