"""The retrieval study's comparisons, from `kolong evaluate retrieval` results: paired differences of nDCG@10
between chosen readers over the same queries, judged by kolong's verdict rule (`kolong.evaluation.verdicts`):
resampled by article, with an equivalence margin and the minimum detectable difference (`python -m
benchmarks.tools.retrieval_study RESULTS.json "A" "B" ...`, pairs of reader names; a diagnostic beside the
commands, not installed with kolong). Prints a markdown table.

The queries' articles come from the results (`query_groups`, written by `evaluate retrieval` for grouped tasks),
else from the KorQuAD file the questions were asked of (`--korquad`, default the shared dev set): results written
before tasks carried groups have KorQuAD question ids.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SHARED_KORQUAD = (
    Path(__file__).resolve().parents[2].parent
    / "shared"
    / "data"
    / "korquad"
    / "KorQuAD_v1.0_dev.shared.json"
)


def korquad_articles(path: Path) -> dict[str, str]:
    """question id -> the title of the article it was asked of."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    return {qa["id"]: article["title"] for article in data for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]}  # fmt: skip


def query_groups(result: dict, korquad: Path | None) -> dict[str, str] | None:
    """Each query's article: from the results, else from `korquad`; None when neither names every query (the
    queries are then independent, as in the haystack tasks)."""
    ids = next(iter(result["rows"]))["per_query_ndcg10"]
    stored = result.get("query_groups")
    if stored:
        return stored
    if korquad is None or not korquad.is_file():
        return None
    articles = korquad_articles(korquad)
    return {q: articles[q] for q in ids} if all(q in articles for q in ids) else None


def comparisons(result: dict, pairs: list[tuple[str, str]], *, margin: float = 0.02, groups: dict | None = None,
                seed: int = 0) -> list[dict]:  # fmt: skip
    """For each (a, b): mean nDCG@10 of both and the verdict on a - b over the same queries."""
    from kolong.evaluation.verdicts import paired_verdict

    rows = {row["reader"]: row for row in result["rows"]}
    found = []
    for first, second in pairs:
        missing = [name for name in (first, second) if name not in rows]
        if missing:
            raise SystemExit(f"no reader {missing[0]!r} in the results; readers: {', '.join(rows)}")
        ids = sorted(rows[first]["per_query_ndcg10"])
        a = [rows[first]["per_query_ndcg10"][q] for q in ids]
        b = [rows[second]["per_query_ndcg10"][q] for q in ids]
        difference = paired_verdict(
            a, b, margin=margin, seed=seed, groups=[groups[q] for q in ids] if groups else None
        )
        found.append({"a": first, "b": second, "a_mean": sum(a) / len(a), "b_mean": sum(b) / len(b),
                      "difference": difference, "verdict": difference["verdict"]})  # fmt: skip
    return found


def markdown(found: list[dict]) -> str:
    from kolong.evaluation.verdicts import header, plural

    if not found:
        return ""
    first = found[0]["difference"]
    lines = [
        f"A - B: {header(first['unit'], first['margin'])} ({first['units']} {plural(first['units'], first['unit'])}); detectable: the "
        "smallest difference found with 80% power.",
        "",
        "| reader A | reader B | nDCG@10 A | nDCG@10 B | A - B [95% interval] | verdict | detectable |",
        "|---|---|---:|---:|---|---|---:|",
    ]
    for item in found:
        d = item["difference"]
        lines.append(f"| {item['a']} | {item['b']} | {item['a_mean']:.3f} | {item['b_mean']:.3f} | "
                     f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] | {item['verdict']} | "
                     f"{d['minimum_detectable']:.3f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tools.retrieval_study", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("results", type=Path, help="retrieval.json (or its folder)")
    parser.add_argument("readers", nargs="+", help="reader names, two by two: A1 B1 A2 B2 ...")
    parser.add_argument(
        "--margin", type=float, default=0.02, help="equivalence margin of nDCG@10 (default 0.02)"
    )
    parser.add_argument("-o", "--output", type=Path,
                        help="also write the comparisons as OUTPUT.json and OUTPUT.md (the records docs link)")  # fmt: skip
    parser.add_argument(
        "--korquad",
        type=Path,
        default=SHARED_KORQUAD,
        help="KorQuAD JSON the questions came from, for their articles (default: the shared dev set)",
    )
    parser.add_argument("--also", type=Path, action="append", default=[],
                        help="more results of the same task and queries (repeatable): their readers join the first's")  # fmt: skip
    args = parser.parse_args(argv)
    if len(args.readers) % 2:
        parser.error("give reader names in pairs")
    path = args.results / "retrieval.json" if args.results.is_dir() else args.results
    result = merged(read(path), [read(other) for other in args.also])
    pairs = list(zip(args.readers[::2], args.readers[1::2], strict=True))
    found = comparisons(result, pairs, margin=args.margin, groups=query_groups(result, args.korquad))
    print(markdown(found))
    if args.output:
        write_record(
            args.output, path, result, found, args.margin, argv if argv is not None else sys.argv[1:]
        )
    return found


def read(path: Path) -> dict:
    path = path / "retrieval.json" if path.is_dir() else path
    result = json.loads(path.read_text(encoding="utf-8"))
    result["path"] = str(path)
    return result


def merged(first: dict, others: list[dict]) -> dict:
    """`first` with the readers of `others` added after its own: runs of one task over the same queries (a reader
    both name is taken from the first that has it, as `kolong plot retrieval` joins them)."""
    from kolong.plots.retrieval import same_task_merged

    queries = set(next(iter(first["rows"]))["per_query_ndcg10"])
    for other in others:
        asked = set(next(iter(other["rows"]))["per_query_ndcg10"])
        if other.get("task") != first.get("task") or asked != queries:
            raise SystemExit(f"{other['path']}: not the same task and queries as {first['path']}")
    (joined,) = same_task_merged([first, *others])
    return {**joined, "merged": [other["path"] for other in others]}


def write_record(
    output: Path, path: Path, result: dict, found: list[dict], margin: float, argv: list[str]
) -> None:
    """OUTPUT.json (every comparison with its unit, coverage and margin) and OUTPUT.md, written atomically."""
    from kolong.io import atomic_write_json, atomic_write_text

    first = found[0]["difference"]
    command = "python -m benchmarks.tools.retrieval_study " + " ".join(
        f'"{a}"' if " " in a else a for a in argv
    )
    record = {"results": str(path), "also": result.get("merged", []), "task": result.get("task"), "measure": "nDCG@10", "margin": margin,
              "unit": first["unit"], "coverage": first["coverage"], "units": first["units"], "command": command,
              "comparisons": found}  # fmt: skip
    atomic_write_json(output.with_suffix(".json"), record)
    atomic_write_text(
        output.with_suffix(".md"),
        f"# Verdicts: {result.get('task')}\n\n{markdown(found)}\n\nCommand: `{command}`\n",
    )


if __name__ == "__main__":
    main()
