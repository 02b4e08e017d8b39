"""`kolong bench long-attention` at toy size, and the pieces its numbers rest on."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from kolong.cli import app
from kolong.lab.bench.long_attention import growth_exponent, sliding_windows


def test_growth_exponent_golden_values():
    lengths = [1024, 2048, 4096, 8192]
    assert growth_exponent(lengths, [n**2 * 3e-9 for n in lengths]) == pytest.approx(2.0)
    assert growth_exponent(lengths, [0.5 + 0 * n for n in lengths]) == pytest.approx(0.0)
    assert growth_exponent(lengths, [n * 1e-4 for n in lengths]) == pytest.approx(1.0)
    assert growth_exponent([1024], [1.0]) is None  # one point has no slope


def test_sliding_windows_cover_the_document_with_the_overlap():
    ids = torch.arange(1000)[None]
    windows = sliding_windows(ids, 512, 128)
    assert windows.shape == (3, 512)
    assert windows[0, 0] == 0 and windows[1, 0] == 384 and windows[-1, -1] == 999
    assert sliding_windows(ids[:, :300], 512, 128).shape == (1, 300)


def test_bench_long_attention_end_to_end(tmp_path):
    result = CliRunner().invoke(app, [
        "bench", "long-attention", "--lengths", "64,128", "--window", "8", "--global-tokens", "4",
        "--sliding-length", "32", "--sliding-overlap", "8", "--hidden-size", "32", "--layers", "1", "--heads", "2",
        "--intermediate-size", "64", "--repeats", "1", "--no-memory", "--output-dir", str(tmp_path),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "long-attention.json").read_text())
    assert set(data["seconds"]) == {"inference", "training"}
    assert set(data["seconds"]["training"]) == {"full", "local+global", "sliding"}
    assert data["exponents"]["seconds"]["inference"]["full"] is not None
    assert "growth exponent" in (tmp_path / "long-attention.md").read_text()
    assert (tmp_path / "long-attention.png").read_bytes()[:4] == b"\x89PNG"

    # Memory comes from a fresh worker process per pattern and length (4 s each): one cell here.
    measured = CliRunner().invoke(app, [
        "bench", "long-attention", "--patterns", "sliding", "--lengths", "64", "--sliding-length", "32",
        "--sliding-overlap", "8", "--hidden-size", "32", "--layers", "1", "--heads", "2", "--intermediate-size",
        "64", "--repeats", "1", "--output-dir", str(tmp_path / "memory"),
    ])  # fmt: skip
    assert measured.exit_code == 0, measured.output
    data = json.loads((tmp_path / "memory" / "long-attention.json").read_text())
    assert not data["memory_errors"]
    assert all(data["memory_mb"][mode]["sliding"]["64"] >= 0 for mode in ("inference", "training"))
    refused = CliRunner().invoke(
        app, ["bench", "long-attention", "--patterns", "dense", "--output-dir", str(tmp_path)]
    )
    assert refused.exit_code == 2 and "'dense'" in refused.output


def test_gradient_checkpointing_option_recomputes_layers_with_the_same_gradients():
    import torch

    from kolong.lab.bench.arguments import LongAttentionBenchArguments
    from kolong.lab.bench.long_attention import build_model

    grads = []
    for checkpointing in (False, True):
        args = LongAttentionBenchArguments(lengths=[64], window=8, hidden_size=32, num_hidden_layers=2,
                                           num_attention_heads=2, intermediate_size=64,
                                           gradient_checkpointing=checkpointing)  # fmt: skip
        model = build_model("local+global", args).train()
        assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules()) == checkpointing
        ids = torch.randint(5, 8000, (1, 64), generator=torch.Generator().manual_seed(0))
        model(input_ids=ids).last_hidden_state.square().mean().backward()
        grads.append([p.grad for p in model.parameters() if p.grad is not None])
    for plain, recomputed in zip(*grads, strict=True):
        torch.testing.assert_close(recomputed, plain)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_flex_pattern_reads_the_same_document_and_is_timed_only_for_inference_on_cpu(tmp_path):
    """`local+global-flex` is local + global through compiled FlexAttention (block masks built compiled):
    the same outputs as the chunked path, and no training row on CPU, where flex has no backward."""
    from kolong.lab.bench.arguments import LongAttentionBenchArguments
    from kolong.lab.bench.long_attention import build_model, make_step

    args = LongAttentionBenchArguments(lengths=[300], window=16, global_tokens=4, hidden_size=32,
                                       num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)  # fmt: skip
    ids = torch.randint(5, 8000, (1, 300), generator=torch.Generator().manual_seed(0))
    question = torch.zeros_like(ids)
    question[:, :4] = 1
    outputs = []
    for pattern in ("local+global", "local+global-flex"):
        model = build_model(pattern, args).eval()
        make_step(model, pattern, args, 300, training=False)()  # the bench's own step runs
        with torch.no_grad():
            outputs.append(model(input_ids=ids, global_attention_mask=question).last_hidden_state)
    torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-4, atol=1e-4)

    result = CliRunner().invoke(app, [
        "bench", "long-attention", "--lengths", "300", "--window", "16", "--global-tokens", "4",
        "--patterns", "local+global,local+global-flex", "--hidden-size", "32", "--layers", "1", "--heads", "2",
        "--intermediate-size", "64", "--repeats", "1", "--no-memory", "--output-dir", str(tmp_path),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    seconds = json.loads((tmp_path / "long-attention.json").read_text())["seconds"]
    assert set(seconds["inference"]) == {"local+global", "local+global-flex"}
    assert set(seconds["training"]) == {"local+global"}


def test_memory_is_measured_on_a_model_already_built_as_on_cuda():
    """CUDA reads memory from the models already timed (tests/test_gpu.py checks that no worker starts);
    the same measurement on a given model, here on the CPU."""
    from kolong.lab.bench.arguments import LongAttentionBenchArguments
    from kolong.lab.bench.long_attention import build_model, measure_memory

    args = LongAttentionBenchArguments(lengths=[64], window=8, global_tokens=4, hidden_size=32,
                                       num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)  # fmt: skip
    row = measure_memory("local+global", 64, args, build_model("local+global", args))
    assert row["pattern"] == "local+global" and row["length"] == 64
    assert row["inference_peak_mb"] >= 0 and row["training_peak_mb"] >= 0


def test_chunked_pattern_times_the_chunked_path_on_the_same_model(tmp_path, monkeypatch):
    """`local+global-chunked` reads the document through the chunked path (local+global: the banded one), its
    model's own run-time option, and CUDA (where local + global runs FlexAttention) refuses the pattern."""
    from kolong.lab.bench.arguments import LongAttentionBenchArguments
    from kolong.lab.bench.long_attention import build_model, make_step
    from test_sparse_attention import record_paths

    taken = record_paths(monkeypatch)
    args = LongAttentionBenchArguments(lengths=[300], window=16, global_tokens=4, hidden_size=32,
                                       num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)  # fmt: skip
    for pattern in ("local+global", "local+global-chunked"):
        model = build_model(pattern, args)
        taken.clear()
        make_step(model, pattern, args, 300, training=True)()
        assert taken == ["banded" if pattern == "local+global" else "chunked"]
        assert model.layers[0].attention.options.skips("banded") is (pattern != "local+global")

    options = ["--lengths", "300", "--window", "16", "--global-tokens", "4", "--hidden-size", "32", "--layers",
               "1", "--heads", "2", "--intermediate-size", "64", "--repeats", "1", "--no-memory",
               "--output-dir", str(tmp_path), "--patterns", "local+global,local+global-chunked"]  # fmt: skip
    result = CliRunner().invoke(app, ["bench", "long-attention", *options])
    assert result.exit_code == 0, result.output
    assert set(json.loads((tmp_path / "long-attention.json").read_text())["seconds"]["training"]) == {
        "local+global",
        "local+global-chunked",
    }
    assert (
        "`local+global-chunked`: local + global through the chunked"
        in (tmp_path / "long-attention.md").read_text()
    )
    from kolong.errors import ConfigError
    from kolong.lab.bench.long_attention import LongAttentionBenchmark

    args.patterns, args.device = ["local+global-chunked"], "cuda"  # (the options refuse cuda without a GPU)
    with pytest.raises(ConfigError, match="local\\+global-chunked is CPU's"):
        LongAttentionBenchmark().sizes(args)


def test_profile_says_where_a_call_spends_its_time(tmp_path):
    """--profile traces each pattern's calls: the time under kolong's ranges (block mask, FlexAttention)."""
    result = CliRunner().invoke(app, [
        "bench", "long-attention", "--lengths", "64", "--patterns", "full,local+global-flex", "--modes", "inference",
        "--window", "8", "--global-tokens", "4", "--hidden-size", "32", "--layers", "1", "--heads", "2",
        "--intermediate-size", "64", "--repeats", "1", "--no-memory", "--profile", "--output-dir", str(tmp_path),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    traces = {t["pattern"]: t for t in json.loads((tmp_path / "long-attention.json").read_text())["traces"]}
    assert set(traces) == {"full", "local+global-flex"} and traces["full"]["labelled_ms"] == {}
    ranges = traces["local+global-flex"]["labelled_ms"]
    assert set(ranges) == {"block mask", "flex attention"} and all(host > 0 for host, _ in ranges.values())
    assert traces["full"]["ms_per_step"] > 0 and traces["full"]["costliest_host_ops"]
    table = (tmp_path / "long-attention.md").read_text()
    assert "| local+global-flex, 64, inference |" in table and "flex attention" in table


def test_named_shapes_are_measured_one_after_another(tmp_path, monkeypatch):
    from kolong.lab.bench import long_attention

    tiny = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    monkeypatch.setitem(long_attention.SHAPES, "minilm", tiny)
    monkeypatch.setitem(long_attention.SHAPES, "base", {**tiny, "num_hidden_layers": 2})
    result = CliRunner().invoke(app, [
        "bench", "long-attention", "--shapes", "minilm,base", "--lengths", "32,64", "--patterns",
        "full,full-checkpointed,sliding", "--sliding-length", "32", "--sliding-overlap", "8", "--repeats", "1",
        "--no-memory", "--output-dir", str(tmp_path),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "long-attention.json").read_text())
    assert (
        list(data["shapes"]) == ["minilm", "base"]
        and data["shapes"]["base"]["dimensions"]["num_hidden_layers"] == 2
    )
    for tables in data["shapes"].values():
        assert set(tables["seconds"]["training"]) == {"full", "full-checkpointed", "sliding"}
        assert "full-checkpointed" not in tables["seconds"]["inference"]  # nothing to recompute there
    text = (tmp_path / "long-attention.md").read_text()
    assert (
        "## minilm: 1 layers x 32" in text
        and "## base: 2 layers x 32" in text
        and "### training: time" in text
    )
    refused = CliRunner().invoke(
        app, ["bench", "long-attention", "--shapes", "huge", "--output-dir", str(tmp_path)]
    )
    assert refused.exit_code == 2 and "--shapes: 'huge'" in refused.output
    for shapes, message in (
        ("base:4k", "--shapes: 'base:4k'; after the colon"),
        ("huge:64", "--shapes: 'huge'"),
    ):
        refused = CliRunner().invoke(
            app, ["bench", "long-attention", "--shapes", shapes, "--output-dir", str(tmp_path)]
        )
        assert refused.exit_code == 2 and message in refused.output, refused.output


def test_a_shape_can_stop_short_of_the_longest_length(tmp_path, monkeypatch):
    """`base:32`: the larger shape only up to 32 tokens, the smaller one at every length; its model is built
    for what it reads."""
    from kolong.lab.bench import long_attention

    tiny = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    monkeypatch.setitem(long_attention.SHAPES, "minilm", tiny)
    monkeypatch.setitem(long_attention.SHAPES, "base", {**tiny, "num_hidden_layers": 2})
    result = CliRunner().invoke(app, [
        "bench", "long-attention", "--shapes", "minilm,base:32", "--lengths", "32,64", "--patterns",
        "full,sliding", "--sliding-length", "32", "--sliding-overlap", "8", "--repeats", "1", "--no-memory",
        "--output-dir", str(tmp_path),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "long-attention.json").read_text())
    assert set(data["shapes"]["minilm"]["seconds"]["training"]["full"]) == {"32", "64"}
    assert set(data["shapes"]["base"]["seconds"]["training"]["full"]) == {"32"}
    assert long_attention.shaped(long_attention.LongAttentionBenchArguments(
        shapes=["minilm", "base:32"], lengths=[32, 64]), "base").lengths == [32]  # fmt: skip
    text = (tmp_path / "long-attention.md").read_text()
    assert "| full | " in text.split("## base")[1] and "| 64 |" not in text.split("## base")[1]


def test_checkpointing_recomputes_full_attention_with_the_same_gradients():
    from kolong.lab.bench.arguments import LongAttentionBenchArguments
    from kolong.lab.bench.long_attention import build_model

    args = LongAttentionBenchArguments(lengths=[64], hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=64)  # fmt: skip
    grads = []
    for pattern in ("full", "full-checkpointed"):
        model = build_model(pattern, args).train()
        assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules()) == (
            pattern != "full"
        )
        ids = torch.randint(5, 8000, (1, 64), generator=torch.Generator().manual_seed(0))
        model(input_ids=ids).last_hidden_state.square().mean().backward()
        grads.append([p.grad for p in model.parameters() if p.grad is not None])
    for plain, recomputed in zip(*grads, strict=True):
        torch.testing.assert_close(recomputed, plain)


def test_hf_modernbert_and_bigbird_are_measured_beside_kolongs_patterns(tmp_path):
    result = CliRunner().invoke(app, [
        "bench", "long-attention", "--lengths", "128", "--patterns", "full,hf-modernbert,hf-bigbird", "--window", "8",
        "--hidden-size", "32", "--layers", "3", "--heads", "2", "--intermediate-size", "64", "--repeats", "1",
        "--no-memory", "--output-dir", str(tmp_path),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "long-attention.json").read_text())
    assert set(data["seconds"]["training"]) == {"full", "hf-modernbert", "hf-bigbird"}
    text = (tmp_path / "long-attention.md").read_text()
    assert "HF `ModernBertModel` of the same size" in text and "HF `BigBirdModel` of the same size" in text


def test_the_hf_references_have_the_benchmarks_size():
    from kolong.lab.bench.arguments import LongAttentionBenchArguments
    from kolong.lab.bench.long_attention import build_model

    args = LongAttentionBenchArguments(lengths=[1000], window=8, hidden_size=32, num_hidden_layers=3,
                                       num_attention_heads=2, intermediate_size=64)  # fmt: skip
    modernbert, bigbird = build_model("hf-modernbert", args), build_model("hf-bigbird", args)
    assert (
        modernbert.config.local_attention == 16 and modernbert.config.layer_types.count("full_attention") == 1
    )
    assert bigbird.config.max_position_embeddings == 1024 and bigbird.config.attention_type == "block_sparse"
    assert hasattr(bigbird, "_kolong_keeps_block_sparse")


def test_the_named_shapes_are_the_checkpoints_shapes():
    from kolong.lab.bench.long_attention import SHAPES

    assert SHAPES["base"] == {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                              "intermediate_size": 3072}  # fmt: skip
    assert SHAPES["minilm"]["num_hidden_layers"] == 6 and SHAPES["minilm"]["hidden_size"] == 384
    assert SHAPES["mmbert-base"]["num_hidden_layers"] == 22 and SHAPES["mmbert-small"]["hidden_size"] == 384
    assert all(s["hidden_size"] % s["num_attention_heads"] == 0 for s in SHAPES.values())


def _full_and_sliding_at_32_and_64(tmp_path, *options) -> dict:
    """A tiny run of full attention and sliding windows at 32 and 64 tokens: its result JSON."""
    result = CliRunner().invoke(app, [
        "bench", "long-attention", "--lengths", "32,64", "--patterns", "full,sliding", "--hidden-size", "32",
        "--layers", "1", "--heads", "2", "--intermediate-size", "64", "--sliding-length", "32",
        "--sliding-overlap", "8", "--repeats", "1", *options, "--output-dir", str(tmp_path),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads((tmp_path / "long-attention.json").read_text())


def test_a_pattern_whose_memory_worker_is_killed_is_not_timed_at_that_length(tmp_path, monkeypatch):
    """On CPU a length's memory workers run first; a pattern that one of them could not fit (the worker killed)
    is left out of that length's timing instead of taking the run down, and the table says so."""
    from kolong.lab.bench import long_attention

    def worker(pattern, length, args):  # a worker's row without its process (the test is the skipping)
        if pattern == "sliding" and length == 64:
            return {"pattern": pattern, "length": length, "error": "killed (out of memory?)"}
        return {"pattern": pattern, "length": length, "inference_peak_mb": 1.0, "training_peak_mb": 2.0}

    monkeypatch.setattr(long_attention, "_memory_worker", worker)
    data = _full_and_sliding_at_32_and_64(tmp_path)
    for mode in ("inference", "training"):
        assert set(data["seconds"][mode]["sliding"]) == {"32"} and set(data["seconds"][mode]["full"]) == {
            "32",
            "64",
        }
    assert data["memory_errors"] == [{"pattern": "sliding", "length": 64, "error": "killed (out of memory?)"}]
    text = (tmp_path / "long-attention.md").read_text()
    assert "Memory of sliding at 64: killed (out of memory?); not timed at this length" in text


def test_goals_judge_local_global_against_full_attention_at_16k():
    from kolong.lab.bench.long_attention import goal_lines, goals

    seconds = {"training": {"full": {4096: 2.0, 16384: 30.0}, "local+global": {4096: 2.0, 16384: 10.0}},
               "inference": {"full": {16384: 9.0}, "local+global": {16384: 2.0}}}  # fmt: skip
    memory = {"training": {"full": {16384: 1000.0}, "local+global": {16384: 1200.0}}}
    judged = {(r["goal"].split(" at ")[0].split(" over ")[0], r["mode"]): r for r in goals(seconds, memory)}
    speed, inference = (
        judged[("full attention's time", "training")],
        judged[("full attention's time", "inference")],
    )
    assert speed["met"] and speed["value"] == pytest.approx(3.0) and inference["value"] == pytest.approx(4.5)
    peak = judged[("local + global's peak memory", "training")]
    assert not peak["met"] and peak["gap"] == pytest.approx(0.2)
    growth = judged[("local + global's time", "training")]
    assert not growth["met"] and growth["value"] == pytest.approx(5.0)
    assert len(judged) == 4  # inference has neither a 4,096 time nor a memory: those two goals are not judged
    text = "\n".join(goal_lines(goals(seconds, memory), "##"))
    assert (
        "## Goals: 2 of 4 met" in text and "1.20x **0.20x over**" in text and "5.00x **0.50x over**" in text
    )


def test_a_pattern_that_fails_to_run_is_recorded_and_the_others_are_timed(tmp_path, monkeypatch):
    """A reference that cannot run here (HF's BigBird under bf16 autocast: transformers 5.24 scatters float32
    weights into a bf16 tensor) is left out of that length's timing with its error, not the whole run."""
    from kolong.lab.bench import long_attention

    real_step = long_attention.make_step

    def make_step(model, pattern, args, length, training):
        if pattern == "sliding" and length == 64:

            def failing():
                raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")

            return failing
        return real_step(model, pattern, args, length, training)

    monkeypatch.setattr(long_attention, "make_step", make_step)
    data = _full_and_sliding_at_32_and_64(tmp_path, "--no-memory")
    assert set(data["seconds"]["inference"]["sliding"]) == {"32"} and set(data["seconds"]["inference"]["full"]) == {
        "32", "64"}  # fmt: skip
    assert [(f["pattern"], f["length"], f["mode"]) for f in data["failed"]] == [("sliding", 64, "inference")]
    text = (tmp_path / "long-attention.md").read_text()
    assert "sliding at 64, inference: failed (RuntimeError: scatter(): Expected self.dtype" in text


def test_hf_bigbird_under_bf16_autocast_fails_in_hfs_code_and_runs_in_kolongs():
    """Why the bench records a failing pattern: HF's block-sparse attention scatters float32 probabilities into
    a tensor of the context's dtype, which autocast makes bf16; kolong's kernel has no such tensor."""
    from kolong.lab.bench import long_attention
    from kolong.lab.bench.arguments import LongAttentionBenchArguments

    args = LongAttentionBenchArguments(lengths=[1024], hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=64, dtype="bf16")  # fmt: skip
    for pattern, fails in (("hf-bigbird", True), ("hf-bigbird-kolong", False)):
        step = long_attention.make_step(long_attention.build_model(pattern, args), pattern, args, 1024, False)
        if fails:
            with pytest.raises(RuntimeError, match="dtype"):
                step()
        else:
            step()


def test_a_failing_memory_worker_is_reported_and_the_others_are_plotted(tmp_path, monkeypatch):
    """A real worker process that fails (exit 3): the run goes on, the report and the plot name the failed cell and
    why, and the cells that came back are drawn; when no cell comes back there is no plot, and no crash."""
    from kolong.lab.bench import long_attention
    from kolong.lab.bench.memory import run_worker
    from test_bench_memory import failing_worker_module

    module = failing_worker_module(tmp_path, monkeypatch)
    real = long_attention._memory_worker

    def worker(pattern, length, args):
        if pattern == "sliding" and length == 64:
            return run_worker(module, {}, {"pattern": pattern, "length": length})
        return real(pattern, length, args)

    monkeypatch.setattr(long_attention, "_memory_worker", worker)
    common = ["bench", "long-attention", "--patterns", "sliding", "--sliding-length", "32", "--sliding-overlap", "8",
              "--hidden-size", "32", "--layers", "1", "--heads", "2", "--intermediate-size", "64", "--repeats", "1"]  # fmt: skip
    result = CliRunner().invoke(app, [*common, "--lengths", "32,64", "--output-dir", str(tmp_path / "some")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "some" / "long-attention.json").read_text())
    error = "worker exited 3: RuntimeError: injected failure"
    assert data["memory_errors"] == [{"pattern": "sliding", "length": 64, "error": error}]
    assert set(data["seconds"]["inference"]["sliding"]) == {"32"}
    report = (tmp_path / "some" / "long-attention.md").read_text()
    assert f"Memory of sliding at 64: {error}; not timed at this length" in report
    assert "injected failure" in result.output  # printed too (wrapped to the console's width)
    assert (tmp_path / "some" / "long-attention.png").read_bytes()[:4] == b"\x89PNG"
    assert long_attention.failures(data) == [f"sliding at 64 (memory): {error}"]

    none = CliRunner().invoke(app, [*common, "--lengths", "64", "--output-dir", str(tmp_path / "none")])
    assert none.exit_code == 0, none.output
    assert f"Memory of sliding at 64: {error}" in (tmp_path / "none" / "long-attention.md").read_text()
    assert not (tmp_path / "none" / "long-attention.png").exists()
