"""`kolong experiment positions` end to end at toy size (the real numbers are in docs/reproductions.md)."""

from __future__ import annotations

import json

import pytest

from kolong.lab.experiments.positions import PositionStudyArguments, run_position_study, to_markdown

pytestmark = pytest.mark.shared_data
pytest.importorskip("mecab_ko", reason="the study compares MeCab vocabularies: needs the korean extra")

TOY = dict(steps=4, reviews=300, nsmc_limit=60, qa_train_questions=6, qa_eval_questions=3, qa_max_context_chars=1200,
           hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=1, vocab_size=1500,
           batch_size=8)  # fmt: skip


def test_study_runs_resumes_and_reports(shared_data, tmp_path):
    args = PositionStudyArguments(work_dir=str(tmp_path / "work"), results=str(tmp_path / "results.json"),
                                  figures=str(tmp_path), schemes=("shaw",), shared_data=str(shared_data),
                                  overrides=TOY, vocab_speed_sizes=(500, 1000), qa_max_length=128,
                                  max_minutes=1e-6)  # fmt: skip
    # a call that runs out of time stops every training run at a checkpoint: one step per call, and the
    # same command, repeated, finishes the study (as in a time-limited job on a GPU)
    stops = []
    while not stops or stops[-1].startswith("shaw"):
        assert len(stops) < 30, stops
        stops.append(run_position_study(args, on_step=lambda message: None)["stopped_during"])
    assert stops[0] == "shaw: pre-training" and {"shaw: NSMC", "shaw: KorQuAD"} <= set(stops)
    assert stops[-1] == "learned-wordpiece: pre-training"
    args.max_minutes = 0
    results = run_position_study(args, on_step=lambda message: None)
    assert results["finished"]
    assert results["runs"]["shaw"]["mlm"]["resumed"] and "*: resumed" in to_markdown(results)
    assert results["runs"]["shaw"]["mlm"]["held_out"][-1][0] == TOY["steps"]
    assert set(results["runs"]) == {"shaw", "learned-wordpiece"}
    for run in results["runs"].values():
        assert run["mlm"]["held_out"][0][0] == 0  # the curve starts at step 0
        assert 0 <= run["nsmc"]["accuracy"] <= 100 and "f1" in run["korquad"]  # percent
        span = run["korquad"]["intervals"]["f1"]
        assert span["low"] <= run["korquad"]["f1"] <= span["high"]
        assert run["nsmc"]["intervals"]["accuracy"]["n"] == run["nsmc"]["eval_examples"]
    assert [row["vocab_size"] for row in results["vocab_speed"]] == [500, 1000]
    assert (tmp_path / "positions-study-cpu-quick.png").is_file()
    assert json.loads((tmp_path / "results.json").read_text())["runs"]["shaw"]["scheme"] == "shaw"
    assert "| shaw |" in to_markdown(results)
    # a second run reads every stage back instead of training again
    stamp = (tmp_path / "work" / "result-mlm-shaw.json").stat().st_mtime_ns
    run_position_study(args, on_step=lambda message: None)
    assert (tmp_path / "work" / "result-mlm-shaw.json").stat().st_mtime_ns == stamp


def test_bad_settings():
    with pytest.raises(ValueError, match="scale 'huge'"):
        run_position_study(PositionStudyArguments(scale="huge"))
    with pytest.raises(ValueError, match="unknown study setting 'layers'"):
        run_position_study(PositionStudyArguments(overrides={"layers": 2}))


def test_every_scale_has_the_same_settings():
    from kolong.lab.experiments.positions import SCALES, _settings

    assert all(set(settings) == set(SCALES["cpu-quick"]) for settings in SCALES.values())
    mini = _settings(PositionStudyArguments(scale="gpu-mini"))
    assert mini["steps"] * mini["batch_size"] * 128 > 40_000_000  # tokens: beyond the CPU plateau
