"""GBST (Charformer): shapes, masks, padding invariance, a naive per-position reference, golden values, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from kolong.models.byte import GBST

HIDDEN = 8


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run faster on one thread, and a shared CPU makes multi-threaded small ops stall."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def seeded_gbst(seed: int = 0, **options) -> GBST:
    gbst = GBST(HIDDEN, **options)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in gbst.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return gbst.eval()


def naive_gbst(gbst: GBST, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Charformer's equations for one sequence, position by position (x: (n, d), mask: (n,) bool)."""
    n, d = x.shape
    x = x * mask[:, None]
    k, left = gbst.kernel_size, gbst.kernel_size // 2
    h = torch.zeros(n, d)
    for i in range(n):  # depthwise convolution, zero beyond the ends, then the pointwise projection
        acc = gbst.conv.bias.clone()
        for t in range(k):
            j = i - left + t
            if 0 <= j < n:
                acc = acc + gbst.conv.weight[:, 0, t] * x[j]
        h[i] = gbst.proj(acc) * mask[i]
    blocks = gbst.blocks
    candidates = torch.zeros(n, len(blocks), d)
    scores = torch.zeros(n, len(blocks))
    for m, (size, offset) in enumerate(blocks):
        for i in range(n):
            index = (i - offset) // size  # blocks start at offset + j * size (the first may be shorter)
            lo, hi = max(0, offset + index * size), min(n, offset + (index + 1) * size)
            members = [j for j in range(lo, hi) if mask[j]]
            mean = torch.stack([h[j] for j in members]).mean(0) if members else torch.zeros(d)
            candidates[i, m] = mean  # eq. 1
            scores[i, m] = gbst.score(mean)[0]  # eq. 2
    p = scores.softmax(-1)  # eq. 3
    if gbst.score_consensus:  # eq. 4 over real positions
        similarity = p @ p.T
        similarity[:, ~mask] = float("-inf")
        p = similarity.softmax(-1) @ p
    mixed = (p[:, :, None] * candidates).sum(1)  # eq. 5
    rate = gbst.downsample_rate
    out, out_mask = [], []
    for g in range(math.ceil(n / rate)):  # eq. 6
        members = [j for j in range(g * rate, min(n, (g + 1) * rate)) if mask[j]]
        out.append(torch.stack([mixed[j] for j in members]).mean(0) if members else torch.zeros(d))
        out_mask.append(bool(members))
    return torch.stack(out), torch.tensor(out_mask)


@pytest.mark.parametrize("length", [1, 2, 3, 5, 17, 18, 19, 40])
@pytest.mark.parametrize("rate", [1, 2, 3, 4])
def test_output_length_is_ceil_of_length_over_rate(length, rate):
    gbst = seeded_gbst(downsample_rate=rate)
    out, mask = gbst(torch.randn(2, length, HIDDEN))
    assert out.shape == (2, math.ceil(length / rate), HIDDEN)
    assert mask.shape == (2, math.ceil(length / rate)) and bool(mask.all())
    assert gbst.output_length(length) == math.ceil(length / rate)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"score_consensus": False},
        {"blocks": [(1, 0), (2, 1), (3, 0), (3, 2), (4, 0)], "downsample_rate": 2},
        {"blocks": [(1, 0), (2, 0), (4, 0)], "downsample_rate": 4, "conv_kernel_size": 2},
    ],
)
def test_batched_module_equals_the_naive_equations(options):
    gbst = seeded_gbst(1, **options)
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(3, 23, HIDDEN, generator=generator)
    mask = torch.ones(3, 23, dtype=torch.bool)
    mask[1, 15:] = False
    mask[2, 5:] = False
    with torch.no_grad():
        out, out_mask = gbst(x, mask)
        for row in range(3):
            expected, expected_mask = naive_gbst(gbst, x[row], mask[row])
            torch.testing.assert_close(out[row], expected, rtol=1e-5, atol=1e-5)
            assert out_mask[row].tolist() == expected_mask.tolist()


def test_fully_padded_groups_are_masked_and_the_mask_matches_downsample_mask():
    gbst = seeded_gbst()
    mask = torch.tensor([[1] * 10 + [0] * 10, [1] * 20, [1] * 3 + [0] * 17])
    _, out_mask = gbst(torch.randn(3, 20, HIDDEN), mask)
    # groups of 3: a group is real when one of its bytes is (byte 9 opens group 3)
    assert out_mask.tolist() == [
        [True] * 4 + [False] * 3,
        [True] * 7,
        [True] + [False] * 6,
    ]
    assert torch.equal(out_mask, gbst.downsample_mask(mask))


def test_score_consensus_runs_sdpa_at_a_width_cuda_kernels_take(monkeypatch):
    """Eq. 4 is attention of P over itself, M = 5 block sizes wide: padded with zero columns to 8 (what CUDA's
    memory-efficient kernel needs in 16 bits), the same result as the naive equations (test above)."""
    from kolong.models.byte import gbst as module

    widths = []
    sdpa = module.F.scaled_dot_product_attention

    def recording(q, k, v, **kwargs):
        widths.append(q.shape[-1])
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(module.F, "scaled_dot_product_attention", recording)
    seeded_gbst(1)(torch.randn(2, 11, HIDDEN))
    assert widths == [8]


@pytest.mark.parametrize("consensus", [True, False])
def test_padding_bytes_and_padding_amount_do_not_change_real_positions(consensus):
    gbst = seeded_gbst(2, score_consensus=consensus, blocks=[(1, 0), (2, 0), (3, 1), (6, 0), (9, 0)])
    generator = torch.Generator().manual_seed(4)
    real = torch.randn(1, 13, HIDDEN, generator=generator)
    with torch.no_grad():
        alone, _ = gbst(real)
        for extra in (1, 5, 20):
            for fill in (0.0, 7.0, float("nan")):  # even NaN padding must not reach real positions
                padded = torch.cat([real, torch.full((1, extra, HIDDEN), fill)], dim=1)
                mask = torch.cat([torch.ones(1, 13), torch.zeros(1, extra)], dim=1)
                out, out_mask = gbst(padded, mask)
                kept = math.ceil(13 / 3)
                torch.testing.assert_close(out[:, :kept], alone, rtol=1e-6, atol=1e-6)
                assert out_mask[0, :kept].all() and not out_mask[0, kept:].any()


def test_no_mask_equals_an_all_real_mask():
    gbst = seeded_gbst()
    x = torch.randn(2, 11, HIDDEN)
    with torch.no_grad():
        torch.testing.assert_close(gbst(x)[0], gbst(x, torch.ones(2, 11))[0])


def test_a_sequence_without_any_real_byte_stays_finite():
    gbst = seeded_gbst()
    out, mask = gbst(torch.randn(2, 6, HIDDEN), torch.tensor([[1] * 6, [0] * 6]))
    assert torch.isfinite(out).all() and mask.tolist() == [[True, True], [False, False]]


def test_golden_values_for_a_fixed_seed():
    gbst = seeded_gbst(0)
    x = torch.randn(1, 7, HIDDEN, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out, _ = gbst(x)
    assert out.shape == (1, 3, HIDDEN)
    golden = torch.tensor(GOLDEN)
    torch.testing.assert_close(out[0, :, :4], golden, rtol=0, atol=1e-4)


GOLDEN = [
    [-1.9063, 0.7384, -0.3949, -1.0447],
    [-1.9577, 1.0025, -0.4631, -1.1569],
    [0.9585, 0.9559, 1.395, -1.059],
]


def test_gradients_reach_the_block_scorer_and_the_convolution():
    gbst = seeded_gbst().train()
    x = torch.randn(2, 20, HIDDEN, generator=torch.Generator().manual_seed(0)).requires_grad_()
    out, _ = gbst(x, torch.tensor([[1] * 20, [1] * 12 + [0] * 8]))
    out.pow(2).sum().backward()
    for parameter in (gbst.score.weight, gbst.conv.weight, gbst.proj.weight):
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0
    # The scorer's bias shifts every block size's score alike, and the softmax over block sizes ignores a shift:
    # its gradient is zero but for rounding (asserting it nonzero failed for about one input in eleven).
    assert gbst.score.bias.grad is not None and gbst.score.bias.grad.abs().max() < 1e-4
    assert x.grad[1, 12:].abs().sum() == 0  # nothing flows into padding


def test_fresh_initialisation_starts_from_block_means():
    gbst = GBST(HIDDEN, blocks=[(1, 0)], downsample_rate=1, score_consensus=False)
    gbst.init_weights()
    x = torch.randn(1, 9, HIDDEN)
    with torch.no_grad():
        torch.testing.assert_close(gbst(x)[0], x)  # identity convolution, one block size, no pooling


def test_bench_gbst_measures_both_models_and_writes_results(tmp_path):
    import json

    from kolong.lab.bench.gbst import GBSTBenchArguments, GBSTBenchmark, run_gbst_benchmark
    from kolong.lab.bench.harness import write_results

    args = GBSTBenchArguments(
        max_length=96, min_bytes=0, target_length=8, batch_size=2, train_steps=1, inference_batches=1,
        max_new_tokens=4, rounds=2, hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=64,
        encoder_layers=2, decoder_layers=1, threads=[1], data="builtin",
    )  # fmt: skip
    reported = []
    result = run_gbst_benchmark(args, on_step=reported.append)
    json_path, markdown_path = write_results(GBSTBenchmark(), result, tmp_path)
    firsts = [message for message in reported if "first call" in message]  # each step's compile, in a log
    assert (
        len(firsts) == len(set(firsts))
        and "gbst: byte/inference, first call (compiles with --compile)" in firsts
    )
    assert result["encoder_positions"] == {"byte": 96, "gbst": 32}
    assert result["goal"] == {"train": 2.5, "inference": 1.46}  # inference: the paper's ratio
    assert result["parameters"]["gbst"] > result["parameters"]["byte"]
    (run,) = result["results"]
    assert run["threads"] == 1 and len(run["per_round"]["gbst"]["train"]) == 2
    assert all(value > 0 for value in run["speedup"].values())
    assert json.loads(json_path.read_text())["benchmark"] == "gbst"
    assert "speed-up" in markdown_path.read_text() and "built-in Korean text" in markdown_path.read_text()
    assert run["breakdown"] is None and "Where generation time goes" not in markdown_path.read_text()


def test_bench_gbst_with_a_static_cache_and_bf16(tmp_path):
    """The options a GPU run takes (static cache: what transformers compiles there; bf16 autocast), on CPU."""
    from kolong.lab.bench.gbst import GBSTBenchArguments, run_gbst_benchmark

    args = GBSTBenchArguments(
        max_length=48, min_bytes=0, target_length=8, batch_size=2, train_steps=1, inference_batches=1,
        max_new_tokens=3, rounds=1, hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=64,
        encoder_layers=1, decoder_layers=1, threads=[1], data="builtin", cache="static", decoder="generate",
        dtype="bf16", device="cpu",
    )  # fmt: skip
    from torch._dynamo.utils import counters

    counters["inductor"]["cudagraph_skips"] += 3  # an earlier compile in this process: not this run's
    result = run_gbst_benchmark(args, on_step=lambda message: None)
    assert result["device"] == "cpu" and result["results"][0]["speedup"]["inference"] > 0
    # the note under the table speaks of the device measured: CPU threads here, kernel launches on a GPU
    from kolong.lab.bench.gbst import to_markdown

    assert "threads than free cores" in to_markdown(result) and "launching kernels" not in to_markdown(result)
    result["device"] = "cuda"
    assert "launching kernels" in to_markdown(result) and "threads than free cores" not in to_markdown(result)
    # a compiled decoding step that ran without its CUDA graphs is named, not averaged in silently
    assert result["cudagraph_skips"] == 0 and "CUDA graphs were skipped" not in to_markdown(result)
    result["cudagraph_skips"], result["settings"]["compile"] = 2, True
    assert "**CUDA graphs were skipped 2 time(s)**" in to_markdown(result)


def test_bench_gbst_decodes_with_kolongs_loop_when_asked(tmp_path, monkeypatch):
    """--decoder kolong: generation runs `greedy_generate` (never `generate`), with exactly max_new_tokens bytes,
    and the table says how it decoded."""
    from kolong.lab.bench.gbst import GBSTBenchArguments, run_gbst_benchmark, to_markdown
    from kolong.models.byte import greedy, modeling

    lengths = []
    original = greedy.greedy_generate

    def counted(*args, **kwargs):
        tokens = original(*args, **kwargs)
        lengths.append(tokens.shape[1])
        return tokens

    monkeypatch.setattr(greedy, "greedy_generate", counted)
    monkeypatch.setattr(modeling.KolongByteForConditionalGeneration, "generate", None)  # not called
    args = GBSTBenchArguments(
        max_length=48, min_bytes=0, target_length=8, batch_size=2, train_steps=1, inference_batches=1,
        max_new_tokens=3, rounds=1, hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=64,
        encoder_layers=1, decoder_layers=1, threads=[1], data="builtin", decoder="kolong",
    )  # fmt: skip
    result = run_gbst_benchmark(args, on_step=lambda message: None)
    assert lengths and set(lengths) == {4}  # the decoder start and 3 bytes, every call
    assert result["results"][0]["speedup"]["inference"] > 0
    assert "kolong's greedy loop, static cache" in to_markdown(result)


@pytest.mark.parametrize("scope", ["layers", "encoder"])
def test_bench_gbst_compiles_both_encoders_when_asked(tmp_path, monkeypatch, scope):
    """--compile: both models' encoders run compiled (in place, so generate and the timed parts still find
    them), in training and generation, and the table says how. Dynamo's capture only (the eager backend):
    Inductor on CPU would take minutes for what a GPU run compiles."""
    import torch

    from kolong.lab.bench.gbst import GBSTBenchArguments, GBSTBenchmark, run, to_markdown

    compile_in_place = torch.nn.Module.compile
    monkeypatch.setattr(
        torch.nn.Module, "compile", lambda self, **options: compile_in_place(self, backend="eager", **options)
    )
    args = GBSTBenchArguments(
        max_length=48, min_bytes=0, target_length=8, batch_size=2, train_steps=1, inference_batches=1,
        max_new_tokens=3, rounds=1, hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=64,
        encoder_layers=2, decoder_layers=1, threads=[1], data="builtin", compile=True,
        compile_scope=scope,
    )  # fmt: skip
    benchmark = GBSTBenchmark()
    result = run(benchmark, args, lambda message: None)
    for name, model in benchmark.models.items():
        encoder = model.get_encoder()
        regions = [*encoder.layers, *([encoder.gbst] if name == "gbst" else [])]
        assert (encoder._compiled_call_impl is not None) == (scope == "encoder")
        assert all((region._compiled_call_impl is not None) == (scope == "layers") for region in regions)
    assert all(rate > 0 for rate in result["results"][0]["samples_per_second"]["gbst"].values())
    said = {"layers": "GBST and each layer apart; GBST alone is timed compiled",
            "encoder": "each encoder as one graph; GBST alone is timed eager"}[scope]  # fmt: skip
    assert f"both encoders compiled (torch.compile, {said}" in to_markdown(result)


def test_compiled_layer_by_layer_one_graph_serves_every_layer():
    """--compile-scope layers: GBST's graph and one graph for all the encoder's layers, whose outputs and
    gradients are the eager encoder's; a second call compiles nothing."""
    import torch._dynamo.utils

    from kolong.lab.bench.gbst import compile_encoder
    from kolong.models.byte import KolongByteConfig, KolongByteForConditionalGeneration, add_gbst

    torch.manual_seed(0)
    config = KolongByteConfig(hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=64,
                              encoder_layers=3, decoder_layers=1, dropout_rate=0.0)  # fmt: skip
    encoder = add_gbst(KolongByteForConditionalGeneration(config)).get_encoder()
    ids = torch.randint(3, 250, (2, 30), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 24:] = 0

    def outputs_and_grads():
        encoder.zero_grad()
        out = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        out.square().sum().backward()
        return out.detach(), [p.grad.clone() for p in encoder.parameters() if p.grad is not None]

    want, want_grads = outputs_and_grads()
    torch._dynamo.reset()
    try:
        compile_encoder(encoder, "layers")
        torch._dynamo.utils.counters.clear()
        got, got_grads = outputs_and_grads()
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2  # GBST, and the layers
        outputs_and_grads()
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(got, want)
    # Inductor's CPU kernels sum in an order set by the CPU's vector width (AVX-512 on a Xeon, AVX2 elsewhere):
    # the gradients agree to float32 reordering error, a few 1e-5 on entries near zero, not bit for bit
    torch.testing.assert_close(got_grads, want_grads, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="compile scope 'all'"):
        compile_encoder(encoder, "all")


def test_bench_gbst_refuses_a_missing_cuda_device(tmp_path):
    import torch

    from kolong.errors import ConfigError
    from kolong.lab.bench.gbst import GBSTBenchArguments, run_gbst_benchmark

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    args = GBSTBenchArguments(device="cuda", data="builtin", max_length=48, min_bytes=0)
    with pytest.raises(ConfigError, match="--device cuda"):
        run_gbst_benchmark(args, on_step=lambda message: None)


def test_bench_gbst_decodes_through_kolongs_loop_by_default_and_refuses_a_static_cache_with_it():
    from kolong.errors import ConfigError
    from kolong.lab.bench.gbst import GBSTBenchArguments

    assert GBSTBenchArguments().decoder == "kolong"
    assert GBSTBenchArguments(decoder="generate", cache="static").cache == "static"
    with pytest.raises(ConfigError, match=r"--cache static is generate's option.*--decoder generate"):
        GBSTBenchArguments(cache="static")


def test_bench_gbst_refuses_a_data_file_that_is_missing_or_has_no_long_paragraph(tmp_path):
    """An explicit --data is the user's file: missing, or without a paragraph as long as --min-bytes, it is
    refused by name rather than replaced by the built-in text (`builtin` asks for that text)."""
    import json

    from kolong.errors import ConfigError
    from kolong.lab.bench.gbst import GBSTBenchArguments, bench_inputs

    with pytest.raises(ConfigError, match=r"--data .*absent\.json: no such file"):
        GBSTBenchArguments(data=str(tmp_path / "absent.json"))
    short = tmp_path / "short.json"
    paragraph = {
        "context": "짧은 지문",
        "qas": [{"id": "1", "question": "무엇?", "answers": [{"text": "지문", "answer_start": 3}]}],
    }
    short.write_text(
        json.dumps({"version": "1", "data": [{"title": "t", "paragraphs": [paragraph]}]}, ensure_ascii=False)
    )
    with pytest.raises(ConfigError, match=r"short\.json: no paragraph of at least 500 bytes \(--min-bytes\)"):
        bench_inputs(GBSTBenchArguments(data=str(short), min_bytes=500))
    description, pairs = bench_inputs(GBSTBenchArguments(data=str(short), min_bytes=0))
    assert description.startswith("short.json: 1 questions") and pairs[0][1] == "지문"
    description, pairs = bench_inputs(GBSTBenchArguments(data="builtin"))
    assert description == "built-in Korean text" and pairs
