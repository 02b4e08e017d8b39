"""The retrieval study's paired comparisons (`benchmarks/tools/retrieval_study.py`)."""

from __future__ import annotations

import json

import pytest

from benchmarks.tools import retrieval_study


def test_paired_differences_come_from_the_same_queries(tmp_path, capsys):
    queries = [f"q{i}" for i in range(20)]
    result = {"rows": [{"reader": "a", "per_query_ndcg10": dict.fromkeys(queries, 1.0)},
                       {"reader": "b", "per_query_ndcg10": {q: 0.5 for q in queries} | {"q0": 1.0}}]}  # fmt: skip
    (tmp_path / "retrieval.json").write_text(json.dumps(result))
    [found] = retrieval_study.main([str(tmp_path), "a", "b"])
    assert found["difference"]["mean"] == pytest.approx(0.475) and found["verdict"] == "better"
    assert "| a | b | 1.000 | 0.525 | +0.475" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no reader 'c'"):
        retrieval_study.main([str(tmp_path), "a", "c"])
