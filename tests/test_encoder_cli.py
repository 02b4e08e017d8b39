"""`kolong convert`, `kolong plot positions --scheme` and `kolong bench encoder` end to end."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer
from typer.testing import CliRunner

from conftest import build_tiny
from kolong.bench.encoder import EncoderBenchArguments, run_encoder_benchmark, to_markdown
from kolong.checkpoints import build_tiny_bert_checkpoint
from kolong.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def checkpoint(tmp_path):
    return build_tiny_bert_checkpoint(tmp_path / "tiny", max_position_embeddings=16)


@pytest.mark.parametrize("command", [["convert"], ["bench", "encoder"], ["plot", "positions"]])
def test_help(command):
    result = run(*command, "--help")
    assert result.exit_code == 0 and "Usage" in result.output


def test_convert_writes_an_equivalent_kolong_checkpoint(checkpoint, tmp_path):
    out = tmp_path / "kolong"
    result = run("convert", checkpoint, "-o", out)
    assert result.exit_code == 0, result.output
    assert "position_encoding=learned" in result.output
    source, converted = AutoModel.from_pretrained(checkpoint).eval(), AutoModel.from_pretrained(out).eval()
    assert type(converted).__name__ == "KolongModel"
    tokenizer = AutoTokenizer.from_pretrained(out)
    batch = tokenizer(["한국어 문서입니다", "짧다"], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(converted(**batch).last_hidden_state, source(**batch).last_hidden_state)


def test_convert_can_swap_the_scheme_for_continued_pretraining(tmp_path):
    source = build_tiny("bert", "masked-lm")
    source.save_pretrained(tmp_path / "bert")
    out = tmp_path / "shaw"
    result = run("convert", tmp_path / "bert", "-o", out, "--head", "masked-lm", "--position-encoding", "shaw",
                 "--position-kwargs", '{"max_distance": 4, "value": true}', "--no-tokenizer")  # fmt: skip
    assert result.exit_code == 0, result.output
    model = AutoModelForMaskedLM.from_pretrained(out)
    assert model.config.position_kwargs == {"max_distance": 4, "value": True}
    assert model.kolong.positions.value_tables.shape == (2, 9, 16)


def test_convert_refusals_are_one_line(checkpoint, tmp_path):
    distilbert = build_tiny("distilbert")
    distilbert.save_pretrained(tmp_path / "distil")
    result = run("convert", tmp_path / "distil", "-o", tmp_path / "x", "--no-tokenizer")
    assert result.exit_code == 2 and "model_type='distilbert'" in " ".join(result.output.split())
    result = run("convert", checkpoint, "-o", tmp_path / "y", "--position-encoding", "relative_key")
    assert result.exit_code == 2 and "relative_key" in " ".join(result.output.split())
    result = run("convert", checkpoint, "-o", checkpoint)
    assert result.exit_code == 2 and "--overwrite" in " ".join(result.output.split())
    assert "Traceback" not in result.output


@pytest.mark.parametrize("scheme", ["sinusoidal", "memn2n", "rope", "alibi", "shaw", "t5"])
def test_plot_draws_a_scheme_by_name(scheme, tmp_path):
    out = tmp_path / f"{scheme}.png"
    result = run("plot", "positions", "--scheme", scheme, "--length", 64, "--dim", 16, "-o", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_scheme_errors(tmp_path, checkpoint):
    for args in (
        ["--scheme", "learned"],
        ["--scheme", "bogus"],
        ["--scheme", "shaw", "--position-kwargs", "{x"],
    ):
        result = run("plot", "positions", *args, "-o", tmp_path / "x.png")
        assert result.exit_code == 2, result.output
    result = run("plot", "positions", checkpoint, "--scheme", "rope", "-o", tmp_path / "x.png")
    assert result.exit_code == 2 and "not both" in " ".join(result.output.split())
    result = run("plot", "positions", "-o", tmp_path / "x.png")
    assert result.exit_code == 2


def test_plot_of_a_kolong_checkpoint_table(tmp_path):
    build_tiny("bert").save_pretrained(tmp_path / "bert")
    assert run("convert", tmp_path / "bert", "-o", tmp_path / "k", "--no-tokenizer").exit_code == 0
    result = run("plot", "positions", tmp_path / "k", "-o", tmp_path / "k.png")
    assert result.exit_code == 0, result.output


def test_encoder_benchmark_measures_kolong_and_the_references(tmp_path):
    args = EncoderBenchArguments(
        lengths=[32, 64],
        implementations=["hf-bert", "learned", "shaw", "shaw-naive"],
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
        tokens_per_step=64,
        min_seconds=0.0,
        naive_max_length=32,
    )
    result = run_encoder_benchmark(args, on_step=lambda message: None)
    rows = {(row["implementation"], row["length"]): row for row in result["results"]}
    assert rows[("hf-bert", 32)]["training_speed_vs_hf"] == 1.0
    assert rows[("shaw", 64)]["batch"] == 1 and rows[("shaw", 64)]["inference_tokens_per_s"] > 0
    assert "skipped" in rows[("shaw-naive", 64)]["error"]
    assert "training_memory_vs_learned" in rows[("shaw-naive", 32)]
    markdown = to_markdown(result)
    assert "| shaw-naive |" in markdown and "Not measured" in markdown
    json.dumps(result)


def test_encoder_benchmark_rejects_unknown_implementations():
    with pytest.raises(ValueError, match="unknown implementation 'bert'"):
        run_encoder_benchmark(EncoderBenchArguments(implementations=["bert"]))


def test_paired_speed_measures_both_in_one_process():
    from kolong.bench.encoder import paired_markdown, run_paired_speed

    args = EncoderBenchArguments(lengths=[32], hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=64, vocab_size=100, tokens_per_step=64)  # fmt: skip
    result = run_paired_speed(args, repeats=2, on_step=lambda message: None)
    assert [row["mode"] for row in result["results"]] == ["training", "inference"]
    assert all(row["speedup"] > 0 for row in result["results"])
    assert "| 32 | training |" in paired_markdown(result)
