"""kolong.demo: the numbers the README's first command prints."""

from __future__ import annotations

import math

from kolong.demo import build_tiny_bert_checkpoint, run_demo, run_qa_demo


def test_demo_rows_on_a_tiny_model(tmp_path):
    checkpoint = build_tiny_bert_checkpoint(tmp_path / "tiny", max_position_embeddings=64)
    _, rows = run_demo(checkpoint, max_length=256)
    by_method = {row.method: row for row in rows}
    assert set(by_method) == {"interpolate", "interpolate+keep-short", "copy", "last", "random"}
    for kept in ("interpolate+keep-short", "copy", "last", "random"):
        # These leave inputs of <= 64 tokens (the demo's short input is clipped to the table) unchanged.
        assert by_method[kept].short_max_diff == 0.0
        assert math.isclose(by_method[kept].short_cosine, 1.0, abs_tol=1e-5)
    assert by_method["interpolate"].short_max_diff > 0
    assert all(row.reload_ok for row in rows)
    assert all(-1 <= row.long_cosine <= 1 for row in rows)


def test_qa_demo_runs_the_whole_workflow(tmp_path):
    checkpoint = build_tiny_bert_checkpoint(tmp_path / "tiny", max_position_embeddings=64)
    result = run_qa_demo(checkpoint, max_length=128, epochs=2)
    assert (result.articles, result.questions, result.max_length) == (3, 14, 128)
    assert result.train_windows >= 14
    assert 0 <= result.exact_match <= result.f1 <= 100
