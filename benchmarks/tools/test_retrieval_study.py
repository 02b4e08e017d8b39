"""The retrieval study's paired comparisons (`benchmarks/tools/retrieval_study.py`)."""

from __future__ import annotations

import json

import pytest

from benchmarks.tools import retrieval_study


def test_paired_differences_come_from_the_same_queries_and_resample_their_articles(tmp_path, capsys):
    queries = [f"q{i}" for i in range(20)]
    result = {"rows": [{"reader": "a", "per_query_ndcg10": dict.fromkeys(queries, 1.0)},
                       {"reader": "b", "per_query_ndcg10": {q: 0.5 for q in queries} | {"q0": 1.0}}]}  # fmt: skip
    (tmp_path / "retrieval.json").write_text(json.dumps(result))
    missing = tmp_path / "no-korquad.json"
    [found] = retrieval_study.main([str(tmp_path), "a", "b", "--korquad", str(missing)])
    assert found["difference"]["mean"] == pytest.approx(0.475) and found["verdict"] == "better"
    assert found["difference"]["unit"] == "example"  # no articles known: the queries are the units
    out = capsys.readouterr().out
    assert "| a | b | 1.000 | 0.525 | +0.475" in out and "95% interval by example" in out
    grouped = {**result, "query_groups": {q: f"article-{i % 4}" for i, q in enumerate(queries)}}
    (tmp_path / "retrieval.json").write_text(json.dumps(grouped))
    [by_article] = retrieval_study.main([str(tmp_path), "a", "b", "--margin", "0.6"])
    assert by_article["difference"]["unit"] == "article" and by_article["difference"]["units"] == 4
    assert by_article["verdict"] == "equivalent"  # +0.475 within a margin of 0.6
    with pytest.raises(SystemExit, match="no reader 'c'"):
        retrieval_study.main([str(tmp_path), "a", "c"])
