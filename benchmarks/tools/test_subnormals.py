"""The subnormal-float diagnostic (`benchmarks/tools/subnormals.py`): both settings measured, each in its own
process, and the ratios derived from the medians."""

from __future__ import annotations

import json

import pytest

from benchmarks.tools import subnormals


def test_the_ratios_come_from_the_medians_of_each_setting():
    runs = {"off": {"none": [0.2, 0.3, 0.25], "alibi": [1.0, 1.5, 1.2]},
            "on": {"none": [0.2, 0.24, 0.22], "alibi": [0.3, 0.25, 0.2]}}  # fmt: skip
    found = subnormals.summary(runs)
    assert found["seconds"]["off"] == {"none": 0.25, "alibi": 1.2}
    assert found["alibi_vs_none"]["off"] == pytest.approx(0.25 / 1.2)
    assert found["flush_speedup"] == pytest.approx({"none": 0.25 / 0.22, "alibi": 1.2 / 0.25})


def test_the_diagnostic_runs_both_settings_and_writes_its_tables(tmp_path):
    subnormals.main(["--length", "64", "--heads", "2", "--head-size", "8", "--rounds", "1", "--calls", "1",
                     "--output-dir", str(tmp_path)])  # fmt: skip
    [json_path] = tmp_path.glob("subnormals-cpu-*.json")
    saved = json.loads(json_path.read_text())
    for flush in ("off", "on"):
        assert all(len(saved["runs"][flush][bias]) == 1 and saved["runs"][flush][bias][0] > 0
                   for bias in subnormals.BIASES)  # fmt: skip
    markdown = json_path.with_suffix(".md").read_text()
    assert (
        "| flushed to zero (`kolong`) |" in markdown
        and "Command: `python -m benchmarks.tools.subnormals" in markdown
    )
