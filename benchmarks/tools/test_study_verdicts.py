"""Verdicts of committed study results under kolong's rule (`benchmarks/tools/study_verdicts.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.tools import study_verdicts

ROOT = Path(__file__).resolve().parents[2]


def test_the_knowledge_studys_verdict_is_over_its_seeds(tmp_path):
    result = {"difference_by_seed": {"42": {"mean": 0.001}, "43": {"mean": 0.0}, "44": {"mean": -0.011}},
              "difference_with_triples_by_seed": {"42": {"mean": 0.0035}, "43": {"mean": -0.013}, "44": {"mean": 0.0049}}}  # fmt: skip
    (tmp_path / "r.json").write_text(json.dumps(result))
    found = study_verdicts.main(["knowledge", str(tmp_path / "r.json"), "-o", str(tmp_path / "v")])
    every = found["every review"]
    assert (every["low"], every["high"]) == (pytest.approx(-1.99, abs=0.01), pytest.approx(1.32, abs=0.01))
    saved = json.loads((tmp_path / "v.json").read_text())
    assert (saved["unit"], saved["coverage"], saved["margin"]) == ("seed", 0.95, 0.5)
    assert "undecided (95% by seed, 3 seeds" in (tmp_path / "v.md").read_text()


def test_the_committed_verdict_is_what_the_committed_results_give(tmp_path):
    committed = ROOT / "docs" / "experiments" / "knowledge-nsmc-cpu-verdict.json"
    found = study_verdicts.main(["knowledge", str(ROOT / "docs/experiments/knowledge-nsmc-cpu.json"), "-o",
                                 str(tmp_path / "again")])  # fmt: skip
    saved = json.loads(committed.read_text())["verdicts"]
    for name, result in json.loads(json.dumps(found)).items():  # scipy's t quantiles move in the 11th digit
        assert {k: v for k, v in result.items() if not isinstance(v, float)} == {
            k: v for k, v in saved[name].items() if not isinstance(v, float)}  # fmt: skip
        assert {k: pytest.approx(v, rel=1e-9) for k, v in result.items() if isinstance(v, float)} == {
            k: v for k, v in saved[name].items() if isinstance(v, float)}  # fmt: skip
