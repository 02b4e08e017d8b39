"""Packed documents attended row by row: where the rows of a batch hold differently placed documents, each block of
queries reads its own row's span instead of the union over the batch, and every path that reads spans (the SDPA
blocks, the chunked path, the inference row blocks) stays exact through the model."""

from __future__ import annotations

import pytest
import torch

from conftest import SMALL_BLOCKS, random_ids, tiny_kolong_config
from kolong.attention import chunked, documents
from kolong.attention.dispatch import Contribution, plan_attention
from kolong.attention.masks import AttentionMask
from kolong.attention.options import AttentionOptions
from kolong.models import KolongModel


def _staggered(rows: int, size: int, length: int, shift: int) -> torch.Tensor:
    """Documents of `size` tokens, each row's boundaries `shift` tokens after the row above's."""
    positions = torch.arange(length)
    return torch.stack([(positions + row * shift) // size + 1 for row in range(rows)])


def test_each_rows_mask_knows_its_own_documents_extents():
    # row 0: [0, 3) [3, 5) [5, 9) then padding; row 1: [0, 1) [1, 6) [6, 8) [8, 11)
    packed = torch.tensor([[1, 1, 1, 2, 2, 3, 3, 3, 3, 0, 0], [4, 2, 2, 2, 2, 2, 7, 7, 1, 1, 1]])
    mask = AttentionMask.from_attention_mask(packed)
    first, second = mask.batch_rows()
    assert mask.batch_rows()[0] is first  # kept for every layer
    assert first.document_keys(0, 1) == (0, 3) and second.document_keys(0, 1) == (0, 1)
    assert mask.document_keys(0, 1) == (0, 3)  # the batch's: the union
    assert first.document_keys(9, 11) == (9, 9)  # padding alone reads nothing
    assert second.document_keys(9, 11) == (8, 11)
    assert torch.equal(first.rows(0, 11, 11, "cpu"), mask.rows(0, 11, 11, "cpu")[:1])
    assert torch.equal(second.rows(0, 11, 11, "cpu"), mask.rows(0, 11, 11, "cpu")[1:])
    # blocks of 4: row 0 reads [0, 5) [3, 9) [5, 9) (query 8's document; 9 and 10 are padding), row 1 [0, 6)
    # [1, 8) [8, 11); the batch's blocks read [0, 6) [1, 9) [5, 11)
    row_0, row_1 = (4 * 5 + 4 * 6 + 3 * 4) / 121, (4 * 6 + 4 * 7 + 3 * 3) / 121
    assert documents.keys_read(mask, 4) == pytest.approx((4 * 6 + 4 * 8 + 3 * 6) / 121)
    assert documents.keys_read(first, 4) == pytest.approx(row_0)
    assert documents.keys_read(mask, 4, by_row=True) == pytest.approx((row_0 + row_1) / 2)
    assert documents.keys_read(mask, 4, by_row=True) < documents.keys_read(mask, 4)
    single = AttentionMask.from_attention_mask(packed[:1])
    assert single.batch_rows() == [single]


def by_row(q, mask) -> bool:
    from kolong.attention.dispatch import CallFacts

    return CallFacts("sdpa", q, Contribution("none"), mask, 0.0, EIGHT_ROWS).by_row


EIGHT_ROWS = AttentionOptions(document_block_rows=8)


def test_rows_are_attended_alone_where_their_own_spans_read_fewer_pairs(monkeypatch):
    q = torch.zeros(4, 2, 64, 4)
    staggered = AttentionMask.from_attention_mask(_staggered(4, 16, 64, 5))
    aligned = AttentionMask.from_attention_mask(_staggered(4, 16, 64, 0))
    share = AttentionOptions().documents_by_row
    assert documents.keys_read(staggered, 8, by_row=True) <= share * documents.keys_read(staggered, 8)
    assert by_row(q, staggered)
    plan = plan_attention("sdpa", q, Contribution("none"), staggered, 0.0, EIGHT_ROWS)
    assert plan.kernel == "sdpa-document-blocks" and "one row of the batch at a time" in plan.why
    assert plan.by_row and plan.label == "sdpa-document-blocks by row"
    plan = plan_attention("sdpa", q, Contribution("none"), aligned, 0.0, EIGHT_ROWS)
    assert plan.label == "sdpa-document-blocks" and "row" not in plan.why
    assert not by_row(q, aligned)  # every row's span is the batch's
    assert not by_row(q[:1], AttentionMask.from_attention_mask(_staggered(1, 16, 64, 5)))
    assert not by_row(q[..., :16, :], AttentionMask.from_attention_mask(_staggered(4, 16, 16, 5)))
    assert not by_row(q, AttentionMask.from_attention_mask(torch.ones(4, 64, dtype=torch.long)))


@pytest.mark.parametrize(
    ("scheme", "dropout", "grad", "path"),
    [
        ("learned", 0.0, True, "sdpa-document-blocks"),
        ("learned", 0.1, True, "chunked"),
        ("shaw", 0.0, True, "chunked"),
        ("t5", 0.0, True, "chunked"),
        ("alibi", 0.0, False, "chunked"),
    ],
)
def test_a_model_attending_row_by_row_is_the_reference(scheme, dropout, grad, path, monkeypatch):
    """Four rows of staggered documents and padding: the plan's path runs once per row (the SDPA blocks, the chunked
    path with and without attention dropout, the inference row blocks), and the outputs on real tokens and every
    parameter's gradient are the eager path's under the same dropout masks."""
    packed = _staggered(4, 12, 64, 5)
    packed[1, 58:] = 0
    ids = random_ids(4, 64)
    split = []
    each_row = documents.each_row
    monkeypatch.setattr(documents, "each_row", lambda *a: split.append(a[5]) or each_row(*a))
    torch.manual_seed(0)
    config = tiny_kolong_config(position_encoding=scheme, attention_probs_dropout_prob=dropout)
    model = KolongModel(config)
    model.set_attention_options(document_block_rows=8, chunk_scores=1, mask_entries=1)
    with torch.set_grad_enabled(grad):
        assert {plan.kernel for plan in model.attention_plans(ids, attention_mask=packed)} == {path}
    results = []
    for implementation in ("sdpa", "eager"):
        model.set_attn_implementation(implementation)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(1)
        with torch.set_grad_enabled(grad):
            hidden = model(ids, attention_mask=packed).last_hidden_state * (packed != 0)[..., None]
        if grad:
            hidden.square().mean().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((hidden.detach(), grads))
    assert split and all(split)
    if dropout > 0:  # the paths draw their own masks: the same distribution, not the same draws
        assert torch.isfinite(results[0][0]).all()
        return
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-4, atol=1e-5)
    for key, grad_ in results[1][1].items():
        torch.testing.assert_close(results[0][1][key], grad_, rtol=1e-4, atol=1e-5, msg=key)


@pytest.mark.parametrize("scheme", ["learned", "shaw"])
def test_a_compiled_model_attends_row_by_row_as_the_eager_one(scheme, monkeypatch):
    """The split's host reads and per-row masks run between graphs of a compiled model: the same loss and
    gradients as the model run eagerly."""
    from kolong.models import KolongForMaskedLM

    packed = _staggered(3, 12, 64, 5)
    ids = random_ids(3, 64)
    rows = []  # the batch size of every mask a block of queries reads its keys from
    key_index = AttentionMask.key_index
    monkeypatch.setattr(
        AttentionMask,
        "key_index",
        lambda self, *a: rows.append(self.documents.shape[0]) or key_index(self, *a),
    )
    torch.manual_seed(0)
    model = KolongForMaskedLM(tiny_kolong_config(position_encoding=scheme, attention_probs_dropout_prob=0.0))
    model.set_attention_options(document_block_rows=8)
    results = []
    for run in (model, torch.compile(model, backend="aot_eager")):
        model.zero_grad(set_to_none=True)
        loss = run(input_ids=ids, attention_mask=packed, labels=ids).loss
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
        assert rows and set(rows) == {1}, "every block reads one row's keys"
        rows.clear()
    torch.testing.assert_close(results[1][0], results[0][0])
    for compiled, eager in zip(results[1][1], results[0][1], strict=True):
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)


def test_probabilities_far_below_a_rows_peak_and_masked_keys(monkeypatch):
    """Logits 200 below a row's peak (probabilities that would be subnormal or 0) and masked keys: the chunked
    path's probabilities are the softmax's to float32's resolution, masked keys exactly 0, and the outputs and
    gradients the dense reference's."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 24, 4) for _ in range(3))
    k[:, :, 5] *= 60.0  # one key far above the others in every row
    packed = torch.tensor([[1] * 10 + [2] * 10 + [0] * 4])
    mask = AttentionMask.from_attention_mask(packed)
    probs = chunked._probabilities(q, k, mask, None, (), 0, 24, 0.5)[0]
    allowed = mask.rows(0, 24, 24, "cpu")
    expected = (q @ k.transpose(-1, -2) * 0.5).masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num()
    within = allowed.expand_as(probs)
    assert bool(
        (expected[within] < 1e-38).any()
    )  # the case at stake: probabilities below float32's normal range
    assert bool((probs[~within] == 0).all())
    torch.testing.assert_close(probs, expected, rtol=2e-6, atol=1e-7)
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    real = (packed != 0)[:, None, :, None]
    out = chunked.chunked_attention(q, k, v, mask, options=SMALL_BLOCKS) * real
    scores = (q @ k.transpose(-1, -2) / 2).masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num()
    reference = (scores @ v) * real
    torch.testing.assert_close(out, reference)
    d_out = torch.randn_like(out)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), d_out), torch.autograd.grad(reference, (q, k, v), d_out),
                         strict=True):  # fmt: skip
        torch.testing.assert_close(got, want)
