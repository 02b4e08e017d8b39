"""Verdicts of a finished study's committed results under kolong's verdict rule (`kolong.evaluation.verdicts`),
for results written before the rule existed: `python -m benchmarks.tools.study_verdicts knowledge
docs/experiments/knowledge-nsmc-cpu.json -o docs/experiments/knowledge-nsmc-cpu-verdict` (a diagnostic beside the
commands, not installed with kolong). Writes OUTPUT.json (with the interval's unit and coverage) and OUTPUT.md.

- `knowledge`: kbert - plain accuracy (points) over every review and over the reviews with triples, a t-interval
  over the seeds' paired differences (each seed trains and evaluates on its own split), as `kolong experiment
  knowledge` now prints.
- `extension-init`: each comparison of held-out MLM loss, a t-interval over seeds for a `--seeds` file, else the
  run's stored interval over held-out blocks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def knowledge(result: dict, margin: float) -> dict:
    from kolong.evaluation.verdicts import seeds_verdict

    return {
        name: seeds_verdict([100 * d["mean"] for d in result[key].values()], margin=margin)
        for name, key in (("every review", "difference_by_seed"), ("reviews with triples", "difference_with_triples_by_seed"))
    }  # fmt: skip


def extension_init(result: dict, margin: float) -> dict:
    """Held-out MLM loss, A - B in nats (lower is better, so A is *better* when the difference is below 0). A
    seeds file (`--seeds`): a t-interval over the seeds' paired differences; one run: its stored 95% interval over
    held-out blocks, which also stands in for the unstored 90% one (equivalence then needs the 95% interval inside
    the margin: conservative)."""
    from kolong.evaluation.verdicts import COVERAGE, decide, seeds_verdict

    found = {}
    for name, entries in result["sets"].items():
        for entry in entries if isinstance(entries, list) else entries.get("comparisons", []):
            compared = entry.get("comparison")
            if compared is None:  # one run: the variant beside `against`, A - B
                variant = next(
                    k
                    for k, v in entry.items()
                    if isinstance(v, dict) and k not in ("difference", entry["against"])
                )
                compared = f"{variant} - {entry['against']}"
            label = f"{name}, {entry['steps']} steps, {entry['bucket']}: {compared}"
            if "seeds" in entry:  # A - B in loss; the rule reads B - A, the gain of A
                gain = seeds_verdict(
                    [-one["difference"]["mean"] for one in entry["seeds"].values()], margin=margin
                )
                found[label] = {**gain, "mean": -gain["mean"], "low": -gain["high"], "high": -gain["low"],
                                "low90": -gain["high90"], "high90": -gain["low90"], "measure": "A - B, nats"}  # fmt: skip
                continue
            difference = entry["difference"]
            # the 90% interval is not stored: the 95% one stands in for it, so equivalence is tested conservatively
            gain = (-difference["high"], -difference["low"])
            verdict = decide(*gain, *gain, margin)
            found[label] = {"mean": difference["mean"], "low": difference["low"], "high": difference["high"],
                            "n": difference["n"], "unit": "block", "units": difference["n"], "coverage": COVERAGE,
                            "method": "bootstrap (stored)", "margin": margin, "minimum_detectable": None,
                            "verdict": verdict, "measure": "A - B, nats"}  # fmt: skip
    return found


STUDIES = {"knowledge": (knowledge, 0.5, "accuracy points, kbert - plain"),
           "extension-init": (extension_init, 0.02, "held-out MLM loss, nats; the verdict is A's, lower is better")}  # fmt: skip


def markdown(study: str, found: dict, what: str) -> str:
    from kolong.evaluation.verdicts import describe

    lines = [
        f"# Verdicts: {study} ({what})",
        "",
        "| comparison | difference [95% interval] and verdict |",
        "|---|---|",
    ]
    lines += [
        f"| {name} | {describe(result, 3 if 'nats' in what else 2)} |" for name, result in found.items()
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tools.study_verdicts", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("study", choices=sorted(STUDIES))
    parser.add_argument("results", type=Path, help="the study's results JSON")
    parser.add_argument("-o", "--output", type=Path, required=True, help="OUTPUT.json and OUTPUT.md")
    parser.add_argument("--margin", type=float, help="equivalence margin (default: the study's measure's)")
    args = parser.parse_args(argv)
    from kolong.io import atomic_write_json, atomic_write_text

    rule, default_margin, what = STUDIES[args.study]
    found = rule(json.loads(args.results.read_text(encoding="utf-8")), args.margin or default_margin)
    command = "python -m benchmarks.tools.study_verdicts " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    first = next(iter(found.values()))
    atomic_write_json(args.output.with_suffix(".json"), {
        "results": str(args.results), "study": args.study, "measure": what, "unit": first["unit"],
        "coverage": first["coverage"], "margin": first["margin"], "command": command, "verdicts": found,
    })  # fmt: skip
    atomic_write_text(
        args.output.with_suffix(".md"), markdown(args.study, found, what) + f"\nCommand: `{command}`\n"
    )
    print(markdown(args.study, found, what))
    return found


if __name__ == "__main__":
    main()
