"""`kolong experiment gbst`: the study end to end at toy size, and its paired intervals on known generations
(the real numbers are in docs/reproductions.md)."""

from __future__ import annotations

import json

import pytest

from kolong.data.text_to_text import Seq2SeqTask, TextPair
from kolong.lab.experiments.gbst import (
    SCALES,
    GbstStudyArguments,
    run_gbst_study,
    settings_of,
    task_intervals,
    to_markdown,
)


def _nli(gold: list[str]) -> Seq2SeqTask:
    pairs = [TextPair(str(i), f"문장 {i}", label) for i, label in enumerate(gold)]
    return Seq2SeqTask("klue-nli", "classification", [], pairs, ["함의", "중립", "모순"])


def test_paired_intervals_on_known_generations():
    gold = ["함의", "중립", "모순"] * 40
    plain = ["함의"] * 120  # right on a third
    gbst = gold[:90] + ["중립"] * 30  # right on 90 + 10
    spans = task_intervals(_nli(gold), {"plain": plain, "gbst": gbst}, resamples=300, seed=0)["accuracy"]
    assert spans["plain"]["mean"] == pytest.approx(100 / 3)
    assert spans["gbst"]["mean"] == pytest.approx(100 * 100 / 120)
    difference = spans["gbst_minus_plain"]
    assert difference["mean"] == pytest.approx(spans["gbst"]["mean"] - spans["plain"]["mean"])
    assert 0 < difference["low"] < difference["mean"] < difference["high"]  # resolved: GBST better
    same = task_intervals(_nli(gold), {"plain": plain, "gbst": plain}, resamples=50, seed=0)["accuracy"]
    assert same["gbst_minus_plain"] == {"mean": 0.0, "low": 0.0, "high": 0.0, "n": 120}


def test_bad_settings():
    with pytest.raises(ValueError, match="scale 'huge'"):
        settings_of(GbstStudyArguments(scale="huge"))
    with pytest.raises(ValueError, match="unknown study setting 'layers'"):
        settings_of(GbstStudyArguments(overrides={"layers": 2}))
    with pytest.raises(ValueError, match="task 'klue-sts'"):
        settings_of(GbstStudyArguments(tasks=("klue-sts",)))
    assert all(set(settings) == set(SCALES["cpu"]) for settings in SCALES.values())


@pytest.mark.shared_data
def test_study_runs_resumes_and_reports(shared_data, tmp_path):
    args = GbstStudyArguments(work_dir=str(tmp_path / "work"), results=str(tmp_path / "results.json"),
                              figures=str(tmp_path), scale="tiny", tasks=("klue-nli", "korquad"),
                              shared_data=str(shared_data), max_minutes=1e-6)  # fmt: skip
    # out of time: pre-training stops at a checkpoint, nothing is stored, and the same call resumes it
    assert run_gbst_study(args, on_step=lambda message: None) == {
        "finished": False,
        "stopped_during": "byte-pretrained",
    }
    assert (
        list((tmp_path / "work" / "byte-pretrained").glob("checkpoint-1"))
        and not (tmp_path / "results.json").exists()
    )
    args.max_minutes = 0
    results = run_gbst_study(args, on_step=lambda message: None)
    assert (
        results["finished"] and results["pretrain"]["resumed"] and not results["uptrain"]["gbst"]["resumed"]
    )
    assert results["uptrain"]["gbst"]["gbst"] and not results["uptrain"]["plain"]["gbst"]
    assert results["uptrain"]["gbst"]["parameters"] > results["uptrain"]["plain"]["parameters"]
    assert results["uptrain"]["plain"]["steps"] == results["uptrain"]["gbst"]["steps"] == 2
    for entry in results["tasks"].values():
        for variant in ("plain", "gbst"):
            run = entry["runs"][variant]
            assert run["train_samples_per_second"] > 0 and run["inference_samples_per_second"] > 0
            assert run["eval_examples"] == 6
        for spans in entry["intervals"].values():
            assert spans["plain"]["n"] == spans["gbst"]["n"] == 6
    assert 0 <= results["tasks"]["korquad"]["answer_in_input"] <= 100
    assert json.loads((tmp_path / "results.json").read_text())["settings"]["finetune_steps"] == 2
    assert (tmp_path / "gbst-study-tiny.png").is_file()
    table = to_markdown(results)
    assert "| klue-nli accuracy |" in table and "| korquad training |" in table
    # a second run reads every stage back instead of training again
    stamp = (tmp_path / "work" / "stage-uptrain-gbst.json").stat().st_mtime_ns
    run_gbst_study(args, on_step=lambda message: None)
    assert (tmp_path / "work" / "stage-uptrain-gbst.json").stat().st_mtime_ns == stamp


@pytest.mark.shared_data
@pytest.mark.parametrize("name", ["klue-ner", "klue-dp", "korquad", "klue-nli"])
def test_example_statistics_equal_the_task_scores(shared_data, name):
    """The per-example counts the bootstrap sums give exactly `score_generations`' numbers, on the full
    evaluation side and on a resample with repeats."""
    import numpy as np

    from kolong.data.text_to_text import load_task, score_generations
    from kolong.lab.experiments.gbst import TASK_METRICS, example_statistics

    task = load_task(name, seed=42, eval_fraction=0.2)
    task.eval = task.eval[:40]
    # half right, a quarter garbled, a quarter empty: every kind of generation
    generations = [p.target if i % 2 == 0 else (p.target[: len(p.target) // 2] if i % 4 == 1 else "")
                   for i, p in enumerate(task.eval)]  # fmt: skip
    statistics = example_statistics(task, generations)
    rng = np.random.default_rng(0)
    for indices in (np.arange(len(task.eval)), rng.integers(0, len(task.eval), len(task.eval))):
        expected = score_generations(task, [task.eval[i] for i in indices], [generations[i] for i in indices])
        for metric in TASK_METRICS[name]:
            assert statistics[metric](indices) == pytest.approx(expected[metric], abs=1e-9), metric
