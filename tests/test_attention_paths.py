"""The fused attention paths against the reference: outputs and every gradient, every scheme, every mask.

`eager` (scores, bias and probabilities materialised, the gathered Shaw bias) is the reference; `sdpa`
(kolong's default: SDPA or the chunked exact path on CPU) and `flex_attention` (forward only on CPU,
run uncompiled here; compiled with gradients in test_gpu.py) must match it.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import random_ids, tiny_kolong_config
from kolong.attention import chunked, flex
from kolong.attention.dispatch import CallFacts, Contribution
from kolong.attention.masks import AttentionMask
from kolong.attention.options import AttentionOptions
from kolong.models import KolongConfig, KolongForMaskedLM, KolongModel
from kolong.positions.t5 import bucket_boundaries, relative_position_bucket

SCHEMES = {
    "learned": {},
    "sinusoidal": {},
    "memn2n": {},
    "shaw": {"max_distance": 3},
    "shaw-value": {"max_distance": 3, "value": True},
    "shaw-shared": {"max_distance": 20, "shared": True},
    "t5": {"num_buckets": 8, "max_distance": 20},
    "t5-per-layer": {"shared": False},
    "alibi": {},
    "rope": {},
    "none": {},
}
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


# Row blocks of 16 queries, so every test crosses block boundaries (and blocks of 2 for the CPU regions, so
# Shaw's reach of 3 takes them from 24 tokens on); flex_attention uncompiled.
BLOCKS = AttentionOptions(chunk_scores=1, regions_block_rows=2, flex_compile=False)


def model_for(
    name: str, length: int = 40, options: AttentionOptions = BLOCKS, **overrides
) -> KolongForMaskedLM:
    torch.manual_seed(0)
    scheme = name.split("-")[0]
    config = tiny_kolong_config(position_encoding=scheme, position_kwargs=SCHEMES[name],
                                max_position_embeddings=length, initializer_range=0.2, **overrides)  # fmt: skip
    model = KolongForMaskedLM(config)
    model.set_attention_options(options)
    return model


def run_path(model, implementation: str, ids, mask, position_ids=None):
    """Loss-weighted outputs on real tokens and every parameter's gradient, through one attention path."""
    model.set_attn_implementation(implementation)
    model.zero_grad(set_to_none=True)
    hidden = model.kolong(ids, attention_mask=mask, position_ids=position_ids).last_hidden_state
    real = (mask != 0)[..., None]
    (hidden * real).square().mean().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return (hidden * real).detach(), grads


def padded_batch(length: int = 37):
    ids = random_ids(3, length)
    mask = torch.ones_like(ids)
    mask[1, length // 2 :] = 0
    mask[2, length - 3 :] = 0
    return ids, mask


@pytest.mark.parametrize("name", list(SCHEMES))
def test_default_path_matches_the_reference_in_outputs_and_gradients(name):
    model = model_for(name)
    ids, mask = padded_batch(37)  # odd length, padding, three row blocks
    expected, expected_grads = run_path(model, "eager", ids, mask)
    actual, actual_grads = run_path(model, "sdpa", ids, mask)
    torch.testing.assert_close(actual, expected)
    assert expected_grads.keys() == actual_grads.keys()
    for key, grad in expected_grads.items():
        torch.testing.assert_close(actual_grads[key], grad, rtol=1e-4, atol=1e-5, msg=key)


@pytest.mark.parametrize("name", ["shaw", "t5", "alibi", "rope"])
def test_relative_schemes_match_beyond_the_training_length(name):
    model = model_for(name, length=16)
    ids, mask = padded_batch(53)
    torch.testing.assert_close(run_path(model, "sdpa", ids, mask)[0], run_path(model, "eager", ids, mask)[0])


@pytest.mark.parametrize("name", ["shaw-value", "t5", "alibi"])
def test_bf16_autocast_paths_agree_within_bf16_tolerance(name):
    model = model_for(name)
    ids, mask = padded_batch(33)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, _ = run_path(model, "eager", ids, mask)
        actual, _ = run_path(model, "sdpa", ids, mask)
    torch.testing.assert_close(actual.float(), expected.float(), rtol=0.05, atol=0.05)


@pytest.mark.parametrize("name", list(SCHEMES))
def test_flex_attention_forward_matches_the_reference(name):
    model = model_for(name).eval()
    ids, mask = padded_batch(37)
    with torch.no_grad():
        expected = run_forward(model, "eager", ids, mask)
        actual = run_forward(model, "flex_attention", ids, mask)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


def run_forward(model, implementation, ids, mask, position_ids=None):
    model.set_attn_implementation(implementation)
    hidden = model.kolong(ids, attention_mask=mask, position_ids=position_ids).last_hidden_state
    return hidden * (mask != 0)[..., None]


@pytest.mark.parametrize("name", ["learned", "sinusoidal", "shaw", "shaw-value", "t5", "alibi", "rope"])
def test_packed_documents_attend_only_within_themselves(name):
    """Two documents packed in one row (attention_mask 1, 1, ..., 2, 2, ..., 0) give what each gives alone:
    attention stays in each document and absolute positions restart at its first token."""
    model = model_for(name).eval()
    first, second = random_ids(1, 13, seed=1), random_ids(1, 20, seed=2)
    ids = torch.cat([first, second, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 13 + [2] * 20 + [0] * 4])
    with torch.no_grad():
        alone = [model.kolong(part).last_hidden_state for part in (first, second)]
        for implementation in ("eager", "sdpa", "flex_attention"):
            packed = run_forward(model, implementation, ids, mask)
            torch.testing.assert_close(packed[:, :13], alone[0], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(packed[:, 13:33], alone[1], rtol=1e-4, atol=1e-5)
    # ...and the gradients of the packed row match the reference too.
    expected_grads = run_path(model.train(), "eager", ids, mask)[1]
    for key, grad in run_path(model, "sdpa", ids, mask)[1].items():
        torch.testing.assert_close(grad, expected_grads[key], rtol=1e-4, atol=1e-5, msg=key)


def test_local_and_global_patterns_agree_on_every_path():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 45, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    real = torch.ones(2, 45, dtype=torch.bool)
    real[1, 40:] = False
    global_tokens = torch.zeros(2, 45, dtype=torch.bool)
    global_tokens[:, :3] = True
    mask = AttentionMask(real=real, window=5, global_tokens=global_tokens)
    allowed = mask.rows(0, 45, 45, "cpu")
    assert (
        allowed[0, 0, 20, 0]
        and not allowed[0, 0, 20, 30]
        and allowed[0, 0, 0, 44]
        and not allowed[1, 0, 0, 42]
    )
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(chunked.chunked_attention(q, k, v, mask, options=BLOCKS), reference)
    with torch.no_grad():
        block_mask = mask.block_mask(2, 45, "cpu")
        flexed = flex.plain_flex(q.detach(), k.detach(), v.detach(), block_mask, 8**-0.5, None, None)
        torch.testing.assert_close(flexed, reference)
    # A window as wide as the input is full attention.
    wide = AttentionMask(real=real, window=45)
    full = AttentionMask(real=real)
    torch.testing.assert_close(
        chunked.chunked_attention(q, k, v, wide, options=BLOCKS),
        chunked.chunked_attention(q, k, v, full, options=BLOCKS),
    )


def dense_reference(q, k, v, mask, bias):
    """softmax(q k^T / sqrt(d) + bias + mask) v (+ value term), everything materialised, autograd's backward."""
    length = k.shape[2]
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if bias is not None:
        scores = scores + bias.scores(bias.tensors, 0, length, length)
    scores = scores.masked_fill(~mask.rows(0, length, length, "cpu"), float("-inf"))
    probs = scores.softmax(-1)
    out = probs @ v
    if bias is not None and bias.has_values:
        out = out + bias.values(bias.tensors, 0, length, probs)
    return out


def relative_bias(name: str, batch: int, heads: int, length: int, head_dim: int):
    from kolong.positions.alibi import ALiBiChunkBias
    from kolong.positions.shaw import ShawChunkBias
    from kolong.positions.t5 import T5ChunkBias

    def parameter(*shape):
        return torch.randn(*shape, dtype=torch.float64, requires_grad=True)

    if name == "shaw-value":
        return ShawChunkBias(parameter(batch, heads, length, 7), parameter(7, head_dim), 3)
    if name == "t5":
        return T5ChunkBias(parameter(heads, 2 * length - 1))
    if name == "alibi":
        return ALiBiChunkBias(torch.tensor([0.5, 0.25], dtype=torch.float64))
    return None


@pytest.mark.parametrize("name", ["none", "shaw-value", "t5", "alibi"])
def test_local_attention_reads_only_its_band_and_stays_exact(name, monkeypatch):
    """The chunked path reads a block's band plus the global keys (not all n): outputs and gradients
    equal dense attention under the same mask, with globals inside and outside the bands."""
    torch.manual_seed(0)
    length = 70
    q, k, v = (torch.randn(2, 2, length, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias = relative_bias(name, 2, 2, length, 4)
    real = torch.ones(2, length, dtype=torch.bool)
    real[1, 60:] = False
    global_tokens = torch.zeros(2, length, dtype=torch.bool)
    global_tokens[:, :2] = True
    global_tokens[1, 40] = True
    mask = AttentionMask(real=real, window=5, global_tokens=global_tokens)
    read = []
    key_index = AttentionMask.key_index
    monkeypatch.setattr(
        AttentionMask, "key_index", lambda self, *a: read.append(key_index(self, *a)) or read[-1]
    )
    tensors = (q, k, v, *(bias.tensors if bias is not None else ()))
    chunked_out = chunked.chunked_attention(q, k, v, mask, bias, options=BLOCKS)
    chunked_grads = torch.autograd.grad(chunked_out.square().sum(), tensors)
    dense_out = dense_reference(q, k, v, mask, bias)
    dense_grads = torch.autograd.grad(dense_out.square().sum(), tensors)
    torch.testing.assert_close(chunked_out, dense_out)
    for got, expected in zip(chunked_grads, dense_grads, strict=True):
        torch.testing.assert_close(got, expected)
    banded = [keys for keys in read if keys is not None]
    assert banded and max(len(keys) for keys in banded) < length  # blocks away from globals read a band
    assert {0, 1, 40} <= set(banded[-1].tolist())  # global keys are always read
    assert read[0] is None  # the block holding global queries reads every key


@pytest.mark.parametrize("name", ["shaw-value", "t5", "alibi"])
def test_a_schemes_block_is_its_bias_less_each_rows_shift(name):
    """`ChunkBias.block`, the tensor the chunked path adds q k^T into: the bias of the rows (every key, a run of
    keys, a window's keys by index), less the shift of each row when given, contiguous, in the dtype asked for."""
    torch.manual_seed(0)
    batch, heads, length = 2, 2, 40
    bias = relative_bias(name, batch, heads, length, 4)
    tensors = tuple(t.detach() for t in bias.tensors)
    for start, stop in ((0, 9), (13, 27), (31, 40)):
        shift = torch.randn(batch, heads, stop - start, dtype=torch.float64)
        whole = bias.scores(tensors, start, stop, length)  # (b|1, h, c, n)
        for keys in (None, range(5, 33), torch.tensor([0, 1, 14, 20, 39])):
            expected = (
                whole
                if keys is None
                else whole[..., keys if isinstance(keys, torch.Tensor) else slice(keys.start, keys.stop)]
            )
            shape = (batch, heads, stop - start, expected.shape[-1])
            for given in (None, shift):
                block = bias.block(tensors, start, stop, length, shape, torch.float32, keys, given)
                assert block.shape == shape and block.dtype == torch.float32 and block.is_contiguous()
                wanted = expected.expand(shape) - (0 if given is None else given[..., None])
                torch.testing.assert_close(block, wanted.float())


class _FullCopies(TorchDispatchMode):
    """Records every copy (clone, copy_, _to_copy) whose result has one of `shapes`."""

    def __init__(self, shapes):
        super().__init__()
        self.shapes, self.seen = shapes, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        copies = (torch.ops.aten.clone, torch.ops.aten.copy_, torch.ops.aten._to_copy)
        if func.overloadpacket in copies and tuple(out.shape) in self.shapes:
            self.seen.append(str(func))
        return out


def test_chunked_attention_copies_views_of_one_projection_once_not_per_block():
    """q, k, v as the encoder makes them, views of one (b, n, 3, h, d_h) projection whose (b, h) axes do not merge:
    outputs and gradients as from contiguous copies, and the path copies each once per call (forward and backward
    together), where a batched product over such a view copies it at every block."""
    torch.manual_seed(0)
    batch, heads, length, head_dim = 3, 2, 64, 4
    four_blocks = AttentionOptions(chunk_scores=batch * heads * length * 16)  # of 16 rows
    projection = torch.randn(batch, length, 3, heads, head_dim, dtype=torch.float64, requires_grad=True)
    bias = relative_bias("shaw-value", batch, heads, length, head_dim)
    real = torch.ones(batch, length, dtype=torch.bool)
    real[2, 41:] = False
    views = projection.permute(2, 0, 3, 1, 4).unbind(0)
    assert not views[1].is_contiguous()
    results = []
    for q, k, v in (views, [t.contiguous() for t in views]):
        with _FullCopies({(batch, heads, length, head_dim), (batch, heads, head_dim, length)}) as copies:
            out = chunked.chunked_attention(q, k, v, AttentionMask(real=real), bias, options=four_blocks)
            grads = torch.autograd.grad(out.square().sum(), (projection, *bias.tensors))
        results.append((out, grads, copies.seen))
    torch.testing.assert_close(results[0][0], results[1][0])
    for got, expected in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(got, expected)
    assert len(results[0][2]) == 3, results[0][2]  # q, k and v, once
    assert results[1][2] == []


@pytest.mark.parametrize("reach", [1, 5, 12, 40])
def test_t5s_chunked_bias_within_a_reach_gives_the_dense_gradient(reach):
    """T5's chunk bias over distances -reach..reach, its edges standing for every distance past them: outputs and
    gradients (q, k, v and the clipped vector) equal dense attention with that vector gathered by clipped distance,
    over blocks whose keys lie past the reach on the left, the right, both or neither."""
    from kolong.positions.t5 import T5ChunkBias

    torch.manual_seed(0)
    batch, heads, length = 2, 2, 37
    blocks = AttentionOptions(chunk_scores=batch * heads * length * 8)  # of 16 rows
    q, k, v = (
        torch.randn(batch, heads, length, 4, dtype=torch.float64, requires_grad=True) for _ in range(3)
    )
    clipped = torch.randn(heads, 2 * reach + 1, dtype=torch.float64, requires_grad=True)
    real = torch.ones(batch, length, dtype=torch.bool)
    real[1, 30:] = False
    mask = AttentionMask(real=real)
    tensors = (q, k, v, clipped)
    out = chunked.chunked_attention(q, k, v, mask, T5ChunkBias(clipped, reach), options=blocks)
    grads = torch.autograd.grad(out.square().sum(), tensors)
    position = torch.arange(length)
    distance = (position[None, :] - position[:, None]).clamp(-reach, reach) + reach  # (n, n)
    scores = q @ k.transpose(-1, -2) / 2.0 + clipped[:, distance][None]  # d_h = 4
    probs = scores.masked_fill(~mask.rows(0, length, length, "cpu"), float("-inf")).softmax(-1)
    expected = probs @ v
    torch.testing.assert_close(out, expected)
    for got, wanted in zip(grads, torch.autograd.grad(expected.square().sum(), tensors), strict=True):
        torch.testing.assert_close(got, wanted)


def test_chunked_gradients_are_exact_with_dropout_and_shaw_value_term():
    """gradcheck in float64 through the hand-written backward: bias, value term, padding and dropout.

    fast_mode compares one random projection of the Jacobian per input (a wrong gradient in any entry moves
    it), 20x cheaper than the full Jacobian at this size."""
    from kolong.positions.shaw import ShawChunkBias

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 21, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    profile = torch.randn(1, 2, 21, 7, dtype=torch.float64, requires_grad=True)
    table = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    real = torch.ones(1, 21, dtype=torch.bool)
    real[0, 17:] = False

    def attend(q, k, v, profile, table):
        torch.manual_seed(1)  # the same dropout mask at every call of gradcheck
        bias = ShawChunkBias(profile, table, 3)
        return chunked.chunked_attention(
            q, k, v, AttentionMask(real=real), bias, dropout_p=0.3, options=BLOCKS
        )

    assert torch.autograd.gradcheck(attend, (q, k, v, profile, table), fast_mode=True)


def quadratic_saved_tensors(output: torch.Tensor, length: int) -> list[str]:
    """Tensors the autograd graph of `output` keeps for the backward that have two axes of size `length` and
    own that many entries (a strided view of a vector, as `distance_view.py`'s bias, owns a vector's)."""
    found, seen, stack = [], set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name in dir(node):
            if name.startswith("_saved_") or name == "saved_tensors":
                saved = getattr(node, name)
                for tensor in saved if isinstance(saved, tuple) else [saved]:
                    if (
                        isinstance(tensor, torch.Tensor)
                        and list(tensor.shape).count(length) >= 2
                        and tensor.untyped_storage().nbytes() >= length * length * tensor.element_size()
                    ):
                        found.append(f"{node.name()}.{name} {tuple(tensor.shape)}")
        stack.extend(next_node for next_node, _ in node.next_functions)
    return found


@pytest.mark.parametrize("name", ["shaw-value", "t5", "alibi"])
def test_sdpa_attention_with_a_bias_saves_nothing_quadratic_for_the_backward(name):
    """Shaw and T5 train on the chunked path, ALiBi through SDPA with its bias as a view (`distance_view.py`)."""
    model = model_for(name, length=16)
    ids, mask = padded_batch(72)
    for implementation, quadratic in (("eager", True), ("sdpa", False)):
        model.set_attn_implementation(implementation)
        hidden = model.kolong(ids, attention_mask=mask).last_hidden_state
        assert bool(quadratic_saved_tensors(hidden, 72)) == quadratic, implementation


def test_eager_returns_attention_weights_and_the_other_paths_say_how_to_get_them(tmp_path):
    model = model_for("shaw")
    ids, mask = padded_batch(20)
    with pytest.raises(ValueError, match="set_attn_implementation\\('eager'\\)"):
        model(ids, attention_mask=mask, output_attentions=True)
    model.save_pretrained(tmp_path)
    for implementation in ("eager", "sdpa", "flex_attention"):  # checkpoints load on every path
        loaded = KolongForMaskedLM.from_pretrained(tmp_path, attn_implementation=implementation)
        assert loaded.config._attn_implementation == implementation
    eager = KolongForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    output = eager(ids, attention_mask=mask, output_attentions=True)
    assert len(output.attentions) == 2 and output.attentions[0].shape == (3, 2, 20, 20)
    torch.testing.assert_close(output.attentions[0].sum(-1), torch.ones(3, 2, 20))
    assert output.attentions[0][1, :, :, 10:].abs().max() < 1e-6  # padded keys get no weight


def test_flex_attention_refuses_what_it_cannot_do():
    model = KolongModel(tiny_kolong_config(position_encoding="alibi", attn_implementation="flex_attention",
                                           attention_probs_dropout_prob=0.1))  # fmt: skip
    model.set_attention_options(BLOCKS)
    ids = random_ids(2, 8)
    with pytest.raises(ValueError, match="no backward on CPU"):
        model.train()(ids)
    with torch.no_grad():  # attention dropout runs in FlexAttention (test_flex_dropout.py)
        assert model.train()(ids).last_hidden_state.shape == (2, 8, 32)
        assert model.eval()(ids).last_hidden_state.shape == (2, 8, 32)


@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 20), (4, 2), (64, 1000), (16, 9)])
def test_t5_bucket_boundaries_reproduce_the_bucket_function(num_buckets, max_distance):
    boundaries = bucket_boundaries(num_buckets, max_distance)
    relative = torch.arange(-3 * max_distance, 3 * max_distance + 1)
    distance, half = relative.abs(), num_buckets // 2
    bucket = torch.where(distance < half // 2, distance, half // 2)
    for boundary in boundaries:
        bucket = bucket + (distance >= boundary).long()
    bucket = bucket + (relative > 0).long() * half
    torch.testing.assert_close(bucket, relative_position_bucket(relative, num_buckets, max_distance))


def test_an_unknown_attention_implementation_is_refused_by_name():
    with pytest.raises(ValueError, match="attn_implementation"):
        KolongForMaskedLM(KolongConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=8)).set_attn_implementation("flash_attention_9")  # fmt: skip


def test_memn2n_refuses_packed_documents_and_learned_padding_rows_restart():
    ids = random_ids(1, 12, seed=3)
    documents = torch.tensor([[1] * 5 + [2] * 7])
    with pytest.raises(ValueError, match="memn2n"):
        model_for("memn2n").kolong(ids, attention_mask=documents)
    from conftest import tiny_kolong_config
    from kolong.models import KolongModel

    config = tiny_kolong_config(position_encoding="learned", position_kwargs={"reserve_padding_rows": True},
                                pad_token_id=0)  # fmt: skip
    model = KolongModel(config).eval()
    mask = AttentionMask.from_attention_mask(torch.tensor([[1, 1, 1, 2, 2, 0]]))
    restart = model.positions.packed_position_ids(mask.document_positions(), mask.documents.ne(0))
    assert restart.tolist() == [[1, 2, 3, 1, 2, 0]]  # RoBERTa rows: p + pad + 1, padding on pad's row


@pytest.mark.parametrize("name", ["t5", "t5-per-layer", "alibi"])
def test_distance_biases_match_the_reference_and_alibi_trains_through_its_view(name, monkeypatch):
    """Full attention: T5 and ALiBi infer through SDPA with the bias as a Hankel view (`distance_view.py`), one
    call per row length, in fp32 and under bf16 autocast, and packed documents through the chunked path; in
    training ALiBi (no bias parameters) takes the view too, and T5 (a table to train) the chunked path."""
    from kolong.attention import distance_view

    hankel = []
    original = distance_view._hankel
    monkeypatch.setattr(distance_view, "_hankel", lambda *a: hankel.append(1) or original(*a))
    model = model_for(name).eval()
    layers = model.config.num_hidden_layers
    ids, mask = padded_batch(37)  # rows of 37, 18 and 34 tokens
    with torch.no_grad():
        expected = run_forward(model, "eager", ids, mask)
        torch.testing.assert_close(run_forward(model, "sdpa", ids, mask), expected)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = run_forward(model, "sdpa", ids, mask)
        torch.testing.assert_close(low.float(), expected, rtol=0.05, atol=0.05)
        packed = mask * (1 + (torch.arange(37) >= 9))  # two documents per row
        torch.testing.assert_close(
            run_forward(model, "sdpa", ids, packed), run_forward(model, "eager", ids, packed)
        )
    assert len(hankel) == 2 * 3 * layers  # fp32 and bf16, rows of three lengths; packed documents: none
    hankel.clear()
    expected, expected_grads = run_path(model.train(), "eager", ids, mask)
    actual, actual_grads = run_path(model, "sdpa", ids, mask)
    torch.testing.assert_close(actual, expected)
    for key, grad in expected_grads.items():
        torch.testing.assert_close(actual_grads[key], grad, msg=key)
    assert len(hankel) == (3 * layers if name == "alibi" else 0)


@pytest.mark.parametrize("name", ["shaw", "shaw-shared", "shaw-value"])
def test_shaw_infers_through_the_chunked_path_and_matches_the_reference(name, monkeypatch):
    """Shaw at inference: the chunked path (its forward through SDPA's fused kernel per block of query rows where
    there is no value term), padding and packed documents, fp32 and bf16; in training too."""
    from kolong.attention import dispatch

    chunked_calls = []
    monkeypatch.setattr(
        dispatch,
        "chunked_attention",
        lambda *a, _f=dispatch.chunked_attention: chunked_calls.append(1) or _f(*a),
    )
    model = model_for(
        name, options=dataclasses.replace(BLOCKS, regions_block_rows=128)
    ).eval()  # rows too short
    layers = model.config.num_hidden_layers  # for the CPU regions' strips
    ids, mask = padded_batch(37)
    packed = mask * (1 + (torch.arange(37) >= 9))
    with torch.no_grad():
        for attention_mask in (mask, packed):
            expected = run_forward(model, "eager", ids, attention_mask)
            torch.testing.assert_close(run_forward(model, "sdpa", ids, attention_mask), expected)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = run_forward(model, "sdpa", ids, mask)
        torch.testing.assert_close(low.float(), run_forward(model, "eager", ids, mask), rtol=0.05, atol=0.05)
    assert len(chunked_calls) == 3 * layers
    run_path(model.train(), "sdpa", ids, mask)
    assert len(chunked_calls) == 4 * layers


@pytest.mark.parametrize("bias_name", ["alibi", "t5"])
def test_distance_attention_equals_dense_attention_with_gradients(bias_name):
    """Every row full; padding at the rows' ends (one row with no real key gets 0): the masks the plan table sends
    here (padding first and packed documents take the row blocks or the chunked path, tested with the plan)."""
    from kolong.attention.distance_view import distance_attention
    from test_sparse_attention import bias_for

    torch.manual_seed(0)
    length = 29
    q, k, v = (torch.randn(3, 2, length, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias = bias_for(bias_name, 2, length)
    inputs = (q, k, v, *bias.tensors)
    ends = torch.ones(3, length, dtype=torch.bool)
    ends[1, 20:] = False
    ends[2, :] = False
    every = AttentionMask(real=torch.ones_like(ends))
    for mask, reference in ((None, every), (AttentionMask(), every), (AttentionMask(real=ends), None)):
        reference = reference or mask
        out = distance_attention(q, k, v, mask, bias)
        torch.testing.assert_close(out, dense_reference(q, k, v, reference, bias).nan_to_num(0.0))
        d_out = torch.randn_like(out)
        expected = torch.autograd.grad(
            chunked.chunked_attention(q, k, v, reference, bias, options=BLOCKS), inputs, d_out
        )
        for got, want in zip(torch.autograd.grad(out, inputs, d_out), expected, strict=True):
            torch.testing.assert_close(got, want)


def test_the_bias_view_keeps_sdpa_fused_and_linear_in_memory():
    """The Hankel view reaches SDPA's fused CPU kernel (not the unfused path, which would materialise the
    (b, h, n, n) scores) with and without a gradient for q, k and v; its storage is the (h, 2n - 1) vector."""
    from kolong.attention import distance_view
    from test_sparse_attention import bias_for

    length, heads = 64, 2
    per_distance = (
        bias_for("alibi", heads, length).distances((), torch.arange(1 - length, length), length).float()
    )
    view = per_distance.flip(-1).as_strided((1, heads, length, length), (0, 2 * length - 1, 1, 1))
    q, k, v = (torch.randn(2, heads, length, 8, requires_grad=True) for _ in range(3))
    assert view.untyped_storage().nbytes() == heads * (2 * length - 1) * 4
    flash = torch._fused_sdp_choice(q, k, v, view)
    assert (
        flash
        == torch._fused_sdp_choice(q, k, v, None)
        != torch._fused_sdp_choice(q, k, v, view.requires_grad_())
    )
    out = distance_view._hankel(q, k, v, per_distance, length)
    assert "Flash" in out.grad_fn.name()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("name", "masked"), [("t5", "none"), ("shaw", "none"), ("t5", "padding"),
                                              ("t5", "documents")])  # fmt: skip
def test_chunked_forward_of_a_bias_by_distance_without_a_mask_is_one_fused_call(
    name, masked, dtype, monkeypatch
):
    """T5 unmasked, without dropout: the plan asks the chunked attention for its forward in one call of SDPA's fused
    CPU kernel (the bias as a Hankel view), which keeps its own backward, equal to the row-block forward and to
    the dense reference, the bias tensors' gradients included. Any other bias, or a mask, goes row block by row
    block (and refuses `one_call`); a sequence of padding alone gets 0 and finite gradients."""
    torch.manual_seed(0)
    length = 29
    q, k, v = (torch.randn(3, 2, length, 4, dtype=dtype, requires_grad=True) for _ in range(3))
    if name == "shaw":
        from kolong.positions.shaw import ShawChunkBias

        bias = ShawChunkBias(torch.randn(3, 2, length, 7, dtype=dtype, requires_grad=True), None, 3)
    else:
        bias = relative_bias(name, 3, 2, length, 4)
        bias.tensors = (bias.tensors[0].detach().to(dtype).requires_grad_(),)
    real = torch.ones(3, length, dtype=torch.bool)
    real[1, 20:] = False
    documents = (real.long() + (torch.arange(length) >= 11)) * real  # two documents a row, then padding
    mask = {
        "none": None,
        "padding": AttentionMask(real=real),
        "documents": AttentionMask(documents=documents),
    }
    mask = mask[masked]
    inputs = (q, k, v, *bias.tensors)
    one_call = name == "t5" and masked == "none"
    facts = CallFacts("sdpa", q, Contribution("distance" if name == "t5" else "query", trained=True),
                      mask or AttentionMask(), 0.0, AttentionOptions())  # fmt: skip
    assert facts.one_call == one_call
    if not one_call:
        with pytest.raises(ValueError, match="one_call"):
            chunked.chunked_attention(q, k, v, mask, bias, one_call=True, options=BLOCKS)
    taken = []
    hankel = chunked._hankel_forward
    monkeypatch.setattr(chunked, "_hankel_forward", lambda *a: taken.append(1) or hankel(*a))
    out = chunked.chunked_attention(q, k, v, mask, bias, one_call=one_call, options=BLOCKS)
    assert len(taken) == one_call
    d_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, inputs, d_out)
    expected = chunked.chunked_attention(q, k, v, mask, bias, options=BLOCKS)
    torch.testing.assert_close(out, expected)
    reference = mask if mask is not None else AttentionMask(real=torch.ones(3, length, dtype=torch.bool))
    torch.testing.assert_close(out, dense_reference(q, k, v, reference, bias))
    for got, want in zip(grads, torch.autograd.grad(expected, inputs, d_out), strict=True):
        torch.testing.assert_close(got, want)
    if masked == "padding":  # sequence 2 all padding: no key for any of its rows
        real[2] = False
        out = chunked.chunked_attention(q, k, v, AttentionMask(real=real), bias, options=BLOCKS)
        assert (out[2] == 0).all()
        assert all(torch.isfinite(grad).all() for grad in torch.autograd.grad(out.sum(), inputs))


def test_toeplitz_rows_read_the_bias_of_each_distance():
    """Entry (i, j) of rows start..stop-1 is per_distance[:, j - i + n - 1], for any block, and for the
    transposed (non-contiguous) tables T5 builds; the block comes contiguous."""
    from kolong.attention.terms import toeplitz_rows

    length = 11
    per_distance = torch.randn(2 * length - 1, 3).T  # (h, 2n - 1), transposed
    for start, stop in ((0, 11), (0, 4), (4, 9), (10, 11)):
        index = torch.arange(length)[None, :] - torch.arange(start, stop)[:, None] + length - 1
        rows = toeplitz_rows(per_distance, start, stop, length)
        # row-major: the passes that broadcast it over the batch read it fastest so
        assert torch.equal(rows, per_distance[:, index]) and rows.is_contiguous()
