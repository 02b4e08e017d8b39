"""`kolong experiment length` on a tiny model and the built-in Korean QA sample (seconds)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kolong.checkpoints import build_tiny_bert_checkpoint
from kolong.cli import app
from kolong.data.samples import korean_qa_dataset
from kolong.experiments.length import bucket_of, parse_variant, split_by_article, split_capped


def test_variant_names_and_buckets():
    assert parse_variant("1024-interpolate") == (1024, "interpolate")
    assert [bucket_of(n) for n in (0, 512, 513, 2048, 2049)] == [
        "<=512",
        "<=512",
        "513-1024",
        "1025-2048",
        ">2048",
    ]


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

    before = (out / "64-truncate" / "predictions.json").stat().st_mtime_ns
    result = CliRunner().invoke(app, arguments)  # finished variants are skipped
    assert result.exit_code == 0, result.output
    assert (out / "64-truncate" / "predictions.json").stat().st_mtime_ns == before
