"""Verdicts of a finished study's committed results under kolong's verdict rule (`kolong.evaluation.verdicts`),
for results written before the rule existed: `python -m benchmarks.tools.study_verdicts knowledge
docs/experiments/knowledge-nsmc-cpu.json -o docs/experiments/knowledge-nsmc-cpu-verdict` (a diagnostic beside the
commands, not installed with kolong). Writes OUTPUT.json (with the interval's unit and coverage) and OUTPUT.md.

- `knowledge`: kbert - plain accuracy (points) over every review and over the reviews with triples, a t-interval
  over the seeds' paired differences (each seed trains and evaluates on its own split), as `kolong experiment
  knowledge` now prints.
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


STUDIES = {"knowledge": (knowledge, 0.5, "accuracy points, kbert - plain")}


def markdown(study: str, found: dict, what: str) -> str:
    from kolong.evaluation.verdicts import describe

    lines = [
        f"# Verdicts: {study} ({what})",
        "",
        "| comparison | difference [95% interval] and verdict |",
        "|---|---|",
    ]
    lines += [f"| {name} | {describe(result, 2)} |" for name, result in found.items()]
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
