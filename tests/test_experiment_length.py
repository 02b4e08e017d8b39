"""`kolong experiment length` on a tiny model and the built-in Korean QA sample (seconds)."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.data.samples import korean_qa_dataset
from kolong.lab.experiments.length import parse_variant, split_by_article, split_capped
from kolong.lab.experiments.length_report import (
    Questions,
    answer_bucket_of,
    answer_token_positions,
    bucket_of,
    paired_against,
    to_markdown,
    verdict,
    verdicts,
)


def test_variant_names_and_buckets():
    assert parse_variant("1024-interpolate") == (1024, "interpolate")
    assert [bucket_of(n) for n in (0, 512, 513, 2048, 2049)] == [
        "<=512",
        "<=512",
        "513-1024",
        "1025-2048",
        ">2048",
    ]
    assert [answer_bucket_of(n) for n in (0, 511, 512, 1023, 1024, None)] == [
        "0-511", "0-511", "512-1023", "512-1023", "1024+", None]  # fmt: skip


def test_answer_token_position_counts_article_tokens_before_the_answer(tmp_path):
    from kolong.checkpoints import load_tokenizer
    from kolong.data.squad import Answer, QAExample

    tokenizer = load_tokenizer(build_tiny_bert_checkpoint(tmp_path / "tiny"))
    context = "서울은 한국의 수도이다. 부산은 항구 도시이다."
    start = context.index("부산")
    examples = [QAExample("a", "어디?", context, [Answer("서울", 0)]),
                QAExample("b", "어디?", context, [Answer("부산", start)]),
                QAExample("c", "없음?", context, [], is_impossible=True)]  # fmt: skip
    positions = answer_token_positions(tokenizer, examples)
    before = tokenizer(context[:start], add_special_tokens=False)["input_ids"]
    assert positions == {"a": 0, "b": len(before), "c": None}


def _questions(positions: dict, articles: dict) -> Questions:
    gold = [
        (q, [answer], False) for q, answer in zip(positions, ["서울", "부산", "대구", "광주"], strict=False)
    ]
    return Questions(gold, articles, positions, {q: 100 for q in positions})


def test_paired_differences_by_answer_position_seed_by_seed():
    """Golden values: per-question F1 in {0, 100}, so every difference is known exactly; seeds pair with the
    reference's seed of the same number."""
    questions = _questions({"a": 10, "b": 300, "c": 700, "d": 5000}, {"a": "x", "b": "x", "c": "y", "d": "z"})

    def run(seed, answers):
        return {"seed": seed, "predictions": answers, "f1": 0.0}

    runs = {
        "512-sliding": [run(1, {"a": "서울", "b": "틀림", "c": "틀림", "d": "광주"}),
                        run(2, {"a": "서울", "b": "틀림", "c": "틀림", "d": "틀림"})],
        "4096-sparse": [run(1, {"a": "서울", "b": "부산", "c": "대구", "d": "광주"}),
                        run(2, {"a": "서울", "b": "부산", "c": "대구", "d": "광주"})],
        "1024-copy": [run(1, {"a": "틀림"})],  # b, c, d missing: scored 0; paired with the reference's seed 1
        "2048-copy": [],  # not run yet
    }  # fmt: skip
    paired = paired_against("512-sliding", runs, questions)
    assert set(paired) == {"4096-sparse", "1024-copy"}
    sparse, copy = paired["4096-sparse"], paired["1024-copy"]
    # reference per question over its two seeds: a 100, b 0, c 0, d 50
    assert (sparse["all"]["mean"], sparse["all"]["n"]) == (62.5, 4)
    assert (sparse["512-1023"]["mean"], sparse["1024+"]["mean"]) == (100.0, 50.0)
    # seed 1 of the reference: a 100, b 0, c 0, d 100; the copy scores 0 everywhere
    assert copy["all"]["mean"] == -50.0 and copy["0-511"]["mean"] == -50.0
    assert copy["all"]["unit"] == "article" and "also" not in copy["all"]  # one shared seed: by article alone
    assert (sparse["all"]["articles"], sparse["0-511"]["articles"]) == (3, 1)
    assert sparse["0-511"] | {"mean": 0} == sparse["0-511"] | {  # one article: a mean, no interval
        "mean": 0,
        "low": None,
        "high": None,
        "verdict": "undecided",
        "units": 1,
    }
    assert sparse["all"]["also"]["unit"] in ("seed", "article") and sparse["all"]["margin"] == 1.0
    assert paired_against("2048-copy", runs, questions) == {}  # reference not run


def test_verdicts_follow_the_rule_and_need_a_reference_that_learned():
    better = {"mean": 5.0, "low": 1.0, "high": 9.0, "verdict": "better"}
    worse = {"mean": -5.0, "low": -9.0, "high": -1.0, "verdict": "worse"}
    assert [verdict(d, 45.0) for d in (better, worse)] == ["better", "worse"]
    assert verdict(better, 29.9) == "too weak to decide"
    rows = [{"variant": "512-sliding", "f1": 45.0}]
    paired = {"reference": "512-sliding", "variants": {"2048-copy": {"all": better, "1024+": worse}}}
    assert verdicts(paired, rows) == {"2048-copy": {"all": "better", "1024+": "worse"}}


def _report(reference_f1: float, paired_variants: dict, found: dict) -> dict:
    row = {"variant": "512-sliding", "kind": "sliding", "seeds": [1, 2], "exact_match": 1.0, "f1": reference_f1,
           "exact_match_interval": [0.0, 2.0], "f1_interval": [reference_f1 - 1, reference_f1 + 1],
           "f1_by_seed": {"1": reference_f1 - 0.5, "2": reference_f1 + 0.5}, "eval_windows": 9,
           "train": {"train_windows": 40, "epochs_seen": 2.0},
           "by_answer_position": {"0-511": {"f1": 6.0, "f1_interval": [5.0, 7.0], "questions": 3}},
           "by_document_length": {"<=512": {"f1": 6.0, "questions": 3}}}  # fmt: skip
    return {"settings": {"model": "model", "summary": "settings"}, "variants": [row],
            "paired_f1_difference": {"reference": "512-sliding", "variants": paired_variants},
            "verdicts": found, "seed_wins": {"4096-sparse": "2/2"}}  # fmt: skip


def test_markdown_names_each_verdict_and_a_weak_reference():
    beyond = {"mean": 5.59, "low": 1.21, "high": 9.98, "n": 134, "unit": "article", "units": 6,
              "minimum_detectable": 4.4, "verdict": "better"}  # fmt: skip
    level = {"mean": 0.46, "low": -1.08, "high": 2.08, "n": 414, "unit": "seed", "units": 3,
             "minimum_detectable": 2.1, "verdict": "undecided"}  # fmt: skip
    report = _report(40.0, {"4096-sparse": {"all": level, "0-511": beyond}},
                     {"4096-sparse": {"all": "undecided", "0-511": "better"}})  # fmt: skip
    text = to_markdown(report)
    assert "| reader - 512-sliding | seeds won | all | answer at 0-511 |" in text
    assert ("| 4096-sparse | 2/2 | +0.46 [-1.08, +2.08] by seed (3), detectable 2.10 undecided | "
            "**+5.59 [+1.21, +9.98] by article (6), detectable 4.40 better** |") in text  # fmt: skip
    assert "95% interval by article (or seed, whichever is wider)], verdict at margin 1" in text
    assert (
        "| 512-sliding | 2 | 1.0 [0.0, 2.0] | 40.0 [39.0, 41.0] | 39.5, 40.5 | 6.0 [5.0, 7.0] (n=3) | 40 | 2.00 | 9 |"
        in text
    )
    assert "Too weak to decide" not in text
    weak = to_markdown(
        _report(12.0, {"4096-sparse": {"all": level}}, {"4096-sparse": {"all": "too weak to decide"}})
    )
    assert "**Too weak to decide**: 512-sliding reaches F1 12.0" in weak
    assert "reader - " not in to_markdown(_report(40.0, {}, {}))


def test_length_cap_does_not_move_articles_between_sides():
    from kolong.data.squad import build_long_documents, parse_squad

    examples = build_long_documents(parse_squad(korean_qa_dataset()))
    tokens = {e.article: len(e.context) for e in examples}
    cap = sorted(tokens.values())[len(tokens) // 2]  # drops about half of the articles
    train, evaluation = split_by_article(examples, 0.5, seed=3)
    capped_train, capped_eval = split_capped(examples, 0.5, 3, tokens, cap)
    assert capped_eval == [e for e in evaluation if tokens[e.article] <= cap]
    assert capped_train == [e for e in train if tokens[e.article] <= cap]
    assert len(capped_train) + len(capped_eval) < len(examples)
    assert split_capped(examples, 0.5, 3, tokens, 0) == (train, evaluation)


def test_split_never_shares_an_article():
    from kolong.data.squad import build_long_documents, parse_squad

    examples = build_long_documents(parse_squad(korean_qa_dataset()))
    train, evaluation = split_by_article(examples, 0.34, seed=0)
    assert train and evaluation
    assert not {e.article for e in train} & {e.article for e in evaluation}
    assert len(train) + len(evaluation) == len(examples)


def _length_arguments(tmp_path, out, *more) -> list[str]:
    data = tmp_path / "qa.json"
    if not data.is_file():
        data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    model = tmp_path / "tiny"
    if not (model / "config.json").is_file():
        build_tiny_bert_checkpoint(model, max_position_embeddings=64)
    return ["experiment", "length", "-o", str(out), "--model", str(model), "--data", str(data),
            "--train-questions", "0", "--eval-questions", "0", *map(str, more)]  # fmt: skip


def test_experiment_end_to_end_equal_steps_seeds_and_resume(tmp_path):
    out = tmp_path / "run"
    arguments = _length_arguments(tmp_path, out, "--variants", "64-truncate,64-sliding,128-copy,256-sparse",
                                  "--sparse-window", 16, "--seeds", "1,2")  # fmt: skip
    result = CliRunner().invoke(app, [*arguments, "--keep-models"])
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    rows = results["variants"]
    assert [r["variant"] for r in rows] == ["64-truncate", "64-sliding", "128-copy", "256-sparse"]
    steps = results["settings"]["steps"]
    held_out = sum(
        len(p["qas"]) for a in json.loads((out / "eval.json").read_text())["data"] for p in a["paragraphs"]
    )
    assert steps == -(-rows[1]["train"]["train_windows"] // 8)  # one epoch of 64-sliding's windows, batch 8
    for row in rows:
        assert row["seeds"] == [1, 2] and set(row["f1_by_seed"]) == {"1", "2"}
        assert row["train"]["steps"] == steps  # every reader the same optimiser steps
        assert 0 <= row["f1"] <= 100 and row["f1_interval"][0] <= row["f1"] <= row["f1_interval"][1]
        assert sum(b["questions"] for b in row["by_answer_position"].values()) == held_out
        assert row["f1"] == pytest.approx(sum(row["f1_by_seed"].values()) / 2)
    truncate, sliding, sparse_row = rows[0], rows[1], rows[3]
    assert (
        truncate["train"]["epochs_seen"] > sliding["train"]["epochs_seen"]
    )  # fewer windows, seen more often
    assert (
        sliding["eval_windows"] > truncate["eval_windows"]
        and sparse_row["eval_windows"] < sliding["eval_windows"]
    )
    sparse = json.loads((out / "256-sparse" / "base" / "config.json").read_text())
    assert (sparse["attention_pattern"], sparse["attention_window"]) == ("local+global", 16)
    assert (out / "64-sliding" / "seed-2" / "model" / "config.json").is_file()  # --keep-models
    assert (out / "f1_by_answer_position.png").read_bytes().startswith(b"\x89PNG")
    text = (out / "results.md").read_text()
    assert text.startswith(f"# kolong experiment length: {tmp_path.name}/tiny\n")
    assert "| 64-sliding | 2 | " in text and "| reader - 64-sliding | seeds won | all |" in text
    assert "too weak to decide" in text  # a tiny random model learns no QA
    paired = results["paired_f1_difference"]
    assert paired["reference"] == "64-sliding"
    assert set(paired["variants"]) == set(results["verdicts"]) == {"64-truncate", "128-copy", "256-sparse"}
    for differences in paired["variants"].values():
        found = differences["all"]
        within = found["low"] is not None and found["low"] <= found["mean"] <= found["high"]
        assert within or (found["low"] is None and found["articles"] == 1)

    first = out / "results" / "64-truncate" / "seed-1.json"
    before = first.stat().st_mtime_ns
    result = CliRunner().invoke(app, arguments)  # finished readers are read back, not trained again
    assert result.exit_code == 0, result.output
    assert first.stat().st_mtime_ns == before

    result = CliRunner().invoke(app, [*arguments, "--steps", steps + 1])
    assert result.exit_code != 0
    assert f"seed-1.json was made with other settings: steps={steps} (now {steps + 1})" in " ".join(
        result.output.split()
    )

    # another machine: only the result files travel; the missing one is the only one trained
    carried = tmp_path / "carried"
    shutil.copytree(out / "results", carried)
    (carried / "128-copy" / "seed-2.json").unlink()
    fresh = tmp_path / "fresh"
    arguments = _length_arguments(tmp_path, fresh, "--variants", "64-truncate,64-sliding,128-copy,256-sparse",
                                  "--sparse-window", 16, "--seeds", "1,2", "--results-dir", carried)  # fmt: skip
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert (carried / "128-copy" / "seed-2.json").is_file() and not (
        fresh / "128-copy"
    ).exists()  # models deleted
    assert not (fresh / "64-sliding").exists()  # nothing else trained
    again = json.loads((fresh / "results.json").read_text())["variants"]
    assert [row["f1"] for row in again if row["variant"] != "128-copy"] == [
        row["f1"] for row in rows if row["variant"] != "128-copy"]  # fmt: skip


def test_seeds_are_checked(tmp_path):
    for given, said in (("1,x", "--seeds: 'x' is not a seed"), ("3,3", "--seeds: 3 is given twice")):
        result = CliRunner().invoke(
            app, ["experiment", "length", "-o", str(tmp_path / "run"), "--seeds", given]
        )
        assert result.exit_code != 0 and said in result.output
    assert not (tmp_path / "run").exists()


def test_reference_must_be_a_variant_that_runs(tmp_path):
    arguments = ["experiment", "length", "-o", str(tmp_path / "run"), "--variants", "64-truncate,64-sliding",
                 "--reference", "2048-copy"]  # fmt: skip
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code != 0
    assert "--reference '2048-copy' is not one of --variants (64-truncate, 64-sliding)" in result.output
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_default_reference_is_the_shortest_sliding_variant():
    from kolong.lab.experiments.length import default_reference

    assert default_reference(("512-truncate", "1024-sliding", "512-sliding", "4096-sparse")) == "512-sliding"
    assert default_reference(("2048-copy", "4096-sparse")) == "2048-copy"


def test_max_minutes_stops_fine_tuning_at_a_checkpoint_and_the_rerun_resumes(tmp_path):
    data = tmp_path / "qa.json"
    data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    model = build_tiny_bert_checkpoint(tmp_path / "tiny", max_position_embeddings=64)
    out = tmp_path / "run"
    arguments = ["experiment", "length", "-o", str(out), "--model", str(model), "--data", str(data), "--keep-models",
                 "--variants", "64-truncate,128-copy", "--train-questions", "0", "--eval-questions", "0", "--steps", "3"]  # fmt: skip
    result = CliRunner().invoke(app, [*arguments, "--max-minutes", "0.000001"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())  # as the console wrapped it
    assert (
        "stopped by --max-minutes during 64-truncate, seed 42: fine-tuning: run the same command to resume"
        in said
    )
    model_dir = out / "64-truncate" / "seed-42" / "model"
    state = json.loads((model_dir / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1 < state["max_steps"] == 3  # one step, saved, stopped
    assert not (out / "results.json").exists() and not (out / "results" / "64-truncate").exists()
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "results.json").read_text())["variants"]
    assert [row["variant"] for row in rows] == ["64-truncate", "128-copy"]
    results = json.loads((model_dir / "kolong_qa_results.json").read_text())
    assert results["metrics"]["resumed_from"].endswith("checkpoint-1")
