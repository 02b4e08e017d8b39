"""kolong on a CUDA device: same outputs as on the CPU for every position scheme, and a training step.

Marked `gpu`: skipped without CUDA (see conftest.py), run by the suite on a GPU machine. Ordered by what a
time-limited job must learn first (`benchmarks/gpu/run gpu-tests` may stop part-way): CUDA parity, then
compiled pre-training (which decides compile's default), then the fused and sparse attention paths.
"""

from __future__ import annotations

import pytest
import torch

from conftest import VOCAB, random_ids, tiny_kolong_config
from kolong.models import KolongForMaskedLM, KolongModel

pytestmark = pytest.mark.gpu

SCHEMES = ("learned", "sinusoidal", "memn2n", "shaw", "t5", "alibi", "rope", "none")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_cuda_matches_cpu(scheme):
    torch.manual_seed(0)
    model = KolongModel(tiny_kolong_config(position_encoding=scheme)).eval()
    ids = random_ids(2, 16)
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
        actual = model.cuda()(input_ids=ids.cuda(), attention_mask=mask.cuda()).last_hidden_state
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("position", ["learned", "shaw"])
def test_pretraining_with_the_gpu_settings_gives_the_eager_loss_curve(position, tmp_path):
    """On CUDA, `pretrain mlm` compiles the model, masks in loader workers, packs documents (flex block masks)
    and uses fused AdamW: in fp32 without dropout its loss curve is the uncompiled run's, across a curriculum's
    length switch too (a static graph per length: with symbolic lengths flex's score_mods failed to lower)."""
    from kolong.training.pretrain import pretrain_mlm
    from test_pretrain import arguments, build_mlm_corpus, losses

    corpus = build_mlm_corpus(tmp_path)
    common = dict(position_encoding=position, max_steps=8, eval_every=100, save_steps=100, bf16="no", curriculum="16:0.5,32",
                  overrides={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})  # fmt: skip
    eager = arguments(corpus, tmp_path / "eager", compile="no", **common)
    compiled = arguments(corpus, tmp_path / "compiled", **common)  # compile auto: on
    for args in (eager, compiled):
        args.extra = {"disable_tqdm": True}  # the CUDA device, not use_cpu
        pretrain_mlm(args)
    for (step, a), (_, b) in zip(losses(tmp_path / "eager"), losses(tmp_path / "compiled"), strict=True):
        assert a == pytest.approx(b, rel=2e-3, abs=2e-3), f"step {step}"


def test_bf16_training_step_on_cuda_lowers_the_loss():
    torch.manual_seed(0)
    model = KolongForMaskedLM(tiny_kolong_config(position_encoding="shaw")).cuda().train()
    ids = random_ids(4, 16).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss))
    assert losses[-1] < losses[0] and all(loss == loss for loss in losses)  # falls, never NaN
    assert model.config.vocab_size == VOCAB


FUSED = {"shaw": {"max_distance": 4}, "shaw-value": {"max_distance": 4, "value": True},
         "t5": {"num_buckets": 8, "max_distance": 24}, "alibi": {}, "rope": {}}  # fmt: skip


def _assert_gradients_close(actual: dict, expected: dict, tolerance: float) -> None:
    """Every parameter's gradient, relative to its largest entry, or to a hundredth of the model's largest
    gradient where that is more: a sum over every token can cancel to rounding noise (the token-type
    embedding's largest entry was 1e-6 on an H200, its fp32 differences 6e-9), and noise over noise is no
    comparison."""
    floor = 1e-2 * max(grad.abs().max().item() for grad in expected.values())
    for key, grad in expected.items():
        scale = max(grad.abs().max().item(), floor)
        torch.testing.assert_close(
            actual[key] / scale, grad / scale, rtol=tolerance, atol=tolerance,
            msg=lambda report, key=key, scale=scale: f"{key} (gradient scale {scale:.3g}): {report}",
        )  # fmt: skip


def _outputs_and_grads(model, ids, mask, implementation, dtype=None):
    """Outputs at real tokens (padding zeroed) and every parameter's gradient of their mean square."""
    model.set_attn_implementation(implementation)
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.ne(0)[..., None].to(hidden.dtype)
    (hidden.float() * real).square().mean().backward()
    grads = {name: p.grad.float().clone() for name, p in model.named_parameters() if p.grad is not None}
    return (hidden.float() * real).detach(), grads


def _assert_path_matches_eager(model, implementation: str) -> None:
    """Outputs and gradients of `implementation` against eager on a padded batch of 150 tokens.

    fp32: against eager directly. bf16: both paths against eager in fp32, `implementation` no further from it
    than twice eager's own bf16 error (or the tolerance): two bf16 computations of a model with large weights
    can differ by more than either differs from fp32 (T5 at heads of 64: 0.08 apart on an H200,
    where each is about 0.04 from fp32 on a CPU)."""
    ids = random_ids(3, 150).cuda()
    mask = torch.ones_like(ids)
    mask[1, 90:] = 0
    golden, golden_grads = _outputs_and_grads(model, ids, mask, "eager")
    actual, actual_grads = _outputs_and_grads(model, ids, mask, implementation)
    torch.testing.assert_close(actual, golden, rtol=1e-3, atol=1e-3)
    _assert_gradients_close(actual_grads, golden_grads, 1e-3)
    reference, reference_grads = _outputs_and_grads(model, ids, mask, "eager", torch.bfloat16)
    actual, actual_grads = _outputs_and_grads(model, ids, mask, implementation, torch.bfloat16)
    _assert_no_further_than_eager(
        {"output": actual, **actual_grads}, {"output": reference, **reference_grads},
        {"output": golden, **golden_grads}, tolerance=3e-2,
    )  # fmt: skip


def _assert_no_further_than_eager(actual: dict, reference: dict, golden: dict, tolerance: float) -> None:
    """Each tensor's largest error against `golden` (fp32 eager), relative to its scale (gradients as in
    `_assert_gradients_close`): `actual`'s within twice `reference`'s (eager in the same dtype), or `tolerance`."""
    floor = 1e-2 * max(tensor.abs().max().item() for key, tensor in golden.items() if key != "output")
    for key, exact in golden.items():
        scale = exact.abs().max().item() if key == "output" else max(exact.abs().max().item(), floor)
        error = ((actual[key] - exact).abs().max() / scale).item()
        eager_error = ((reference[key] - exact).abs().max() / scale).item()
        assert error <= max(2 * eager_error, tolerance), (
            f"{key} (scale {scale:.3g}): {error:.3g} from fp32 eager, where eager in the same dtype is {eager_error:.3g}"
        )


@pytest.mark.parametrize("implementation", ["sdpa", "flex_attention"])
@pytest.mark.parametrize("name", list(FUSED))
def test_fused_paths_match_the_reference_on_cuda_with_gradients(name, implementation):
    """Compiled FlexAttention (and the chunked path for Shaw's value term) against eager, fp32 and bf16."""
    torch.manual_seed(0)
    config = tiny_kolong_config(position_encoding=name.split("-")[0], position_kwargs=FUSED[name],
                                initializer_range=0.2)  # fmt: skip
    _assert_path_matches_eager(KolongModel(config).cuda().train(), implementation)


@pytest.mark.parametrize("boolean", [True, False])
def test_masked_sdpa_keeps_finite_gradients_where_cudnns_backward_gave_nan(boolean):
    """pytorch/pytorch#196678's case through kolong's `sdpa`: 704 tokens (64 past a multiple of 128), a mask,
    every row's log-sum-exp near -120. cuDNN before 9.26 returned NaN in dq on sm90; kolong's call must not, with a
    boolean mask or a float32 one (cast to the queries' bf16 on the way)."""
    import math

    from kolong.attention import sdpa

    torch.manual_seed(0)
    length, head = 704, 64
    q, k = (torch.randn(1, 1, length, head, device="cuda", dtype=torch.bfloat16) * 0.1 for _ in range(2))
    v = torch.randn(1, 1, length, head, device="cuda", dtype=torch.bfloat16)
    q[..., 0], k[..., 0] = 1.0, -120 * math.sqrt(head)
    q.requires_grad_()
    allowed = torch.ones(1, 1, length, length, dtype=torch.bool, device="cuda").tril()
    additive = torch.zeros(allowed.shape, device="cuda").masked_fill(~allowed, -1e4)
    out = sdpa.sdpa(q, k, v, attn_mask=allowed if boolean else additive)
    out.backward(torch.randn_like(out))
    assert torch.isfinite(q.grad).all(), f"NaN in dq (cuDNN {sdpa.CUDNN}, torch {torch.__version__})"


@pytest.mark.parametrize("name", ["learned-local", "shaw", "t5", "alibi"])
def test_attention_dropout_runs_in_flex_on_cuda_as_the_reference_drops(name, monkeypatch):
    """Training with attention dropout: the default path on CUDA (compiled FlexAttention, two passes, the
    hashed mask in the kernel) against eager told to drop the same entries; the chunked path it replaced
    would draw other drops and fail this. fp32 and bf16."""
    from kolong.attention import dispatch, flex_dropout

    torch.manual_seed(0)
    keys = flex_dropout.draw_keys(3, 2, "cuda")
    monkeypatch.setattr(flex_dropout, "draw_keys", lambda *args: keys)

    def same_drops(shape, p, device, generator=None):
        return ~flex_dropout.keep_mask(keys, p, shape[-2], shape[-1]).expand(shape), 1.0 - p

    monkeypatch.setattr(dispatch, "attention_dropout_mask", same_drops)
    local = {"attention_pattern": "local+global", "attention_window": 16} if name == "learned-local" else {}
    scheme = name.split("-")[0]
    config = tiny_kolong_config(position_encoding=scheme, position_kwargs=FUSED.get(scheme, {}),
                                initializer_range=0.2, attention_probs_dropout_prob=0.2,
                                max_position_embeddings=150, **local)  # fmt: skip
    _assert_path_matches_eager(KolongModel(config).cuda().train(), "sdpa")


@pytest.mark.parametrize("scheme", ["shaw", "t5"])
def test_relative_schemes_train_with_dropout_at_the_presets_head_size_in_bf16_on_cuda(scheme):
    """Heads of 64 in bf16, as the presets train: Inductor's default forward tiles then needed more shared
    memory than an H200 block has for the trained float32 tensor the score_mod reads (`flex.kernel_options`).
    Against eager, then a compiled model (as `pretrain mlm` runs it) trains with attention dropout."""
    torch.manual_seed(0)
    kwargs = {"max_distance": 16} if scheme == "shaw" else {}
    sizes = dict(position_encoding=scheme, position_kwargs=kwargs, hidden_size=128, intermediate_size=256,
                 max_position_embeddings=256, initializer_range=0.2)  # fmt: skip
    _assert_path_matches_eager(KolongModel(tiny_kolong_config(**sizes)).cuda().train(), "sdpa")
    config = tiny_kolong_config(**sizes, attention_probs_dropout_prob=0.1)
    model = KolongModel(config, add_pooling_layer=False).cuda().train()
    compiled = torch.compile(model)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = compiled(random_ids(4, 256).cuda()).last_hidden_state.float().square().mean()
    loss.backward()
    assert all(w.grad.isfinite().all() for w in model.parameters() if w.grad is not None)


def test_attention_dropout_in_flex_on_cuda_survives_gradient_checkpointing():
    """The backward's recomputation draws the same hash keys (the RNG state is restored): the same
    gradients with and without checkpointing."""
    config = tiny_kolong_config(position_encoding="shaw", position_kwargs=FUSED["shaw"],
                                attention_probs_dropout_prob=0.3)  # fmt: skip
    ids = random_ids(2, 64).cuda()
    gradients = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = KolongModel(config, add_pooling_layer=False).cuda().train()
        if checkpointing:
            model.gradient_checkpointing_enable({"use_reentrant": False})
        torch.manual_seed(1)
        model(ids).last_hidden_state.square().mean().backward()
        gradients.append({name: w.grad for name, w in model.named_parameters() if w.grad is not None})
    _assert_gradients_close(gradients[1], gradients[0], 1e-4)


@pytest.mark.parametrize("name", ["learned", *FUSED])
def test_local_global_attention_on_cuda_matches_the_reference_with_gradients(name):
    """FlexAttention block masks (and the banded chunked path for Shaw's value term) with a local window and
    global tokens, against eager: outputs and every gradient."""
    torch.manual_seed(0)
    config = tiny_kolong_config(position_encoding=name.split("-")[0], position_kwargs=FUSED.get(name, {}),
                                initializer_range=0.2, attention_pattern="local+global", attention_window=16,
                                max_position_embeddings=300)  # fmt: skip
    model = KolongModel(config).cuda().train()
    ids = random_ids(2, 300).cuda()
    mask = torch.ones_like(ids)
    mask[1, 250:] = 0
    expected, expected_grads = _outputs_and_grads(model, ids, mask, "eager")
    actual, actual_grads = _outputs_and_grads(model, ids, mask, "sdpa")
    torch.testing.assert_close(actual, expected, rtol=1e-3, atol=1e-3)
    _assert_gradients_close(actual_grads, expected_grads, 1e-3)


def test_bench_compress_times_the_pytorch_variants_on_cuda_and_refuses_onnxruntime_there(tmp_path):
    """`bench compress --device cuda`: fp32 and int8 run on the GPU; onnxruntime (CPU package) is left out of
    `all` and refused by name."""
    import json

    from typer.testing import CliRunner

    from kolong.cli import app
    from test_compress import _hf_qa_with_tokenizer

    pytest.importorskip("torchao")
    _hf_qa_with_tokenizer(tmp_path / "qa")
    common = ["bench", "compress", "--model", str(tmp_path / "qa"), "--length", "64", "--repeats", "1",
              "--device", "cuda", "--output-dir", str(tmp_path / "out")]  # fmt: skip
    result = CliRunner().invoke(app, [*common, "--variants", "fp32,int8,student"])
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "out" / "compress.json").read_text())
    assert saved["device"] == "cuda" and {v["variant"] for v in saved["variants"]} == {
        "fp32",
        "int8",
        "student",
    }
    refused = CliRunner().invoke(app, [*common, "--variants", "fp32,ort-int8"])
    assert refused.exit_code != 0 and "ort-int8 runs on the CPU only" in refused.output


def test_bench_long_attention_measures_memory_in_this_process_on_cuda(tmp_path, monkeypatch):
    """On CUDA the allocator's peak resets, so memory is read from the models already timed: no worker
    process, which would compile FlexAttention again for every pattern and length."""
    import json

    from typer.testing import CliRunner

    from kolong.cli import app
    from kolong.lab.bench import long_attention

    monkeypatch.setattr(long_attention, "_memory_worker", lambda *a: pytest.fail("a worker was started"))
    result = CliRunner().invoke(app, [
        "bench", "long-attention", "--device", "cuda", "--dtype", "bf16", "--lengths", "256,512", "--window", "32",
        "--global-tokens", "8", "--sliding-length", "128", "--sliding-overlap", "32", "--hidden-size", "64",
        "--layers", "1", "--heads", "2", "--intermediate-size", "128", "--repeats", "1", "--output-dir", str(tmp_path),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "long-attention.json").read_text())
    assert not data["memory_errors"]
    for mode in ("inference", "training"):
        for pattern in ("full", "local+global", "sliding"):
            assert all(mb > 0 for mb in data["memory_mb"][mode][pattern].values()), (mode, pattern)


def test_greedy_generate_replays_a_cuda_graph_per_byte_and_gives_generates_bytes():
    """`greedy_generate(compile=True)` on CUDA: the step compiled in "reduce-overhead" mode (CUDA graphs), twice
    (the second call replays the kept graphs); in fp32 the bytes are generate's (in bf16, as the bench runs it,
    near-ties may go either way between kernels: it runs, with every byte in the vocabulary)."""
    from kolong.models.byte import (
        KolongByteConfig,
        KolongByteForConditionalGeneration,
        add_gbst,
        greedy_generate,
    )

    torch.manual_seed(0)
    config = KolongByteConfig(hidden_size=64, num_attention_heads=2, head_dim=32, intermediate_size=128,
                              encoder_layers=2, decoder_layers=2, dropout_rate=0.0)  # fmt: skip
    from torch._dynamo.utils import counters

    model = add_gbst(KolongByteForConditionalGeneration(config)).cuda().eval()
    skips = counters["inductor"]["cudagraph_skips"]
    for seed in (0, 1):
        ids = torch.randint(3, 250, (4, 60), generator=torch.Generator().manual_seed(seed)).cuda()
        mask = torch.ones_like(ids)
        mask[3, 40:] = 0
        with torch.inference_mode():
            want = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=12, num_beams=1, do_sample=False
            )
        assert torch.equal(greedy_generate(model, ids, mask, max_new_tokens=12, compile=True), want), seed
        with torch.autocast("cuda", dtype=torch.bfloat16):
            bf16 = greedy_generate(model, ids, mask, max_new_tokens=12, min_new_tokens=12, compile=True)
        assert bf16.shape == (4, 13) and bool(((bf16 >= 0) & (bf16 < config.vocab_size)).all())
    assert counters["inductor"]["cudagraph_skips"] == skips  # every compiled step replayed as a CUDA graph


def test_a_compiled_model_reads_each_rows_own_block_mask_on_cuda():
    """Packed documents through FlexAttention in a model compiled whole: the block mask is built inside the
    graph, and Inductor gave its tables' head dimension of size 1 the stride 0, so FlexAttention's forward
    read the first row's block indices for every row (torch 2.11, H200). Rows of different
    layouts (one document; four of 128 tokens; two of 256; documents of 100) equal the materialised path, and
    so does the uncompiled model, whose FlexAttention calls (compiled alone) take one head's tables."""
    torch.manual_seed(0)
    n = 512
    config = tiny_kolong_config(max_position_embeddings=n, hidden_size=64, intermediate_size=128)
    model = KolongModel(config, add_pooling_layer=False).cuda().eval()
    position = torch.arange(n)
    documents = torch.stack([position * 0 + 1, position // 128 + 1, position // 256 + 1, position // 100 + 1])
    ids, documents = random_ids(4, n).cuda(), documents.cuda()
    with torch.no_grad():
        compiled = torch.compile(model)(ids, attention_mask=documents).last_hidden_state
        flex_alone = model(
            ids, attention_mask=documents
        ).last_hidden_state  # one head's tables, built eagerly
        model.set_attn_implementation("eager")
        expected = model(ids, attention_mask=documents).last_hidden_state
    torch.testing.assert_close(compiled, expected, rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(flex_alone, expected, rtol=2e-3, atol=2e-3)
