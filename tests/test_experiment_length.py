"""`kolong experiment length` on a tiny model and the built-in Korean QA sample (seconds)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kolong.checkpoints import build_tiny_bert_checkpoint
from kolong.cli import app
from kolong.data.samples import korean_qa_dataset
from kolong.experiments.length import (
    bucket_of,
    paired_against,
    parse_variant,
    split_by_article,
    split_capped,
    to_markdown,
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


def test_paired_differences_by_length_bucket(tmp_path):
    """Golden values: per-question F1 in {0, 100}, so every difference is known exactly."""
    gold = [("a", ["서울"], False), ("b", ["부산"], False), ("c", ["대구"], False), ("d", ["광주"], False)]
    tokens = {"a": 100, "b": 300, "c": 3000, "d": 5000}
    answers = {
        "512-sliding": {"a": "서울", "b": "틀림", "c": "틀림", "d": "광주"},
        "4096-sparse": {"a": "서울", "b": "부산", "c": "대구", "d": "광주"},
        "1024-copy": {"a": "틀림"},  # b, c, d missing: scored 0
    }
    for variant, predictions in answers.items():
        (tmp_path / variant).mkdir()
        (tmp_path / variant / "predictions.json").write_text(json.dumps(predictions), encoding="utf-8")
    variants = ("512-sliding", "4096-sparse", "1024-copy", "2048-copy")  # 2048-copy: no predictions file
    articles = {"a": "x", "b": "x", "c": "y", "d": "z"}
    paired = paired_against("512-sliding", variants, tmp_path, gold, tokens, articles)
    assert set(paired) == {"4096-sparse", "1024-copy"}
    sparse, copy = paired["4096-sparse"], paired["1024-copy"]
    assert (sparse["all"]["mean"], sparse["all"]["n"]) == (50.0, 4)
    assert (sparse["<=512"]["mean"], sparse["<=512"]["n"]) == (50.0, 2)
    assert (sparse[">2048"]["mean"], sparse[">2048"]["n"]) == (50.0, 2)
    assert "513-1024" not in sparse and copy["all"]["mean"] == -50.0
    assert copy[">2048"]["low"] <= copy[">2048"]["mean"] == -50.0 <= copy[">2048"]["high"]
    assert (sparse["all"]["articles"], sparse[">2048"]["articles"], sparse["<=512"]["articles"]) == (3, 2, 1)
    assert sparse["<=512"]["article_low"] == sparse["<=512"]["article_high"] == 50.0  # one article: no spread
    assert paired_against("2048-copy", variants, tmp_path, gold, tokens, articles) == {}  # reference not run


def test_paired_table_marks_differences_beyond_noise():
    class Arguments:
        train_questions = eval_questions = max_document_tokens = 0
        epochs, learning_rate, batch_size, seed, sparse_window = 1.0, 3e-4, 16, 42, 256

    row = {"variant": "512-sliding", "kind": "sliding", "exact_match": 1.0, "f1": 6.0, "eval_windows": 9,
           "by_length": {"<=512": {"f1": 6.0, "questions": 3}}}  # fmt: skip
    beyond = {"mean": 5.59, "low": 1.21, "high": 9.98, "n": 134}
    level = {"mean": 0.46, "low": -1.08, "high": 2.08, "n": 414}
    paired = {"reference": "512-sliding", "variants": {"4096-sparse": {"all": level, "<=512": beyond}}}
    text = to_markdown([row], Arguments(), "model", paired)
    assert "| variant - 512-sliding | all | <=512 |" in text
    assert "| 4096-sparse | +0.46 [-1.08, +2.08] | *+5.59 [+1.21, +9.98]* |" in text  # no article intervals
    by_article = {**beyond, "article_low": 0.4, "article_high": 11.0, "articles": 6}
    only_questions = {**beyond, "article_low": -2.0, "article_high": 13.0, "articles": 4}
    only_articles = {**level, "article_low": 0.2, "article_high": 1.5, "articles": 5}
    paired["variants"] = {
        "4096-sparse": {"all": by_article, "<=512": only_questions, "513-1024": only_articles}
    }
    row["by_length"]["513-1024"] = {"f1": 5.0, "questions": 4}
    text = to_markdown([row], Arguments(), "model", paired)
    assert "| *+0.46 [-1.08, +2.08] {+0.20, +1.50; 5}* |" in text  # the article interval alone: not enough
    assert (
        "| 4096-sparse | **+5.59 [+1.21, +9.98] {+0.40, +11.00; 6}** | *+5.59 [+1.21, +9.98] {-2.00, +13.00; 4}* |"
        in text
    )
    assert "variant - " not in to_markdown([row], Arguments(), "model", {"reference": "x", "variants": {}})


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


def test_experiment_end_to_end_and_resume(tmp_path):
    data = tmp_path / "qa.json"
    data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    model = build_tiny_bert_checkpoint(tmp_path / "tiny", max_position_embeddings=64)
    out = tmp_path / "run"
    arguments = [
        "experiment",
        "length",
        "-o",
        str(out),
        "--model",
        str(model),
        "--data",
        str(data),
        "--variants",
        "64-truncate,64-sliding,128-copy,256-sparse",
        "--sparse-window",
        "16",
        "--train-questions",
        "0",
        "--eval-questions",
        "0",
    ]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    assert [r["variant"] for r in results["variants"]] == [
        "64-truncate",
        "64-sliding",
        "128-copy",
        "256-sparse",
    ]
    for row in results["variants"]:
        assert 0 <= row["f1"] <= 100 and row["by_length"]["<=512"]["questions"] > 0
        low, high = row["by_length"]["<=512"]["f1_interval"]
        assert low <= row["by_length"]["<=512"]["f1"] <= high and row["f1_interval"][0] <= row["f1"]
    truncate, sliding = results["variants"][0], results["variants"][1]
    assert sliding["eval_windows"] > truncate["eval_windows"]
    assert (out / "128-copy" / "base" / "config.json").is_file()
    sparse = json.loads((out / "256-sparse" / "base" / "config.json").read_text())
    assert (sparse["attention_pattern"], sparse["attention_window"]) == ("local+global", 16)
    assert results["variants"][3]["eval_windows"] < sliding["eval_windows"]  # longer windows, fewer of them
    assert (out / "f1_by_length.png").read_bytes().startswith(b"\x89PNG")
    assert "| 64-sliding |" in (out / "results.md").read_text()
    assert (out / "results.md").read_text().startswith(f"# kolong experiment length: {tmp_path.name}/tiny\n")
    assert f"{sliding['f1']:.1f} [{sliding['f1_interval'][0]:.1f}, " in (out / "results.md").read_text()

    paired = results["paired_f1_difference"]
    assert paired["reference"] == "64-sliding"
    assert set(paired["variants"]) == {"64-truncate", "128-copy", "256-sparse"}
    for differences in paired["variants"].values():
        low, high = differences["all"]["low"], differences["all"]["high"]
        assert low <= differences["all"]["mean"] <= high and differences["<=512"]["n"] > 0
    assert "| variant - 64-sliding | all |" in (out / "results.md").read_text()

    before = (out / "64-truncate" / "predictions.json").stat().st_mtime_ns
    result = CliRunner().invoke(app, arguments)  # finished variants are skipped
    assert result.exit_code == 0, result.output
    assert (out / "64-truncate" / "predictions.json").stat().st_mtime_ns == before


def test_reference_must_be_a_variant_that_runs(tmp_path):
    arguments = ["experiment", "length", "-o", str(tmp_path / "run"), "--variants", "64-truncate,64-sliding",
                 "--reference", "2048-copy"]  # fmt: skip
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code != 0
    assert "--reference '2048-copy' is not one of --variants (64-truncate, 64-sliding)" in result.output
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_default_reference_is_the_shortest_sliding_variant():
    from kolong.experiments.length import default_reference

    assert default_reference(("512-truncate", "1024-sliding", "512-sliding", "4096-sparse")) == "512-sliding"
    assert default_reference(("2048-copy", "4096-sparse")) == "2048-copy"


def test_max_minutes_stops_fine_tuning_at_a_checkpoint_and_the_rerun_resumes(tmp_path):
    data = tmp_path / "qa.json"
    data.write_text(json.dumps(korean_qa_dataset(), ensure_ascii=False), encoding="utf-8")
    model = build_tiny_bert_checkpoint(tmp_path / "tiny", max_position_embeddings=64)
    out = tmp_path / "run"
    arguments = ["experiment", "length", "-o", str(out), "--model", str(model), "--data", str(data),
                 "--variants", "64-truncate,128-copy", "--train-questions", "0", "--eval-questions", "0", "--epochs", "3"]  # fmt: skip
    result = CliRunner().invoke(app, [*arguments, "--max-minutes", "0.000001"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())  # as the console wrapped it
    assert "stopped by --max-minutes during 64-truncate: fine-tuning: run the same command to resume" in said
    state = json.loads((out / "64-truncate" / "model" / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1 < state["max_steps"]  # one step, saved, stopped
    assert not (out / "results.json").exists() and not (out / "64-truncate" / "predictions.json").exists()
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "results.json").read_text())["variants"]
    assert [row["variant"] for row in rows] == ["64-truncate", "128-copy"]
    results = json.loads((out / "64-truncate" / "model" / "kolong_qa_results.json").read_text())
    assert results["metrics"]["resumed_from"].endswith("checkpoint-1")
