"""The regions-threshold diagnostic (`benchmarks/tools/regions_threshold.py`): the summary's ratios and verdicts
come from the medians, and a tiny run times every path of every case and writes its tables."""

from __future__ import annotations

import json

import pytest

from benchmarks.tools import regions_threshold


def test_the_verdicts_come_from_the_medians_and_the_path_taken():
    runs = {"t5": {"512": {"sdpa": [0.1, 0.2, 0.1], "chunked": [0.3, 0.3, 0.4], "sdpa-regions": [0.5, 0.4, 0.6],
                           "sdpa-other": [0.4, 0.4, 0.5]},
                   "4096": {"sdpa": [0.2, 0.2, 0.2], "chunked": [0.8, 0.9, 0.8], "sdpa-regions": [0.6, 0.6, 0.7],
                            "sdpa-other": [0.5, 0.4, 0.5]}}}  # fmt: skip
    taken = {"t5": {"512": "chunked", "4096": "sdpa-other"}}
    found = regions_threshold.summary(runs, taken)
    short, long = found["t5"]["512"], found["t5"]["4096"]
    assert short["ms"] == pytest.approx(
        {"sdpa": 100.0, "chunked": 300.0, "sdpa-regions": 500.0, "sdpa-other": 400.0}
    )
    assert short["fastest"] == "chunked" and short["taken_is_fastest"]
    assert long["fastest"] == "sdpa-other" and long["taken_is_fastest"]
    assert long["vs_chunked"] == pytest.approx({"sdpa-regions": 0.8 / 0.6, "sdpa-other": 0.8 / 0.5})
    assert long["vs_sdpa"]["sdpa-regions"] == pytest.approx(0.2 / 0.6)
    wrong = regions_threshold.summary(runs, {"t5": {"512": "sdpa-regions", "4096": "chunked"}})
    assert not wrong["t5"]["512"]["taken_is_fastest"] and not wrong["t5"]["4096"]["taken_is_fastest"]


def test_the_diagnostic_times_every_path_and_writes_its_tables(tmp_path):
    regions_threshold.main(["--lengths", "48,96", "--tokens", "96", "--heads", "2", "--head-size", "8",
                            "--rounds", "1", "--output-dir", str(tmp_path)])  # fmt: skip
    [json_path] = tmp_path.glob("regions-threshold-cpu-*.json")
    saved = json.loads(json_path.read_text())
    assert saved["reaches"] == {"shaw": 16}
    for scheme in regions_threshold.SCHEMES:
        for length in ("48", "96"):
            timed = saved["runs"][scheme][length]
            assert set(timed) == {"sdpa", *regions_threshold.PATHS[scheme]}
            assert all(len(times) == 1 and times[0] > 0 for times in timed.values())
            assert saved["summary"][scheme][length]["taken"] in ("chunked", *regions_threshold.PATHS[scheme])
    markdown = json_path.with_suffix(".md").read_text()
    assert (
        "| shaw (16) | 96 |" in markdown
        and "Command: `python -m benchmarks.tools.regions_threshold" in markdown
    )
