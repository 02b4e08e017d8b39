"""The retrieval study's comparisons, from `kolong evaluate retrieval` results: paired differences of nDCG@10
between chosen readers, over the same queries, with bootstrap intervals (`python
benchmarks/tools/retrieval_study.py RESULTS.json "A" "B" ...`, pairs of reader names; a diagnostic beside the
commands, not installed with kolong). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def comparisons(result: dict, pairs: list[tuple[str, str]], seed: int = 0) -> list[dict]:
    """For each (a, b): mean nDCG@10 of both and the paired difference a - b with its 95% interval."""
    from kolong.evaluation.bootstrap import paired_difference
    from kolong.retrieval.evaluate import verdict

    rows = {row["reader"]: row for row in result["rows"]}
    found = []
    for first, second in pairs:
        missing = [name for name in (first, second) if name not in rows]
        if missing:
            raise SystemExit(f"no reader {missing[0]!r} in the results; readers: {', '.join(rows)}")
        ids = sorted(rows[first]["per_query_ndcg10"])
        a = [rows[first]["per_query_ndcg10"][q] for q in ids]
        b = [rows[second]["per_query_ndcg10"][q] for q in ids]
        difference = paired_difference(a, b, seed=seed)
        found.append({"a": first, "b": second, "a_mean": sum(a) / len(a), "b_mean": sum(b) / len(b),
                      "difference": difference, "verdict": verdict(difference)})  # fmt: skip
    return found


def markdown(found: list[dict]) -> str:
    lines = [
        "| reader A | reader B | nDCG@10 A | nDCG@10 B | A - B [95% CI] | verdict |",
        "|---|---|---:|---:|---|---|",
    ]
    for item in found:
        d = item["difference"]
        lines.append(f"| {item['a']} | {item['b']} | {item['a_mean']:.3f} | {item['b_mean']:.3f} | "
                     f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] | {item['verdict']} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="retrieval.json (or its folder)")
    parser.add_argument("readers", nargs="+", help="reader names, two by two: A1 B1 A2 B2 ...")
    args = parser.parse_args(argv)
    if len(args.readers) % 2:
        parser.error("give reader names in pairs")
    path = args.results / "retrieval.json" if args.results.is_dir() else args.results
    result = json.loads(path.read_text(encoding="utf-8"))
    found = comparisons(result, list(zip(args.readers[::2], args.readers[1::2], strict=True)))
    print(markdown(found))
    return found


if __name__ == "__main__":
    main()
