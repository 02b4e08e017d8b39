"""Relative biases as three regions merged by log-sum-exp (`kolong.attention.regions`): the split and the merge
against the materialised reference with an exact kernel that returns the log-sum-exp, outputs and every gradient
(q, k, v, Shaw's and T5's tables), under padding, packed documents and odd lengths; empty regions stay finite;
then the same through FlexAttention (its eager reference, with the backward lifted) inside the model."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import (
    FLEX_HERE,
    assert_trains_as_eager,
    default_attention_options,
    random_ids,
    tiny_kolong_config,
)
from kolong.attention.masks import AttentionMask
from kolong.attention.regions import REGIONS, RegionTerms, mask_band, merge
from kolong.models import KolongModel
from kolong.positions.t5 import relative_position_bucket, saturation
from reference_regions import exact_region_kernel, region_attention

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def reference(q, k, v, bias, mask, value_rows=None, index=None):
    """softmax(q k^T / sqrt(d) + bias + mask) v (+ sum_j p_ij w^V_index(i,j)), everything materialised."""
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + bias
    allowed = mask.rows(0, q.shape[2], q.shape[2], q.device) if not mask.empty else None
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    probs = torch.softmax(scores, -1).nan_to_num(0.0)
    out = torch.matmul(probs, v)
    if value_rows is not None:
        out = out + torch.einsum("bhij,ijd->bhid", probs, value_rows[index])
    return out


MASKS = {
    "none": lambda n: AttentionMask(),
    "padding": lambda n: AttentionMask.from_attention_mask(torch.tensor([[1] * n, [1] * (n - 5) + [0] * 5])),
    "documents": lambda n: AttentionMask.from_attention_mask(
        torch.tensor([[1] * 7 + [2] * (n - 7), [1] * 3 + [2] * (n - 6) + [0] * 3])
    ),
}


def _real_rows(mask, n):
    if mask.empty:
        return torch.ones(2, 1, n, 1, dtype=torch.bool)
    real = mask.real if mask.real is not None else mask.documents != 0
    return real[:, None, :, None]


@pytest.mark.parametrize("masking", list(MASKS))
@pytest.mark.parametrize("value", [False, True])
def test_shaw_in_three_regions_is_the_reference_with_every_gradient(masking, value):
    torch.manual_seed(0)
    n, k, d = 23, 4, 8  # odd length, rows near both ends whose left or right region is empty
    q, k_, v = (torch.randn(2, 2, n, d, dtype=torch.float64, requires_grad=True) for _ in range(3))
    table = torch.randn(2 * k + 1, d, dtype=torch.float64, requires_grad=True)
    values = torch.randn(2 * k + 1, d, dtype=torch.float64, requires_grad=True)
    mask = MASKS[masking](n)
    position = torch.arange(n)
    index = (position[None, :] - position[:, None]).clamp(-k, k) + k  # (n, n)

    def regions():
        profile = torch.matmul(q, table.T) / math.sqrt(d)  # (b, h, n, 2k+1)
        terms = RegionTerms(k, profile[..., 0], profile[..., 1 : 2 * k], profile[..., 2 * k])
        if value:
            terms.value_left, terms.value_band, terms.value_right = (
                values[0],
                values[1 : 2 * k],
                values[2 * k],
            )
        return region_attention(q, k_, v, terms, exact_region_kernel(mask), mask_band(mask))

    def materialised():
        profile = torch.matmul(q, table.T) / math.sqrt(d)
        bias = profile.gather(-1, index.expand(2, 2, n, n))
        return reference(q, k_, v, bias, mask, values if value else None, index)

    real = _real_rows(mask, n)
    results = []
    for compute in (regions, materialised):
        out = compute() * real  # padded queries' outputs are never read
        grads = torch.autograd.grad(out.square().sum(), (q, k_, v, table, values), allow_unused=True)
        results.append((out, grads))
    torch.testing.assert_close(results[0][0], results[1][0])
    for ours, theirs in zip(results[0][1], results[1][1], strict=True):
        if theirs is None:
            assert ours is None or not ours.abs().sum()
        else:
            torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("masking", list(MASKS))
def test_t5_past_its_saturation_is_the_reference_with_the_tables_gradient(masking):
    torch.manual_seed(0)
    buckets, max_distance, n, d = 8, 20, 31, 8
    reach = saturation(buckets, max_distance)
    assert reach < n  # both edges hold keys for the middle rows
    table = torch.randn(buckets, 2, dtype=torch.float64, requires_grad=True)  # (buckets, h)
    q, k, v = (torch.randn(2, 2, n, d, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = MASKS[masking](n)
    position = torch.arange(n)
    relative = position[None, :] - position[:, None]
    edges = relative_position_bucket(torch.tensor([-reach, reach]), buckets, max_distance)

    def regions():
        inside = relative_position_bucket(torch.arange(1 - reach, reach), buckets, max_distance)
        band = table[inside].T[None, :, None, :].expand(2, 2, n, -1)
        terms = RegionTerms(reach, table[edges[0]][None, :, None], band, table[edges[1]][None, :, None])
        return region_attention(q, k, v, terms, exact_region_kernel(mask))

    def materialised():
        bias = table[relative_position_bucket(relative, buckets, max_distance)].permute(2, 0, 1)[None]
        return reference(q, k, v, bias, mask)

    real = _real_rows(mask, n)
    results = []
    for compute in (regions, materialised):
        out = compute() * real
        results.append((out, torch.autograd.grad(out.square().sum(), (q, k, v, table))))
    torch.testing.assert_close(results[0][0], results[1][0])
    for ours, theirs in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(ours, theirs)


def test_t5_saturates_where_its_bucket_function_does():
    assert saturation(32, 128) == 91
    for buckets, distance in ((32, 128), (8, 20), (16, 50)):
        reach = saturation(buckets, distance)
        far = torch.arange(reach, 4 * distance)
        for sign in (-1, 1):
            found = relative_position_bucket(sign * far, buckets, distance)
            assert (found == found[0]).all()
            assert relative_position_bucket(torch.tensor([sign * (reach - 1)]), buckets, distance) != found[0]


def test_the_merge_keeps_empty_regions_and_rows_finite():
    out = torch.ones(1, 1, 3, 2)
    empty = torch.full((1, 1, 3), -math.inf, requires_grad=True)
    lse = torch.tensor([[[0.0, -math.inf, 1.0]]], requires_grad=True)
    merged, total, shares = merge([(out, empty), (out * 2, lse)])
    assert torch.equal(merged[0, 0, 1], torch.zeros(2)) and total[0, 0, 1] == -math.inf
    assert torch.equal(shares[0], torch.zeros(1, 1, 3)) and shares[1][0, 0, 0] == 1
    (merged.sum() + total.masked_fill(~torch.isfinite(total), 0).sum()).backward()
    assert torch.isfinite(lse.grad).all() and torch.isfinite(empty.grad).all()
    assert REGIONS == ("left", "band", "right")


@pytest.mark.parametrize(("scheme", "kwargs"), [("shaw", {"max_distance": 3}), ("shaw", {"max_distance": 3, "value": True}),
                                                 ("t5", {"num_buckets": 8, "max_distance": 20})])  # fmt: skip
def test_the_model_trains_through_flex_regions_as_the_eager_reference(eager_flex_with_backward, monkeypatch, scheme,
                                                                      kwargs):  # fmt: skip
    """On a device where FlexAttention trains (CUDA; here FlexAttention's eager reference on CPU), Shaw and T5
    without attention dropout take the `flex-regions` plan: outputs and every parameter's gradient equal the
    eager path, with padding and packed documents."""
    default_attention_options(monkeypatch, flex_devices=FLEX_HERE)
    config = tiny_kolong_config(position_encoding=scheme, position_kwargs=kwargs, max_position_embeddings=48,
                                attention_probs_dropout_prob=0.0)  # fmt: skip
    torch.manual_seed(0)
    model = KolongModel(config, add_pooling_layer=False).double().train()
    ids = random_ids(2, 33)
    documents = torch.tensor([[1] * 12 + [2] * 21, [1] * 20 + [2] * 9 + [0] * 4])
    assert {plan.kernel for plan in model.attention_plans(ids, documents)} == {"flex-regions"}
    assert_trains_as_eager(model, ids, documents, "sdpa", rtol=1e-7, atol=1e-7)  # float64
    model.set_attn_implementation("sdpa")
    model.set_attention_options(skip_paths=("flex-regions",))  # the single score_mod, to time both
    kernels = {plan.kernel for plan in model.attention_plans(ids, documents)}
    assert kernels == ({"chunked"} if kwargs.get("value") else {"flex"})


def test_a_row_of_minus_infinity_gets_zero_probabilities_and_a_finite_gradient():
    """softmax_with_lse (the exact kernel's and the merge's): an empty row is 0 with lse -inf, and nothing NaN flows
    back through it, whichever output the loss reads."""
    from kolong.attention.regions import softmax_with_lse

    scores = torch.tensor([[-math.inf, -math.inf], [1.0, 2.0]], requires_grad=True)
    probs, lse = softmax_with_lse(scores)
    assert probs[0].tolist() == [0.0, 0.0] and lse[0] == -math.inf
    torch.testing.assert_close(lse[1], torch.logsumexp(scores[1], 0))
    (probs.sum() + lse[1]).backward()
    assert torch.isfinite(scores.grad).all() and scores.grad[0].tolist() == [0.0, 0.0]
