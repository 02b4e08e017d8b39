"""The three regions on CPU through SDPA's fused kernel (`sdpa_regions.py`): the rectangles cover each row's far
keys exactly once, and outputs and every gradient (q, k, v, the edges' constants, the band, Shaw's value rows)
equal materialised attention under the same bias for padding, empty rows, odd lengths, a reach past the input,
blocks of any height, per-head constants, float32 and bf16 under autocast."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import random_ids, tiny_kolong_config
from kolong.attention import sdpa_regions
from kolong.attention.masks import AttentionMask
from kolong.attention.sdpa_regions import softmax_with_lse
from kolong.attention.terms import RegionTerms
from kolong.models import KolongForMaskedLM


def region_attention(q, k, v, terms: RegionTerms, mask=None) -> torch.Tensor:
    """The reference: softmax(q k^T / sqrt(d) + bias + mask) v + sum_j p_ij w^V(j - i), every score materialised,
    the bias of each pair read off the terms by its distance (the left constant, the band, the right constant).
    A row with no allowed key gets 0."""
    length, reach = q.shape[2], terms.reach
    position = torch.arange(length)
    relative = position[None, :] - position[:, None]  # (n, n): j - i
    band_index = (relative + reach - 1).clamp(0, 2 * reach - 2)
    band = terms.band.gather(-1, band_index.expand(*terms.band.shape[:2], -1, -1))
    left, right = terms.left[..., None].expand_as(band), terms.right[..., None].expand_as(band)
    bias = torch.where(relative <= -reach, left, torch.where(relative >= reach, right, band))
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + bias
    if mask is not None and not mask.empty:
        scores = scores.masked_fill(~mask.rows(0, length, length, q.device), -math.inf)
    probs = torch.softmax(scores, -1).nan_to_num(0.0)
    out = torch.matmul(probs, v)
    if terms.value_band is None:
        return out
    rows = torch.cat([terms.value_left[None], terms.value_band, terms.value_right[None]])  # (2r + 1, d_h)
    return out + torch.einsum("bhij,ijd->bhid", probs, rows[relative.clamp(-reach, reach) + reach])


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("reach", [1, 2, 5])
def test_the_rectangles_cover_each_rows_far_keys_exactly_once(rows, reach):
    for length in range(1, 41):
        layout = sdpa_regions._Layout(torch.zeros(1, 1, length, 2), None, reach, rows)
        block_start = torch.arange(length) // rows * rows
        block_stop = (block_start + rows).clamp(max=length)
        key = torch.arange(length)[None, :]
        expected = {
            "left": key <= block_start[:, None] - reach,
            "right": key >= block_stop[:, None] - 1 + reach,
        }
        for side, wanted in expected.items():
            count = torch.zeros(length, length, dtype=torch.long)
            for query_rows, keys in layout.rectangles[side]:
                count[query_rows, keys] += 1
            assert count.max() <= 1, (side, length)
            assert torch.equal(count.bool(), wanted), (side, length)
            strip = ~(
                expected["left"] | expected["right"]
            )  # what the strips compute: c + 2r - 2 keys at most
            assert int(strip.sum(1).max()) <= rows + 2 * reach - 2


def _inputs(batch, heads, length, head_dim, reach, values, per_head, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)

    def tensor(*shape):
        return torch.randn(*shape, generator=generator, dtype=dtype).requires_grad_()

    q, k, v = (tensor(batch, heads, length, head_dim) for _ in range(3))
    edges = (
        (1, heads, 1) if per_head else (batch, heads, length)
    )  # T5's per-head constants, or Shaw's per row
    left, right = tensor(*edges), tensor(*edges)
    band = tensor(batch, heads, length, 2 * reach - 1)
    rows = (tensor(head_dim), tensor(2 * reach - 1, head_dim), tensor(head_dim)) if values else (None,) * 3
    return (q, k, v), RegionTerms(reach, left, band, right, *rows)


CASES = [  # (length, reach, block rows, value term, T5's per-head constants)
    (37, 3, 4, True, False),
    (37, 3, 4, False, True),
    (40, 5, 8, True, False),  # whole blocks
    (23, 2, 1, True, False),  # blocks of one row
    (19, 25, 4, True, False),  # a reach past the input: the strips are everything
    (33, 1, 5, True, True),  # the band is the diagonal alone
    (64, 4, 128, False, False),  # one block
]


@pytest.mark.parametrize(("length", "reach", "rows", "values", "per_head"), CASES)
@pytest.mark.parametrize("padding", ["none", "padded", "empty sequence"])
def test_outputs_and_every_gradient_equal_the_exact_reference(length, reach, rows, values, per_head, padding):
    (q, k, v), terms = _inputs(3, 2, length, 8, reach, values, per_head)
    attention_mask = torch.ones(3, length, dtype=torch.long)
    if padding != "none":
        attention_mask[1, length - length // 3 :] = 0
        attention_mask[2, 1::2] = 0  # padding inside the row: far rectangles holding no real key
    if padding == "empty sequence":
        attention_mask[0] = 0
    mask = AttentionMask.from_attention_mask(attention_mask)
    expected = region_attention(q, k, v, terms, mask)
    actual = sdpa_regions.sdpa_region_attention(q, k, v, None if padding == "none" else mask, terms, rows)
    real = (attention_mask != 0)[:, None, :, None]  # padded queries' outputs are never read
    torch.testing.assert_close(actual * real, expected * real, rtol=1e-10, atol=1e-10)
    assert torch.isfinite(actual).all()
    d_out = torch.randn_like(expected) * real
    named = {"q": q, "k": k, "v": v, "left": terms.left, "band": terms.band, "right": terms.right,
             "value_left": terms.value_left, "value_band": terms.value_band, "value_right": terms.value_right}  # fmt: skip
    names = [name for name, tensor in named.items() if tensor is not None]
    inputs = [named[name] for name in names]
    expected_grads = torch.autograd.grad(expected, inputs, d_out)
    actual_grads = torch.autograd.grad(actual, inputs, d_out)
    for name, got, want in zip(names, actual_grads, expected_grads, strict=True):
        assert torch.isfinite(got).all(), name
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9, msg=name)


def test_float32_is_exact_to_rounding():
    (q, k, v), terms = _inputs(2, 3, 150, 16, 6, True, False, dtype=torch.float32)
    expected = region_attention(q, k, v, terms)
    actual = sdpa_regions.sdpa_region_attention(q, k, v, None, terms, block_rows=16)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    d_out = torch.randn_like(expected)
    inputs = [
        q,
        k,
        v,
        terms.left,
        terms.band,
        terms.right,
        terms.value_left,
        terms.value_band,
        terms.value_right,
    ]
    actual_grads, expected_grads = (torch.autograd.grad(out, inputs, d_out) for out in (actual, expected))
    for got, want in zip(actual_grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_mask_of_more_than_padding_is_refused():
    (q, k, v), terms = _inputs(1, 1, 8, 4, 2, False, False)
    documents = AttentionMask.from_attention_mask(torch.tensor([[1] * 4 + [2] * 4]))
    with pytest.raises(ValueError, match="padding masks only"):
        sdpa_regions.sdpa_region_attention(q, k, v, documents, terms)


@pytest.mark.parametrize(("scheme", "kwargs"), [("shaw", {"max_distance": 3, "value": True})])
def test_a_model_trains_through_the_regions_as_through_the_reference(scheme, kwargs):
    """Shaw (keys and values) in a model: the plan, outputs and every parameter's gradient against `eager`; under
    bf16 autocast the chunked path (16-bit outputs would lose the edges' gradients). T5 trains through the chunked
    path: the regions gained it nothing on the training step (docs/experiments/removed-paths.md)."""
    torch.manual_seed(0)
    config = tiny_kolong_config(position_encoding=scheme, position_kwargs=kwargs, max_position_embeddings=64,
                                initializer_range=0.2, attention_probs_dropout_prob=0.0)  # fmt: skip
    model = KolongForMaskedLM(config)
    model.set_attention_options(regions_block_rows=2)  # 61 tokens hold eight strips of 2 + 2 x 3 - 2 keys
    ids = random_ids(2, 61)
    mask = torch.ones_like(ids)
    mask[1, 40:] = 0
    assert {plan.kernel for plan in model.kolong.attention_plans(ids)} == {"sdpa-regions"}
    weights = torch.randn(
        2, 61, config.hidden_size
    )  # a layer-normed output's mean square is constant: no signal

    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert {plan.kernel for plan in model.kolong.attention_plans(ids)} == {"chunked"}

    def run(implementation):
        model.set_attn_implementation(implementation)
        model.zero_grad(set_to_none=True)
        hidden = model.kolong(ids, attention_mask=mask).last_hidden_state * mask[..., None]
        (hidden * weights).sum().backward()
        return hidden.detach(), {
            name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None
        }

    expected, expected_grads = run("eager")
    actual, grads = run("sdpa")
    torch.testing.assert_close(actual, expected)
    assert grads.keys() == expected_grads.keys()
    for name, grad in expected_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


def test_a_row_of_minus_infinity_gets_zero_probabilities_and_a_finite_gradient():
    """softmax_with_lse (the merge of the regions): an empty row is 0 with lse -inf, and nothing NaN flows back
    through it, whichever output the loss reads."""
    scores = torch.tensor([[-math.inf, -math.inf], [1.0, 2.0]], requires_grad=True)
    probs, lse = softmax_with_lse(scores)
    assert probs[0].tolist() == [0.0, 0.0] and lse[0] == -math.inf
    torch.testing.assert_close(lse[1], torch.logsumexp(scores[1], 0))
    (probs.sum() + lse[1]).backward()
    assert torch.isfinite(scores.grad).all() and scores.grad[0].tolist() == [0.0, 0.0]
