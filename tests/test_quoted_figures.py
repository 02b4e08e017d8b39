"""Every benchmark figure the README and docs quote is checked against the result file it comes from (a
`kolong bench` result under benchmarks/results/, or a diagnostic's under docs/experiments/).

A quoted figure is a link to a result's markdown whose title names the value in the JSON beside it:
`[32.3%](../benchmarks/results/h200/pretrain.md "cells/0/mfu/kolong pretrain mlm")` (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = sorted([ROOT / "README.md", ROOT / "benchmarks" / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)(?:\s+\"([^\"]+)\")?\)")
NUMBER = re.compile(r"-?\d[\d,]*(?:\.(\d+))?")


def resolve(value, path: str):
    """The value at `path` ("a/0/key=value,other=2/b", a trailing " *K" scales it) in parsed JSON."""
    path, _, scale = path.partition(" *")
    for part in path.split("/"):
        if isinstance(value, list):
            if part.lstrip("-").isdigit():
                value = value[int(part)]
                continue
            wanted = dict(item.split("=", 1) for item in part.split(","))
            matches = [i for i in value if all(str(i.get(k)) == v for k, v in wanted.items())]
            if not matches:
                raise KeyError(f"no item with {part}")
            value = matches[0]
        else:
            value = value[part]
    return float(value) * float(scale or 1)


def agrees(text: str, value: float) -> bool:
    """Whether the figure written in `text` is `value` rounded as written (`%`: value x 100)."""
    found = NUMBER.search(text)
    if found is None:
        return False
    decimals = len(found.group(1) or "")
    written = float(found.group(0).replace(",", ""))
    if text[found.end() : found.end() + 1] == "%":
        value *= 100
    return abs(value - written) <= 0.5 * 10**-decimals + 1e-9


def quoted_figures() -> list[tuple[str, str, Path, str]]:
    """(page:line, text, result JSON, path) of every quoted figure."""
    found = []
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for text, target, title in LINK.findall(line):
                if (
                    title
                    and ("benchmarks/results/" in target or "experiments/" in target)
                    and target.endswith(".md")
                ):
                    json_path = (page.parent / target).resolve().with_suffix(".json")
                    found.append((f"{page.relative_to(ROOT)}:{number}", text, json_path, title))
    return found


def result_links() -> list[tuple[str, Path]]:
    """(page:line, file) of every link into benchmarks/results/."""
    found = []
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for _, target, _ in LINK.findall(line):
                if "benchmarks/results" in target and "://" not in target:
                    found.append(
                        (f"{page.relative_to(ROOT)}:{number}", (page.parent / target.split("#")[0]).resolve())
                    )
    return found


@pytest.mark.parametrize(("where", "text", "result", "path"), quoted_figures(), ids=lambda x: str(x)[:60])
def test_a_quoted_figure_is_its_result_files(where, text, result, path):
    assert result.is_file(), f"{where}: {result} does not exist"
    value = resolve(json.loads(result.read_text(encoding="utf-8")), path)
    assert agrees(text, value), f"{where}: '{text}' quotes {path} = {value}"


def test_every_link_into_the_results_points_at_a_file():
    missing = [f"{where}: {path.relative_to(ROOT)}" for where, path in result_links() if not path.exists()]
    assert not missing, "\n".join(missing)


def test_the_readme_quotes_its_figures_with_their_source_and_one_headline_a_row():
    """Each capability row of the README carries at most one figure, and that one names its result file."""
    rows = [
        line
        for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| ")
    ]
    for row in rows:
        marked = [
            text for text, target, title in LINK.findall(row) if title and "benchmarks/results/" in target
        ]
        assert len(marked) <= 1, f"more than one headline figure: {row[:120]}"
        bare = re.sub(r"\[[^\]]*\]\([^)]*\)|`[^`]*`|goals? (of )?[<>=]* ?[\d.]+(x|%)", "", row)
        assert not re.search(r"\d(?:\.\d+)?(?:x|%)(?!\w)", bare), (
            f"a ratio or share without its source: {row[:160]}"
        )


def test_one_current_result_per_benchmark_and_device_class():
    """benchmarks/results/<device>/<benchmark>.{json,md}: no nested folders, no partial or superseded runs."""
    from kolong.lab.bench.arguments import BENCHMARKS

    for folder in (path for path in RESULTS.iterdir() if path.is_dir()):
        assert not [path for path in folder.iterdir() if path.is_dir()], f"{folder.name} holds a folder"
        for json_path in folder.glob("*.json"):
            result = json.loads(json_path.read_text(encoding="utf-8"))
            assert json_path.stem == result["benchmark"] in BENCHMARKS, json_path
            assert result.get("device_class") == folder.name and not result.get("partial"), json_path
            assert result.get("command", "").startswith(f"kolong bench {result['benchmark']}"), json_path
            assert json_path.with_suffix(".md").is_file(), json_path
        assert {p.suffix for p in folder.iterdir()} <= {".json", ".md", ".png"}, folder


@pytest.mark.parametrize(
    ("text", "value", "ok"),
    [("32.3%", 0.3229, True), ("32.3%", 0.3236, False), ("2.68x", 2.6773, True), ("1,316,056 tokens/s", 1316056.2, True),
     ("52.4 ms", 0.05236 * 1000, True), ("0.58x", 0.5851, False)],
)  # fmt: skip
def test_a_figure_agrees_as_rounded(text, value, ok):
    assert agrees(text, value) is ok


def test_paths_read_keys_indexes_and_selectors():
    data = {"cells": [{"position": "shaw", "length": 512, "mfu": {"raw step": 0.1}},
                      {"position": "learned", "length": 2048, "mfu": {"raw step": 0.33}}]}  # fmt: skip
    assert resolve(data, "cells/1/mfu/raw step") == 0.33
    assert resolve(data, "cells/position=learned,length=2048/mfu/raw step") == 0.33
    assert resolve(data, "cells/0/length *2") == 1024
    with pytest.raises(KeyError):
        resolve(data, "cells/position=alibi/mfu")


# -- verdicts ------------------------------------------------------------------------------------------------

VERDICT_WORDS = re.compile(r"\b(better|worse|equivalent|as well as|beats?|ties?)\b", re.IGNORECASE)
DIFFERENCE = re.compile(r"[+\-−]\d[\d.,]*\s*\[[+\-−]?\d")  # a signed difference with its interval: "+0.044 ["
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)")


def verdict_paragraphs(text: str):
    """Paragraphs (blank-line separated, code blocks left out) that state a verdict on a difference with its
    interval: a verdict word and a signed figure followed by its bracketed interval."""
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    for paragraph in re.split(r"\n\s*\n", prose):
        if VERDICT_WORDS.search(paragraph) and DIFFERENCE.search(paragraph):
            yield paragraph


def linked_results(page: Path, paragraph: str) -> list[Path]:
    """The committed JSON results a paragraph links: a .json, or a result's .md with its .json beside it."""
    found = []
    for target in MARKDOWN_LINK.findall(paragraph):
        path = (page.parent / target.split("#")[0]).resolve()
        if path.suffix == ".md":
            path = path.with_suffix(".json")
        if path.suffix == ".json" and path.is_file():
            found.append(path)
    return found


def states_unit_and_coverage(value) -> bool:
    """Whether a result says, somewhere, over what unit its intervals resample and with what coverage."""
    keys: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            keys.update(node)
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(value)
    return {"unit", "coverage"} <= keys


def unbacked_verdicts(pages) -> list[str]:
    problems = []
    for page in pages:
        for paragraph in verdict_paragraphs(page.read_text(encoding="utf-8")):
            results = linked_results(page, paragraph)
            where = f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name}: {paragraph.strip()[:90]!r}"
            if not results:
                problems.append(f"{where} states a verdict and links no committed JSON result")
            elif not any(
                states_unit_and_coverage(json.loads(p.read_text(encoding="utf-8"))) for p in results
            ):
                problems.append(f"{where}: no linked result states its interval's unit and coverage")
    return problems


def test_every_verdict_links_a_result_that_states_its_unit_and_coverage():
    assert not unbacked_verdicts(PAGES)


def test_the_verdict_guard_fails_on_an_unbacked_verdict(tmp_path):
    (tmp_path / "plain.json").write_text('{"mean": 0.1, "low": 0.05, "high": 0.15}')
    (tmp_path / "ruled.json").write_text('{"unit": "article", "coverage": 0.95, "mean": 0.1}')
    page = tmp_path / "page.md"
    page.write_text("Whole documents are better: +0.10 [+0.05, +0.15].\n\n"
                    "Whole documents are better: +0.10 [+0.05, +0.15] ([r](plain.json)).\n\n"
                    "Whole documents are better: +0.10 [+0.05, +0.15] ([r](ruled.json)).\n\n"
                    "```\nbetter +0.10 [+0.05, +0.15]\n```\n")  # fmt: skip
    problems = unbacked_verdicts([page])
    assert (
        len(problems) == 2 and "links no committed JSON" in problems[0] and "unit and coverage" in problems[1]
    )


@pytest.mark.shared_data
def test_the_retrieval_studys_verdicts_recompute_from_its_committed_results(tmp_path):
    """Each committed verdicts-TASK.json of the retrieval study is what its command gives from the committed
    results (the questions' articles read from the shared KorQuAD file)."""
    from benchmarks.tools import retrieval_study

    if not retrieval_study.SHARED_KORQUAD.is_file():
        pytest.skip("needs ../shared/data")
    records = sorted((ROOT / "docs" / "experiments").glob("retrieval-study-*/verdicts-*.json"))
    assert records
    for path in records:
        record = json.loads(path.read_text(encoding="utf-8"))
        result = retrieval_study.merged(retrieval_study.read(ROOT / record["results"]),
                                        [retrieval_study.read(ROOT / also) for also in record.get("also", [])])  # fmt: skip
        pairs = [(c["a"], c["b"]) for c in record["comparisons"]]
        again = retrieval_study.comparisons(result, pairs, margin=record["margin"],
                                            groups=retrieval_study.query_groups(result, retrieval_study.SHARED_KORQUAD))  # fmt: skip
        assert json.loads(json.dumps(again)) == record["comparisons"], path.name


def test_the_retrieval_study_merges_runs_of_the_same_queries_only():
    from benchmarks.tools import retrieval_study

    def run(path, readers, queries=("q1", "q2")):
        rows = [{"reader": r, "per_query_ndcg10": dict.fromkeys(queries, value)} for r, value in readers]
        return {"task": "t", "path": path, "rows": rows}

    first = run("a.json", [("bm25", 1.0), ("x", 0.5)])
    merged = retrieval_study.merged(first, [run("b.json", [("bm25", 0.0), ("y", 0.7)])])
    assert [r["reader"] for r in merged["rows"]] == ["bm25", "x", "y"] and merged["merged"] == ["b.json"]
    assert merged["rows"][0]["per_query_ndcg10"]["q1"] == 1.0  # a reader both name comes from the first
    with pytest.raises(SystemExit, match="not the same task and queries"):
        retrieval_study.merged(first, [run("c.json", [("y", 0.7)], queries=("q1",))])
