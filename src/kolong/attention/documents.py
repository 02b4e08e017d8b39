"""SDPA per block of query rows over the keys their packed documents span (CPU).

A query sees its own document alone, so rows start..stop-1 reach only the keys from the first token of their
earliest document to the last of their latest (`AttentionMask.key_index`): one SDPA call per block over that span
reads sum_blocks c x span pairs instead of the n^2 SDPA's fused CPU kernel computes under the dense mask (it skips
no masked pair; FlexAttention's block mask, which does, has no CPU backward). The plan table takes it where the
spans read at most `documents_max_share` of the pairs (`keys_read`, one of the planner's facts); `each_row` goes one
row of the batch at a time.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kolong.attention import options as attention_options
from kolong.attention.masks import AttentionMask, as_additive, take_keys
from kolong.attention.sdpa import sdpa


@torch.compiler.disable  # one call per row, as the paths it runs
def each_row(attention: Callable, q, k, v, mask: AttentionMask, split: bool) -> torch.Tensor:
    """attention(q, k, v, mask), once per row of the batch with its own mask where `split` (`Plan.by_row`)."""
    if not split:
        return attention(q, k, v, mask)
    return torch.cat(
        [attention(q[row : row + 1], k[row : row + 1], v[row : row + 1], alone)
         for row, alone in enumerate(mask.batch_rows())]
    )  # fmt: skip


@torch.compiler.disable  # a loop over blocks whose key spans are read on the host, as the chunked path
def document_block_attention(q, k, v, mask: AttentionMask, block_rows: int | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + mask) v: (b, h, n, d_h), exact (a padding query's output is finite, never read).
    `block_rows`: the option `document_block_rows`, the default's when None."""
    block_rows = block_rows or attention_options.DEFAULT.document_block_rows
    length = q.shape[2]
    low_value = torch.finfo(q.dtype).min  # the dense path's additive mask: a row of padding stays finite
    blocks = []
    for start in range(0, length, block_rows):
        stop = min(start + block_rows, length)
        keys = mask.key_index(start, stop, length, q.device) or range(length)  # a run of keys, never empty
        allowed = mask.rows(start, stop, length, q.device, keys)  # (b|1, 1, c, span)
        additive = None if allowed is None else as_additive(allowed, q.dtype, low_value)
        k_block, v_block = take_keys(k, keys, dim=2), take_keys(v, keys, dim=2)
        blocks.append(sdpa(q[:, :, start:stop], k_block, v_block, attn_mask=additive))
    return torch.cat(blocks, dim=2)


def keys_read(mask: AttentionMask, rows: int, by_row: bool = False) -> float:
    """The share of the (n, n) pairs that blocks of `rows` queries read over their documents' keys
    (`AttentionMask.document_keys`; 1 without packed documents); `by_row`: each block over its own row's keys, the
    mean over the rows. Computed once per mask (one forward) and kept for every layer's plan."""
    if mask.documents is None:
        return 1.0
    return mask.keep(("keys read", rows, by_row), lambda: _share_read(mask, rows, by_row))


def _share_read(mask: AttentionMask, rows: int, by_row: bool) -> float:
    if by_row:
        masks = mask.batch_rows()
        return sum(keys_read(alone, rows) for alone in masks) / len(masks)
    length = mask.documents.shape[1]
    read = 0
    for start in range(0, length, rows):
        low, high = mask.document_keys(start, min(start + rows, length))
        read += (min(start + rows, length) - start) * (high - low)
    return read / length**2
