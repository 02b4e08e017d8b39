"""Packed documents on CPU read only the keys their documents span: the spans themselves, SDPA per block of
queries (schemes without a bias), and the chunked and row-block paths (schemes with one), each exact against the
dense reference in outputs and gradients."""

from __future__ import annotations

import pytest
import torch

from conftest import SMALL_BLOCKS, random_ids, tiny_kolong_config
from kolong.attention import chunked, documents
from kolong.attention.dispatch import Contribution, plan_attention
from kolong.attention.masks import AttentionMask
from kolong.attention.options import AttentionOptions
from kolong.models import KolongModel
from test_attention_paths import relative_bias


# two rows of packed documents: 3, 2, 4 tokens then padding; 1, 5, 2, 3 tokens (numbers need not be in order)
def dense_reference(q, k, v, mask, bias):
    """softmax(q k^T / sqrt(d) + bias + mask) v (+ value term), materialised; a query with no allowed key (padding)
    gets a finite output, never read."""
    length = k.shape[2]
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if bias is not None:
        scores = scores + bias.scores(bias.tensors, 0, length, length)
    probs = scores.masked_fill(~mask.rows(0, length, length, "cpu"), -1e30).softmax(-1)
    out = probs @ v
    return out if bias is None or not bias.has_values else out + bias.values(bias.tensors, 0, length, probs)


PACKED = torch.tensor([[1, 1, 1, 2, 2, 3, 3, 3, 3, 0, 0], [4, 2, 2, 2, 2, 2, 7, 7, 1, 1, 1]])


def test_the_keys_a_block_of_queries_can_reach_span_its_documents_in_every_row():
    mask = AttentionMask.from_attention_mask(PACKED)
    # query 0: row 0's document [0, 3), row 1's [0, 1); query 5: [5, 9) and [1, 6); query 9: padding, and [8, 11)
    assert mask.document_keys(0, 1) == (0, 3)
    assert mask.document_keys(5, 6) == (1, 9)
    assert mask.document_keys(9, 11) == (8, 11)  # row 0's padding reads nothing
    assert mask.document_keys(0, 11) == (0, 11)
    assert mask.key_index(0, 11, 11, "cpu") is None  # the whole row: no index
    assert mask.key_index(0, 1, 11, "cpu") == range(0, 3)  # one run of keys: sliced, not gathered
    # pairs read by blocks of 4: rows 0-3 keys [0, 6), 4-7 [1, 9), 8-10 [5, 11)
    assert documents.keys_read(mask, 4) == pytest.approx((4 * 6 + 4 * 8 + 3 * 6) / 121)
    # a document split in two (numbers reused) is spanned whole; a block of padding alone reads no key
    split = AttentionMask.from_attention_mask(torch.tensor([[1, 1, 2, 2, 1, 0, 0]]))
    assert split.document_keys(0, 1) == (0, 5)
    assert split.document_keys(5, 7) == (5, 5)
    # without `real`, number 0 is a document like any other (as `rows` reads it)
    assert AttentionMask(documents=torch.tensor([[1, 1, 0, 0]])).document_keys(2, 3) == (2, 4)
    assert AttentionMask.from_attention_mask(torch.ones(2, 5, dtype=torch.long)).document_keys(0, 1) is None


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_sdpa_per_block_of_queries_is_dense_attention(monkeypatch, dtype):
    """Outputs on every real query and the gradients of q, k and v, blocks of 4 queries (one block all padding)."""
    torch.manual_seed(0)
    packed = torch.cat(
        [PACKED, torch.zeros(2, 5, dtype=torch.long)], dim=1
    )  # 16 tokens, the last block padding
    mask = AttentionMask.from_attention_mask(packed)
    q, k, v = (torch.randn(2, 3, 16, 8, dtype=dtype, requires_grad=True) for _ in range(3))
    real = (packed != 0)[:, None, :, None]
    d_out = torch.randn(2, 3, 16, 8, dtype=dtype) * real
    out = documents.document_block_attention(q, k, v, mask, block_rows=4)
    expected = dense_reference(q, k, v, mask, None)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out * real, expected * real)
    for got, want in zip(
        torch.autograd.grad(out, (q, k, v), d_out),
        torch.autograd.grad(expected, (q, k, v), d_out),
        strict=True,
    ):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", ["none", "shaw-value", "t5", "alibi"])
def test_the_chunked_path_reads_only_the_documents_keys_and_stays_exact(name, monkeypatch):
    """Row blocks of 16 queries over documents of 5-12 tokens: each block reads its documents' span (fewer keys
    than the row), and outputs and every gradient (the bias tensors' too) equal dense attention."""
    torch.manual_seed(0)
    length = 140
    lengths = [5, 12, 7, 9, 11, 6, 8, 12] * 2
    packed = torch.stack([
        torch.cat([torch.full((size,), number + 1) for number, size in enumerate(order)])
        for order in (lengths, lengths[::-1])
    ])  # fmt: skip
    packed[1, 132:] = 0  # padding at the end of the second row
    mask = AttentionMask.from_attention_mask(packed)
    q, k, v = (torch.randn(2, 2, length, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias = relative_bias(name, 2, 2, length, 4)
    inputs = (q, k, v, *(bias.tensors if bias is not None else ()))
    real = (packed != 0)[:, None, :, None]
    expected = dense_reference(q, k, v, mask, bias)
    expected_grads = torch.autograd.grad((expected * real).square().sum(), inputs)
    read = []
    key_index = AttentionMask.key_index
    monkeypatch.setattr(
        AttentionMask, "key_index", lambda self, *a: read.append(key_index(self, *a)) or read[-1]
    )
    out = chunked.chunked_attention(q, k, v, mask, bias, options=SMALL_BLOCKS)
    torch.testing.assert_close(out * real, expected * real)
    for got, want in zip(
        torch.autograd.grad((out * real).square().sum(), inputs), expected_grads, strict=True
    ):
        torch.testing.assert_close(got, want)
    assert read and all(isinstance(keys, range) and len(keys) < length for keys in read)


def _documents_of(mean: int, length: int = 64, rows: int = 2) -> torch.Tensor:
    numbers = torch.arange(length) // mean + 1
    return numbers.repeat(rows, 1)


def test_the_plan_takes_the_blocks_where_they_skip_enough_pairs(monkeypatch):
    """Blocks of 8 queries: documents of 4 tokens (a block reads 8 of 64 keys) take the blocks; documents of 56
    and 8 tokens (78% of the pairs) the one dense call. With attention dropout, the chunked path over the spans,
    or the explicit one."""
    q = torch.zeros(2, 2, 64, 4, requires_grad=True)
    none, options = Contribution("none"), AttentionOptions(document_block_rows=8)
    short, long = (AttentionMask.from_attention_mask(_documents_of(size)) for size in (4, 56))
    assert documents.keys_read(short, 8) <= options.documents_max_share < documents.keys_read(long, 8)
    assert plan_attention("sdpa", q, none, short, 0.0, options).kernel == "sdpa-document-blocks"
    assert plan_attention("sdpa", q, none, long, 0.0, options).kernel == "sdpa"
    # with attention dropout (no fused CPU kernel): the chunked path over the same spans, else the explicit one
    assert plan_attention("sdpa", q, none, short, 0.1, options).kernel == "chunked"
    assert plan_attention("sdpa", q, none, long, 0.1, options).kernel == "eager"
    shaw = Contribution("query", trained=True, reach=4)
    assert plan_attention("sdpa", q, shaw, short, 0.0, options).kernel == "chunked"


def test_a_packed_model_trains_through_the_blocks_like_the_reference():
    """Learned positions and RoPE, packed documents of 3-9 tokens and padding: the model's plan is the blocks, and
    its outputs on real tokens and every parameter's gradient are the eager path's."""
    packed = torch.tensor([[1] * 3 + [2] * 9 + [3] * 5 + [4] * 7 + [5] * 8 + [0] * 4,
                           [1] * 6 + [2] * 4 + [3] * 9 + [4] * 9 + [5] * 8 + [6] * 0 + [0] * 0])  # fmt: skip
    ids = random_ids(2, packed.shape[1])
    for scheme in ("learned", "rope"):
        torch.manual_seed(0)
        model = KolongModel(tiny_kolong_config(position_encoding=scheme, attention_probs_dropout_prob=0.0))
        model.set_attention_options(document_block_rows=8)
        assert {plan.kernel for plan in model.attention_plans(ids, attention_mask=packed)} == {
            "sdpa-document-blocks"
        }
        results = []
        for implementation in ("sdpa", "eager"):
            model.set_attn_implementation(implementation)
            model.zero_grad(set_to_none=True)
            hidden = model(ids, attention_mask=packed).last_hidden_state * (packed != 0)[..., None]
            hidden.square().mean().backward()
            results.append(
                (
                    hidden.detach(),
                    {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
                )
            )
        torch.testing.assert_close(results[0][0], results[1][0])
        for key, grad in results[1][1].items():
            torch.testing.assert_close(results[0][1][key], grad, rtol=1e-4, atol=1e-5, msg=key)


def test_shaw_reads_and_reduces_a_run_of_keys_as_the_same_columns_of_the_whole_row():
    """Over a run of keys anywhere (left of a block, across it, right of it, one key), Shaw's expanded bias is the
    whole row's columns, and each reduction equals the whole row's with zeros off the run."""
    from kolong.positions.shaw import ShawChunkBias

    torch.manual_seed(0)
    length, k = 30, 3
    bias = ShawChunkBias(torch.randn(2, 2, length, 2 * k + 1), torch.randn(2 * k + 1, 4), k)
    for start, stop in ((0, 6), (10, 16), (24, 30)):
        for run in (range(0, 4), range(0, 30), range(8, 20), range(12, 13), range(20, 30), range(2, 9)):
            whole = bias.scores(bias.tensors, start, stop, length)  # (2, 2, c, n)
            torch.testing.assert_close(
                bias.scores(bias.tensors, start, stop, length, run), whole[..., run.start : run.stop]
            )
            block = torch.randn(2, 2, stop - start, len(run))
            widened = torch.nn.functional.pad(block, (run.start, length - run.stop))
            grads, expected = (
                [torch.zeros(2, 2, length, 2 * k + 1), None],
                [torch.zeros(2, 2, length, 2 * k + 1), None],
            )
            bias.score_grads(bias.tensors, start, stop, block, grads, run)
            bias.score_grads(bias.tensors, start, stop, widened, expected)
            torch.testing.assert_close(grads[0], expected[0])
            torch.testing.assert_close(
                bias.values(bias.tensors, start, stop, block, run),
                bias.values(bias.tensors, start, stop, widened),
            )
            d_out = torch.randn(2, 2, stop - start, 4)
            tables = [None, torch.zeros(2 * k + 1, 4)], [None, torch.zeros(2 * k + 1, 4)]
            d_run = bias.value_grads(bias.tensors, start, stop, block, d_out, tables[0], run)
            d_whole = bias.value_grads(bias.tensors, start, stop, widened, d_out, tables[1])
            torch.testing.assert_close(d_run, d_whole[..., run.start : run.stop])
            torch.testing.assert_close(tables[0][1], tables[1][1])


def test_dropout_over_a_run_of_keys_has_exact_gradients(monkeypatch):
    """gradcheck in float64 through the chunked backward over packed documents' runs with attention dropout and
    Shaw's value term (the masks are drawn per block over the run, and redrawn the same in the backward)."""
    from kolong.positions.shaw import ShawChunkBias

    torch.manual_seed(0)
    length = 40
    packed = (torch.arange(length) // 6 + 1)[None]
    packed[0, 36:] = 0
    mask = AttentionMask.from_attention_mask(packed)
    q, k, v = (torch.randn(1, 2, length, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    profile = torch.randn(1, 2, length, 7, dtype=torch.float64, requires_grad=True)
    table = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    assert isinstance(mask.key_index(0, 16, length, "cpu"), range)

    def attend(q, k, v, profile, table):
        torch.manual_seed(1)  # the same dropout masks at every call of gradcheck
        bias = ShawChunkBias(profile, table, 3)
        return chunked.chunked_attention(q, k, v, mask, bias, dropout_p=0.3, options=SMALL_BLOCKS)

    assert torch.autograd.gradcheck(attend, (q, k, v, profile, table), fast_mode=True)
    torch.manual_seed(1)
    plain = chunked.chunked_attention(
        q, k, v, mask, None, dropout_p=0.3, options=SMALL_BLOCKS
    )  # no bias: learned positions' case
    assert torch.isfinite(plain).all() and plain.shape == q.shape
