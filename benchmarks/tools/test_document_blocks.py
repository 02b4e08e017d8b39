"""The document-blocks diagnostic (`benchmarks/tools/document_blocks.py`): the verdicts come from the medians and
the rule, and a tiny run times every path of every case and writes its tables."""

from __future__ import annotations

import json

import pytest

from benchmarks.tools import document_blocks


def test_the_verdicts_come_from_the_medians_and_the_rule():
    paths = document_blocks.PATHS
    runs = {"2048": {"17": dict(zip(paths, ([0.2, 0.3, 0.2], [0.05, 0.1, 0.05], [0.6], [0.3], [2.0], [0.25]), strict=True)),
                     "700": dict(zip(paths, ([0.2], [0.25], [0.6], [0.6], [2.0], [1.0]), strict=True))}}  # fmt: skip
    found = document_blocks.summary(runs, {"2048": {"17": 0.1, "700": 0.9}}, max_share=0.6)
    short, long = found["2048"]["17"], found["2048"]["700"]
    assert short["ms"]["sdpa"] == pytest.approx(200.0) and short["blocks_vs_dense"] == pytest.approx(4.0)
    assert short["taken"] == "sdpa-document-blocks" and short["taken_is_faster"]
    assert short["shaw_documents_vs_every_key"] == pytest.approx(2.0)
    assert short["dropout_chunked_vs_eager"] == pytest.approx(8.0)
    assert long["taken"] == "sdpa" and long["taken_is_faster"]
    wrong = document_blocks.summary(runs, {"2048": {"17": 0.7, "700": 0.5}}, max_share=0.6)
    assert not wrong["2048"]["17"]["taken_is_faster"] and not wrong["2048"]["700"]["taken_is_faster"]


def test_packed_rows_hold_documents_of_about_the_mean_length():
    rows = document_blocks.packed_rows(3, 400, 20, seed=0)
    assert rows.shape == (3, 400) and bool((rows[:, 1:] >= rows[:, :-1]).all()) and int(rows.min()) == 1
    assert 10 <= 400 / rows.max(dim=1).values.float().mean() <= 40


def test_the_diagnostic_times_every_path_and_writes_its_tables(tmp_path):
    document_blocks.main(["--lengths", "48,96", "--means", "5,40", "--tokens", "96", "--heads", "2",
                          "--head-size", "8", "--rounds", "1", "--output-dir", str(tmp_path)])  # fmt: skip
    [json_path] = tmp_path.glob("document-blocks-cpu-*.json")
    saved = json.loads(json_path.read_text())
    for length in ("48", "96"):
        for mean in ("5", "40"):
            assert all(len(times) == 1 and times[0] > 0 for times in saved["runs"][length][mean].values())
            assert 0 < saved["shares"][length][mean] <= 1
    markdown = json_path.with_suffix(".md").read_text()
    assert "| 96 | 5 |" in markdown and "Command: `python -m benchmarks.tools.document_blocks" in markdown
