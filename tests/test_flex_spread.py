"""Bucket tensors spread over more columns for FlexAttention's backward (`flex_spread`): the layout, and Shaw
and T5 training through it with the reference's outputs and gradients (eager FlexAttention with its
backward on CPU; test_gpu.py compares the compiled CUDA kernels)."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import assert_flex_trains_as_eager, assert_one_graph, random_ids, tiny_kolong_config
from kolong.models import KolongModel
from kolong.models.encoder import flex_spread
from kolong.positions import shaw, t5

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def test_a_bucket_gets_the_largest_power_of_two_of_its_distances_up_to_the_widest():
    assert flex_spread.widths([math.inf, 1, 1, 1, math.inf], 8) == (8, 1, 1, 1, 8)
    assert flex_spread.widths([0, 1, 2, 3, 4, 7, 9, 100], 4) == (1, 1, 2, 2, 4, 4, 4, 4)
    assert flex_spread.widths([math.inf, 5], 1) == (1, 1)
    # T5's default buckets (32, max distance 128): 8 exact, 7 log-spaced, 1 unbounded per half
    t5_distances = t5.bucket_distances(32, t5.bucket_boundaries(32, 128))
    half = (1,) * 8 + (4, 4, 4, 8, 8, 16, 16, 32)
    assert flex_spread.widths(t5_distances, 32) == half + half


@pytest.mark.parametrize("widest", [0, 3, 24, "eight", " 8x"])
def test_the_widest_spread_is_a_power_of_two(widest):
    with pytest.raises(ValueError, match=r"KOLONG_FLEX_SPREAD.*power of two"):
        flex_spread.widths(
            [math.inf], flex_spread._from_environment(widest) if isinstance(widest, str) else widest
        )
    assert flex_spread._from_environment("16") == 16


def test_every_key_reads_a_copy_of_its_bucket_and_the_copies_gradients_add_up():
    torch.manual_seed(0)
    rows = torch.randn(2, 3, 5, 6, dtype=torch.bfloat16, requires_grad=True)
    widths = (1, 4, 1, 2, 1, 8)
    spread, offsets, masks = flex_spread.spread(rows, widths)
    assert spread.shape == (2, 3, 5, sum(widths)) and spread.dtype == torch.float32
    buckets = torch.arange(6)[:, None].expand(6, 40)
    keys = torch.arange(40)[None, :].expand(6, 40)
    columns = flex_spread.column(buckets, keys, offsets, masks)  # (buckets, keys)
    torch.testing.assert_close(spread[..., columns], rows.float()[..., buckets], rtol=0, atol=0)
    # each bucket's columns are read by keys spread over all of them, and by its own keys only
    for bucket, width in enumerate(widths):
        assert sorted(set(columns[bucket].tolist())) == list(range(offsets[bucket], offsets[bucket] + width))
    weights = torch.randn(spread.shape)
    (spread * weights).sum().backward()
    expected = torch.stack(
        [weights[..., offsets[b] : offsets[b] + w].sum(-1) for b, w in enumerate(widths)], -1
    )
    torch.testing.assert_close(rows.grad.float(), expected, rtol=1e-2, atol=1e-2)


CASES = {
    # the 2k - 1 band buckets and the two edges 4 wide; per half 2 exact buckets, one log-spaced of 5
    # distances (4 wide) and the unbounded one (4 wide)
    "shaw": ({"max_distance": 3}, "shaw_flex_spread", 2 * 3 - 1 + 2 * 4),
    "t5": ({"num_buckets": 8, "max_distance": 20}, "t5_flex_spread", 2 * (1 + 1 + 4 + 4)),
}


@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("scheme", list(CASES))
def test_training_through_the_spread_copy_matches_the_reference(
    eager_flex_with_backward, same_flex_drops, monkeypatch, scheme, dropout
):
    """Shaw's profile and T5's per-row table, spread 4 wide: the kernel reads the spread copy (shape checked:
    the edge buckets, and T5's log-spaced ones, are spread) and the model trains as the eager reference does,
    outputs and every gradient; inference reads the unspread tensors."""
    kwargs, name, columns = CASES[scheme]
    module = {"shaw": shaw, "t5": t5}[scheme]
    monkeypatch.setattr(flex_spread, "SPREAD", 4)
    reads = []
    spreading = getattr(module, name)

    def recording(q, k, v, block_mask, scale, drops, values, *args):
        reads.append(tuple(values.shape))
        return spreading(q, k, v, block_mask, scale, drops, values, *args)

    monkeypatch.setattr(module, name, recording)
    torch.manual_seed(0)
    same_flex_drops(batch=2, heads=2)
    config = tiny_kolong_config(position_encoding=scheme, position_kwargs=kwargs, max_position_embeddings=32,
                                attention_probs_dropout_prob=dropout)  # fmt: skip
    model = KolongModel(config, add_pooling_layer=False).train()
    assert_flex_trains_as_eager(model, 2, 21)
    layers = config.num_hidden_layers
    assert reads == [(2, 2, 21, columns)] * layers
    model.set_attn_implementation("flex_attention")
    with torch.no_grad():
        model(random_ids(2, 21))
    assert len(reads) == layers


UNSPREAD = {"shaw": "shaw_flex", "t5": "t5_flex_rows"}


@pytest.mark.parametrize("scheme", list(CASES))
def test_spread_off_trains_from_the_unspread_tensors_in_float32(
    eager_flex_with_backward, monkeypatch, scheme
):
    """Spread off: Shaw's profile and T5's per-row table as they are, in float32 even for a bf16 model (the
    backward adds up to n gradients into one entry, in that tensor's dtype)."""
    monkeypatch.setattr(flex_spread, "SPREAD", 1)
    module = {"shaw": shaw, "t5": t5}[scheme]
    monkeypatch.setattr(module, CASES[scheme][1], lambda *args: pytest.fail("spread with SPREAD = 1"))
    reads = []
    reading = getattr(module, UNSPREAD[scheme])

    def recording(q, k, v, block_mask, scale, drops, values, *args):
        reads.append(values.dtype)
        return reading(q, k, v, block_mask, scale, drops, values, *args)

    monkeypatch.setattr(module, UNSPREAD[scheme], recording)
    config = tiny_kolong_config(position_encoding=scheme, position_kwargs=CASES[scheme][0],
                                attn_implementation="flex_attention", max_position_embeddings=32)  # fmt: skip
    model = KolongModel(config, add_pooling_layer=False).to(torch.bfloat16).train()
    model(random_ids(2, 21)).last_hidden_state.float().sum().backward()
    assert reads == [torch.float32] * config.num_hidden_layers


@pytest.mark.parametrize("scheme", list(CASES))
def test_a_model_training_through_the_spread_copy_compiles_into_one_graph(
    eager_flex_with_backward, monkeypatch, scheme
):
    """As `pretrain mlm` compiles a model on CUDA: the layout is built from Python lists, no graph break."""
    monkeypatch.setattr(flex_spread, "SPREAD", 4)
    config = tiny_kolong_config(position_encoding=scheme, position_kwargs=CASES[scheme][0],
                                attention_probs_dropout_prob=0.1, attn_implementation="flex_attention",
                                max_position_embeddings=32)  # fmt: skip
    model = KolongModel(config, add_pooling_layer=False).train()
    assert_one_graph(model, random_ids(2, 24))
