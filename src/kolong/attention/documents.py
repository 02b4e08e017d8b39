"""Packed documents on CPU: each block of query rows attends over the keys its documents span, through SDPA.

Packing puts several documents in one row and lets a query see its own document alone:

    allowed(i, j) = document[i] == document[j]   (and j is a token)

so the queries of rows start..stop-1 can only reach the keys from the first token of their earliest document
to the last of their latest (`AttentionMask.document_keys`, the widest over the batch). One SDPA call per block
over that span, with the block's slice of the mask, is exact and reads

    sum over blocks of c x span   pairs instead of n^2

which for short documents (reviews of 17 tokens packed into 2,048-token rows: 4% of the pairs are inside a
document) is a few times less work than SDPA's one call under the dense (b, 1, n, n) mask. SDPA's fused CPU
kernel does not skip masked pairs; FlexAttention's block mask, which does, has no backward on CPU. Autograd runs
each block's fused backward. Where the documents are long the spans cover most of each row and the one dense call
is as fast: `worth_it` decides from the spans, before any work.

Over a batch a block's span is the union of its rows' spans; where the rows' documents fall differently (long
documents, many rows) the paths over spans go one row at a time, each block over its own row's span (`by_row`,
`each_row`): the chunked and row-block paths (Shaw, T5, ALiBi) too.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kolong.attention.masks import AttentionMask, as_additive, take_keys
from kolong.attention.sdpa import sdpa

# Query rows per SDPA call: a block's span is about c plus the documents it cuts, so shorter blocks read fewer
# needless keys and taller ones make fewer calls. On 2 CPU cores (forward and backward, 4 and 12 heads of 64,
# documents of 17-700 tokens packed into 512 and 2,048) blocks of 256 were as fast as blocks of 128 or faster,
# blocks of 64 slower.
BLOCK_ROWS = 256
# Take the blocks when they read at most this share of the (n, n) pairs. Measured with 12 heads of 64 on 2 CPU
# cores (docs/experiments/document-blocks-cpu-xeon-2core.md): 0.15 of the pairs ran 3.4x faster than the dense
# call, 0.37 1.8x, 0.62 1.2x; 0.9 and more (documents of 100 tokens and longer in rows of 512) 0.89-0.93x. With
# attention dropout the chunked path over the same spans against the explicit path: 1.3-10x faster up to 0.62,
# 0.78-0.99x from 0.9.
MAX_SHARE = 0.75


# Attend row by row where the rows' own spans read at most this share of the pairs the batch's widest spans
# read. On 2 CPU cores (12 heads of 64, batches of 2 and 8 rows of 2,048, documents of 17-700 tokens;
# docs/experiments/document-rows-cpu-xeon-2core.md) shares of 0.53-0.81 of the batch's ran 1.1-1.5x faster row
# by row through SDPA's blocks and 1.2-3.4x through Shaw's chunked path; at 0.88 (short documents in 8 rows)
# 0.86x and 0.68x. Rows of fewer than 4 blocks stay whole: their spans are most of the row either way.
BY_ROW = 0.85


def _packed(q: torch.Tensor, mask: AttentionMask) -> bool:
    return q.device.type == "cpu" and mask.documents is not None and mask.window is None


def by_row(q: torch.Tensor, mask: AttentionMask) -> bool:
    """Whether the paths over documents' spans attend one row of the batch at a time, each block over its own
    row's span: where the rows' documents fall differently, the batch's widest span is the union of theirs."""
    if not _packed(q, mask) or q.shape[0] == 1 or q.shape[2] < 4 * BLOCK_ROWS:
        return False
    return mask.document_keys_read(BLOCK_ROWS, by_row=True) <= BY_ROW * mask.document_keys_read(BLOCK_ROWS)


def worth_it(q: torch.Tensor, mask: AttentionMask) -> bool:
    """Whether this path takes `q` under `mask` (with attention dropout, the chunked path over the same spans):
    on CPU, packed documents without a local window, and blocks that read at most MAX_SHARE of the pairs, row by
    row where `by_row` says so (one host read of the documents' extents, kept by the mask)."""
    return (
        _packed(q, mask)
        and q.shape[2] > BLOCK_ROWS
        and mask.document_keys_read(BLOCK_ROWS, by_row=by_row(q, mask)) <= MAX_SHARE
    )


@torch.compiler.disable  # one call per row, as the paths it runs
def each_row(attention: Callable, q, k, v, mask: AttentionMask, split: bool | None = None) -> torch.Tensor:
    """attention(q, k, v, mask) -> (b, h, n, d_h), called once per row of the batch with that row's mask where
    `split` (default: `by_row`) says so, else once."""
    if not (by_row(q, mask) if split is None else split):
        return attention(q, k, v, mask)
    return torch.cat(
        [attention(q[row : row + 1], k[row : row + 1], v[row : row + 1], alone)
         for row, alone in enumerate(mask.batch_rows())]
    )  # fmt: skip


@torch.compiler.disable  # a loop over blocks whose key spans are read on the host, as the chunked path
def document_block_attention(q, k, v, mask: AttentionMask) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + mask) v: (b, h, n, d_h), exact on every query with an allowed key (a padding
    query gets a finite output, as under the dense path's additive mask, never read)."""
    length = q.shape[2]
    low_value = torch.finfo(q.dtype).min  # the dense path's additive mask: a row of padding stays finite
    blocks = []
    for start in range(0, length, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, length)
        keys = mask.key_index(start, stop, length, q.device) or range(length)  # a run of keys, never empty
        allowed = mask.rows(start, stop, length, q.device, keys)  # (b|1, 1, c, span)
        additive = None if allowed is None else as_additive(allowed, q.dtype, low_value)
        blocks.append(
            sdpa(
                q[:, :, start:stop], take_keys(k, keys, dim=2), take_keys(v, keys, dim=2), attn_mask=additive
            )
        )
    return torch.cat(blocks, dim=2)
