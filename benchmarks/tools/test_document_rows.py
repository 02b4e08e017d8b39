"""The document-rows diagnostic (`benchmarks/tools/document_rows.py`): the verdicts come from the medians and the
rule's choice, and a tiny run times every path of every case and writes its tables."""

from __future__ import annotations

import json

import pytest

from benchmarks.tools import document_rows


def test_the_verdicts_come_from_the_medians_and_the_rules_choice():
    paths = document_rows.PATHS
    runs = {"8": {"300": dict(zip(paths, ([0.3, 0.4, 0.3], [0.15], [0.9], [0.3]), strict=True)),
                  "17": dict(zip(paths, ([0.2], [0.25], [0.5], [0.4]), strict=True))}}  # fmt: skip
    shares = {"8": {"300": {"batch": 0.7, "rows": 0.35, "row_by_row": True},
                    "17": {"batch": 0.15, "rows": 0.14, "row_by_row": False}}}  # fmt: skip
    found = document_rows.summary(runs, shares)
    split, kept = found["8"]["300"], found["8"]["17"]
    assert split["ms"]["blocks: the batch"] == pytest.approx(300.0)
    assert split["blocks_row_by_row_speed"] == pytest.approx(2.0) and split[
        "shaw_row_by_row_speed"
    ] == pytest.approx(3.0)
    assert (
        split["taken"] == "row by row" and split["blocks_taken_is_faster"] and split["shaw_taken_is_faster"]
    )
    assert kept["taken"] == "the batch" and kept["blocks_taken_is_faster"]
    assert not kept["shaw_taken_is_faster"]  # Shaw row by row was faster here, and the rule kept the batch


def test_the_diagnostic_times_every_path_and_writes_its_tables(tmp_path, monkeypatch):
    import dataclasses

    from kolong.attention import options

    monkeypatch.setattr(options, "DEFAULT", dataclasses.replace(options.DEFAULT, document_block_rows=8))
    document_rows.main(["--length", "64", "--batches", "1,3", "--means", "4,30", "--heads", "2", "--head-size", "8",
                        "--rounds", "1", "--output-dir", str(tmp_path)])  # fmt: skip
    [json_path] = tmp_path.glob("document-rows-cpu-*.json")
    saved = json.loads(json_path.read_text())
    for rows in ("1", "3"):
        for mean in ("4", "30"):
            assert all(len(times) == 1 and times[0] > 0 for times in saved["runs"][rows][mean].values())
            read = saved["shares"][rows][mean]
            assert 0 < read["rows"] <= read["batch"] <= 1
    assert not saved["shares"]["1"]["4"]["row_by_row"]  # one row: nothing to split
    markdown = json_path.with_suffix(".md").read_text()
    assert "| 3 | 30 |" in markdown and "Command: `python -m benchmarks.tools.document_rows" in markdown
