"""A trained bias by distance alone through SDPA's fused CPU kernel (`hankel.py`): outputs and every gradient (q, k,
v and the per-distance vector, its edges included) equal dense attention over the clipped bias, for padding at the
rows' ends, rows of padding alone, a reach past the input, blocks of any height and odd lengths; and a T5 model
trains through it as through the eager reference."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import random_ids, tiny_kolong_config
from kolong.attention import hankel
from kolong.models import KolongForMaskedLM


def _dense(q, k, v, per_distance, reach, ends):
    length = q.shape[2]
    index = (torch.arange(length)[None, :] - torch.arange(length)[:, None]).clamp(-reach, reach) + reach
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + per_distance[:, index]
    real = torch.arange(length)[None, :] < torch.tensor(ends)[:, None]  # (b, n)
    scores = scores.masked_fill(~real[:, None, None, :], -math.inf)
    return torch.softmax(scores, -1).nan_to_num(0.0) @ v


CASES = [  # (batch, heads, length, head size, reach, each row's real tokens or None)
    (2, 3, 37, 8, 5, None),
    (1, 2, 300, 16, 91, None),  # T5's reach, rows past several strips
    (2, 2, 64, 8, 91, None),  # a reach past the input: no left edge, every key in the band
    (1, 2, 20, 4, 1, None),  # a band of one distance
    (3, 2, 50, 8, 7, [50, 31, 31]),  # padding at the ends, two lengths
    (2, 2, 40, 8, 3, [0, 12]),  # a row of padding alone
]


@pytest.mark.parametrize("rows", [64, 5, 16])
@pytest.mark.parametrize("case", CASES)
def test_outputs_and_every_gradient_are_dense_attention_over_the_clipped_bias(monkeypatch, rows, case):
    monkeypatch.setattr(hankel, "BLOCK_ROWS", rows)
    batch, heads, length, head_size, reach, ends = case
    ends = ends or [length] * batch
    generator = torch.Generator().manual_seed(rows + length)
    q, k, v = (torch.randn(batch, heads, length, head_size, generator=generator, dtype=torch.float64,
                           requires_grad=True) for _ in range(3))  # fmt: skip
    per_distance = torch.randn(
        heads, 2 * reach + 1, generator=generator, dtype=torch.float64, requires_grad=True
    )
    out = hankel.hankel_attention(q, k, v, ends, per_distance, reach)
    grad = torch.randn(out.shape, generator=generator, dtype=torch.float64)
    reference = _dense(q, k, v, per_distance, reach, ends)
    torch.testing.assert_close(out, reference)
    inputs = (q, k, v, per_distance)
    for ours, theirs in zip(torch.autograd.grad(out, inputs, grad), torch.autograd.grad(reference, inputs, grad),
                            strict=True):  # fmt: skip
        torch.testing.assert_close(ours, theirs)


def test_the_edges_gradient_is_its_rows_far_mass_not_a_leftover():
    """The left edge's entry from the causal call, the right one from the rows' zero sum: a bias whose edges take
    most of every row's mass must still get exactly their gradient (a sign flipped in either fails here)."""
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 48, 8, generator=generator, dtype=torch.float64, requires_grad=True)
               for _ in range(3))  # fmt: skip
    per_distance = torch.zeros(2, 9, dtype=torch.float64)
    per_distance[:, 0], per_distance[:, -1] = 3.0, -1.0
    per_distance.requires_grad_()
    grad = torch.randn(1, 2, 48, 8, generator=generator, dtype=torch.float64)
    ours = torch.autograd.grad(hankel.hankel_attention(q, k, v, [48], per_distance, 4), per_distance, grad)[0]
    theirs = torch.autograd.grad(_dense(q, k, v, per_distance, 4, [48]), per_distance, grad)[0]
    torch.testing.assert_close(ours, theirs)
    assert ours[:, 0].abs().min() > 1e-3 and ours[:, -1].abs().min() > 1e-3


def test_a_vector_of_the_wrong_width_is_refused():
    q = torch.zeros(1, 2, 8, 4)
    with pytest.raises(ValueError, match=r"\(heads, 9\) vector over the distances -4..4, got shape \(2, 7\)"):
        hankel.hankel_attention(q, q, q, [8], torch.zeros(2, 7), 4)


def test_fits_on_cpu_in_32_or_64_bits_where_the_rows_hold_strips_enough():
    from kolong.attention.dispatch import CallFacts, Contribution
    from kolong.attention.masks import AttentionMask
    from kolong.attention.options import AttentionOptions

    def fits(q, reach):
        facts = CallFacts("sdpa", q, Contribution("distance", trained=True, reach=reach), AttentionMask(), 0.0,
                          AttentionOptions())  # fmt: skip
        return facts.fused_cpu_strips(4, 4)

    assert fits(torch.zeros(1, 1, 80, 4), 9)  # 4 x (4 + 16) = 80
    assert not fits(torch.zeros(1, 1, 79, 4), 9)
    assert fits(torch.zeros(1, 1, 80, 4, dtype=torch.float64), 9)
    assert not fits(torch.zeros(1, 1, 80, 4, dtype=torch.bfloat16), 9)
    assert not fits(torch.zeros(1, 1, 80, 4), 0)


def test_a_t5_model_trains_through_the_view_as_through_the_eager_reference(monkeypatch):
    """The whole model (shared bias, padding at the ends): loss and every parameter's gradient, `sdpa` planned
    through `sdpa-distance-grad` against `eager` with the same weights."""
    monkeypatch.setattr(hankel, "BLOCK_ROWS", 4)
    torch.manual_seed(0)
    kwargs = {"num_buckets": 8, "max_distance": 12}  # saturates at distance 9
    config = tiny_kolong_config(position_encoding="t5", position_kwargs=kwargs, max_position_embeddings=96)
    ours = KolongForMaskedLM(config).double()
    config_eager = tiny_kolong_config(position_encoding="t5", position_kwargs=kwargs, max_position_embeddings=96,
                                      attn_implementation="eager")  # fmt: skip
    reference = KolongForMaskedLM(config_eager).double()
    reference.load_state_dict(ours.state_dict())
    ids = random_ids(2, 96)
    mask = torch.ones_like(ids)
    mask[1, 70:] = 0
    assert {plan.kernel for plan in ours.kolong.attention_plans(ids, attention_mask=mask)} == {
        "sdpa-distance-grad"
    }
    losses = []
    for model in (ours, reference):
        loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[0], losses[1])
    for (name, mine), theirs in zip(ours.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, msg=name)
