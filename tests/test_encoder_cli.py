"""`kolong convert`, `kolong plot positions --scheme` and `kolong bench encoder` end to end."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer
from typer.testing import CliRunner

from conftest import build_tiny
from kolong.cli import app
from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint
from kolong.lab.bench.encoder import EncoderBenchArguments, EncoderBenchmark, to_markdown
from kolong.lab.bench.harness import run as run_benchmark

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
        implementations=["hf-bert", "hf-modernbert", "learned", "shaw", "t5-eager", "shaw-naive"],
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
        tokens_per_step=64,
        repeats=2,
        naive_max_length=32,
        peak_tflops=1.0,
        memory=False,
    )
    result = run_benchmark(EncoderBenchmark(), args)
    rows = {(row["implementation"], row["length"]): row for row in result["results"]}
    assert rows[("learned", 32)]["training_tokens_per_s_vs_learned"] == 1.0
    assert rows[("shaw", 64)]["batch"] == 1 and rows[("shaw", 64)]["inference_tokens_per_s"] > 0
    assert rows[("hf-modernbert", 64)]["training_tokens_per_s"] > 0
    assert 0 < rows[("t5-eager", 32)]["training_mfu"] < 1
    assert "skipped" in rows[("shaw-naive", 64)]["training_error"]
    steps = {(t["step"], t["length"], t["mode"]) for t in result["timings"]}
    assert ("hf-bert", 64, "training") in steps and ("shaw", 64, "inference") in steps  # one interleaved run
    markdown = to_markdown(result)
    assert "| shaw-naive |" in markdown and "Not measured" in markdown and "Training MFU" in markdown
    json.dumps(result)


def test_encoder_benchmark_measures_memory_in_a_worker_process_per_cell():
    args = EncoderBenchArguments(lengths=[32], implementations=["learned", "shaw-naive"], hidden_size=32,
                                 num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100,
                                 tokens_per_step=64, repeats=1)  # fmt: skip
    rows = {row["implementation"]: row for row in run_benchmark(EncoderBenchmark(), args)["results"]}
    assert rows["learned"]["training_peak_mb_vs_learned"] == 1.0
    assert (
        rows["shaw-naive"]["inference_peak_mb"] >= 0 and "training_peak_mb_vs_learned" in rows["shaw-naive"]
    )


def test_a_failing_memory_worker_is_reported_and_the_other_cells_kept(tmp_path, monkeypatch):
    """A real worker process that fails (exit 3) for one implementation: its cell says why, the others keep their
    memory, and the report lists it as not measured."""
    from kolong.lab.bench import encoder
    from kolong.lab.bench.memory import run_worker
    from test_bench_memory import failing_worker_module

    module = failing_worker_module(tmp_path, monkeypatch)
    real = encoder._memory_worker

    def worker(name, length, args):
        if name == "shaw-naive":
            return run_worker(module, {}, {"implementation": name, "length": length})
        return real(name, length, args)

    monkeypatch.setattr(encoder, "_memory_worker", worker)
    args = EncoderBenchArguments(lengths=[32], implementations=["learned", "shaw-naive"], hidden_size=32,
                                 num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100,
                                 tokens_per_step=64, repeats=1)  # fmt: skip
    result = run_benchmark(EncoderBenchmark(), args)
    rows = {row["implementation"]: row for row in result["results"]}
    error = "worker exited 3: RuntimeError: injected failure"
    assert rows["shaw-naive"]["memory_error"] == error and "training_peak_mb" not in rows["shaw-naive"]
    assert rows["shaw-naive"]["training_tokens_per_s"] > 0 and rows["learned"]["training_peak_mb"] >= 0
    assert f"Not measured: shaw-naive at 32 ({error})" in to_markdown(result)


def test_encoder_benchmark_rejects_unknown_implementations():
    with pytest.raises(ValueError, match="--implementations: unknown 'bert'"):
        run_benchmark(EncoderBenchmark(), EncoderBenchArguments(implementations=["bert"], memory=False))


def test_chunked_references_take_the_chunked_path_on_each_device():
    """`shaw-chunked` / `t5-chunked` models run through the chunked exact path by their own run-time options: on
    CUDA with FlexAttention's dropout off (the path before it), on CPU with the three regions off; every other
    model keeps both on. `all` measures them on every device."""
    from kolong.lab.bench.encoder import (
        REFERENCE_OPTIONS,
        EncoderBenchArguments,
        _resolved,
        build_model,
        implementations,
        make_step,
    )  # fmt: skip

    args = EncoderBenchArguments(lengths=[16], hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=64, tokens_per_step=32, attention_dropout=0.1)  # fmt: skip
    references = ("shaw-chunked", "t5-chunked")
    assert [implementations()[name][0] for name in references] == ["shaw", "t5"]
    assert set(references) <= set(_resolved(args))
    seen = []
    for name in ("shaw-chunked", "shaw"):
        model = build_model(name, args, 16)
        options = model.layers[0].attention.options
        seen.append((options.flex_dropout, options.skips("sdpa-regions")))
        make_step(model, args, 16, training=True, name=name)()
    assert seen == [(True, True), (True, False)]
    assert REFERENCE_OPTIONS["shaw-chunked"]["cuda"] == {"flex_dropout": False}  # CUDA's, set the same way


def test_encoder_benchmark_modes_and_their_refusal(tmp_path):
    args = ["bench", "encoder", "--implementations", "learned", "--lengths", "16", "--hidden-size", "32", "--layers",
            "1", "--heads", "2", "--intermediate-size", "64", "--tokens-per-step", "32", "--repeats", "1",
            "--no-memory", "--output-dir", str(tmp_path)]  # fmt: skip
    result = run(*args, "--modes", "training")
    assert result.exit_code == 0, result.output
    assert "Training tokens/s" in (tmp_path / "encoder.md").read_text()
    assert "Inference tokens/s" not in (tmp_path / "encoder.md").read_text()
    refused = run(*args, "--modes", "backward")
    assert refused.exit_code == 2 and "--modes: 'backward'" in refused.output


@pytest.mark.parametrize("how", ["yes", "regions"])
def test_encoder_benchmark_compiles_every_model_alike(monkeypatch, how):
    """--compile yes compiles each model whole, regions each model's layers (kolong's and HF's alike), with static
    shapes; every row records its first (compiling) step, the table says how, and dynamo's recompile limit is
    raised for the run only (five kolong schemes share one forward) and restored after. Dynamo's capture only
    (the eager backend): Inductor on CPU would take minutes for what a GPU run compiles."""
    import torch

    from kolong.lab.bench.encoder import build_model

    real_compile, calls = torch.compile, []
    monkeypatch.setattr(
        torch,
        "compile",
        lambda module, **kwargs: calls.append(kwargs) or real_compile(module, **kwargs, backend="eager"),
    )
    args = EncoderBenchArguments(lengths=[16], implementations=["hf-bert", "learned", "shaw", "t5", "alibi"],
                                 hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                 vocab_size=100, tokens_per_step=64, repeats=1, memory=False, compile=how)  # fmt: skip
    for name, layers in (("learned", lambda m: m.layers), ("hf-bert", lambda m: m.encoder.layer)):
        model = build_model(name, args, 16)
        whole = isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
        compiled_layers = [isinstance(layer, torch._dynamo.eval_frame.OptimizedModule) for layer in layers(
            getattr(model, "_orig_mod", model) if whole else model)]  # fmt: skip
        assert whole == (how == "yes") and compiled_layers == [how == "regions"] * 2
    assert calls and all(kwargs == {"dynamic": False} for kwargs in calls)
    limit, said_by_dynamo = torch._dynamo.config.recompile_limit, []
    handler = logging.Handler()
    handler.emit = lambda record: said_by_dynamo.append(record.getMessage())
    logger = logging.getLogger("torch._dynamo.convert_frame")
    logger.addHandler(handler)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    try:
        result = run_benchmark(EncoderBenchmark(), args)
    finally:
        logger.removeHandler(handler)
    if how == "regions":  # past dynamo's own limit: the case the raised limit is for
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs > 8
    assert not [message for message in said_by_dynamo if "recompile_limit" in message], said_by_dynamo
    assert torch._dynamo.config.recompile_limit == limit
    rows = result["results"]
    assert all(row["training_first_step_s"] >= 0 and row["inference_tokens_per_s"] > 0 for row in rows)
    markdown = to_markdown(result)
    said = {"yes": "compiled whole", "regions": "compiled layer by layer"}[how]
    assert f"fp32, {said};" in markdown and "First training step, s" in markdown


def test_encoder_profile_shows_the_chunked_paths_forward_backward_and_bias_gradient(tmp_path):
    """--profile on CPU: a trained bias's training step reports the time inside the chunked path's ranges."""
    result = run("bench", "encoder", "--implementations", "learned,shaw", "--lengths", "32", "--hidden-size", "32",
                 "--layers", "1", "--heads", "2", "--intermediate-size", "64", "--tokens-per-step", "64",
                 "--repeats", "1", "--no-memory", "--modes", "training", "--profile", "--output-dir", str(tmp_path))  # fmt: skip
    assert result.exit_code == 0, result.output
    traces = {t["implementation"]: t for t in json.loads((tmp_path / "encoder.json").read_text())["traces"]}
    assert traces["learned"]["labelled_ms"] == {}
    ranges = traces["shaw"]["labelled_ms"]
    assert set(ranges) == {"chunked forward", "chunked backward", "chunked bias gradient"}
    assert ranges["chunked backward"][0] > ranges["chunked bias gradient"][0] > 0
