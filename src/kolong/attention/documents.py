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
is as fast: the plan (`dispatch.CallFacts.document_blocks`) decides from the spans, before any work.

Over a batch a block's span is the union of its rows' spans; where the rows' documents fall differently (long
documents, many rows) the paths over spans go one row at a time, each block over its own row's span
(`dispatch.CallFacts.by_row`, `each_row`): the chunked and row-block paths (Shaw, T5, ALiBi) too.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kolong.attention.masks import AttentionMask, as_additive, take_keys
from kolong.attention.sdpa import sdpa

# Query rows per SDPA call: a block's span is about c plus the documents it cuts, so shorter blocks read fewer
# needless keys and taller ones make fewer calls (docs/experiments/document-blocks-*.md).
BLOCK_ROWS = 256


@torch.compiler.disable  # one call per row, as the paths it runs
def each_row(attention: Callable, q, k, v, mask: AttentionMask, split: bool) -> torch.Tensor:
    """attention(q, k, v, mask) -> (b, h, n, d_h), called once per row of the batch with that row's mask where
    `split` (the plan's `by_row`) says so, else once."""
    if not split:
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
