"""FlexAttention block masks from the mask's structure, one decision per block pair.

`create_block_mask` evaluates the mask_mod at all n^2 entries to learn which (128 x 128) blocks are empty,
partial or full. kolong's masks come from per-token facts, so each block pair is classified from per-block
summaries instead: (n / 128)^2 decisions, conservative (empty only if no entry can be allowed, full only if
every entry surely is; partial blocks apply the mask_mod), so attention is exactly the mask's.

    allowed(b, i, j) = real[b, j] and document[b, i] == document[b, j] and (|i - j| <= w or global[b, i] or global[b, j])

- any entry of blocks (I, J) can be allowed if some key of J is real, the document ranges of I's and J's
  real tokens overlap (numbers rise along a packed row, so ranges that overlap share a document), and the
  blocks come within w of each other or either holds a global token;
- every entry is allowed if every key of J is real, I and J hold one and the same document and no padding,
  and the blocks lie within w of each other entirely or either is global throughout; never the last block of a
  length that is not a multiple of 128.
"""

from __future__ import annotations

import torch
from torch.nn.attention.flex_attention import BlockMask

BLOCK = 128  # FlexAttention's default sparse block size


def _per_block(values: torch.Tensor, blocks: int, fill) -> torch.Tensor:
    """(b, n) -> (b, blocks, BLOCK), the tail padded with `fill`."""
    padding = blocks * BLOCK - values.shape[1]
    return torch.nn.functional.pad(values, (0, padding), value=fill).view(values.shape[0], blocks, BLOCK)


def structured_block_mask(mask, batch: int, length: int, device, heads: int = 1) -> BlockMask:
    """The BlockMask of `mask` (an AttentionMask) over (batch, length, length), its block tables repeated for
    `heads` heads (see `_ordered`: what a compiled model needs)."""
    for name in ("real", "documents", "global_tokens"):
        values = getattr(mask, name)
        if values is not None and tuple(values.shape) != (batch, length):
            raise ValueError(f"the attention mask's {name} is {tuple(values.shape)}, not (batch, length) = "
                             f"{(batch, length)}: give one row per example")  # fmt: skip
    blocks = -(-length // BLOCK)
    any_allowed = torch.ones(batch, blocks, blocks, dtype=torch.bool, device=device)
    all_allowed = torch.ones_like(any_allowed)
    if mask.real is not None:
        real = _per_block(mask.real, blocks, False)
        any_allowed &= real.any(-1)[:, None, :]
        all_allowed &= real.all(-1)[:, None, :]
    if mask.documents is not None:
        documents = _per_block(mask.documents, blocks, 0)
        real_tokens = documents > 0
        big = torch.iinfo(documents.dtype).max
        first = documents.masked_fill(~real_tokens, big).amin(
            -1
        )  # (b, blocks): lowest document of real tokens
        last = documents.masked_fill(~real_tokens, 0).amax(-1)
        any_allowed &= (first[:, :, None] <= last[:, None, :]) & (first[:, None, :] <= last[:, :, None])
        one_document = real_tokens.all(-1) & (first == last)
        all_allowed &= (
            one_document[:, :, None] & one_document[:, None, :] & (first[:, :, None] == first[:, None, :])
        )
    if mask.window is not None:
        start = torch.arange(blocks, device=device) * BLOCK
        end = start + BLOCK - 1
        nearest = (start[None, :] - end[:, None]).clamp(min=0) + (start[:, None] - end[None, :]).clamp(min=0)
        farthest = torch.maximum((end[None, :] - start[:, None]).abs(), (end[:, None] - start[None, :]).abs())
        near_any, near_all = nearest <= mask.window, farthest <= mask.window  # (blocks, blocks)
        if mask.global_tokens is not None:
            special = _per_block(mask.global_tokens, blocks, False)
            some, every = special.any(-1), special.all(-1)  # (b, blocks)
            near_any = near_any | some[:, :, None] | some[:, None, :]
            near_all = near_all | every[:, :, None] | every[:, None, :]
        any_allowed &= near_any
        all_allowed &= near_all
    if length % BLOCK:
        all_allowed[:, -1, :] = False
        all_allowed[:, :, -1] = False
    full = any_allowed & all_allowed
    partial = any_allowed & ~all_allowed
    # The backward walks the same blocks by key block: the tables of the transposed matrices, which
    # `BlockMask.from_kv_blocks` would rebuild from the forward's tables.
    kv_num_blocks, kv_indices = _ordered(partial, heads)
    full_kv_num_blocks, full_kv_indices = _ordered(full, heads)
    q_num_blocks, q_indices = _ordered(partial.transpose(1, 2), heads)
    full_q_num_blocks, full_q_indices = _ordered(full.transpose(1, 2), heads)
    return BlockMask(
        seq_lengths=(length, length),
        kv_num_blocks=kv_num_blocks,
        kv_indices=kv_indices,
        full_kv_num_blocks=full_kv_num_blocks,
        full_kv_indices=full_kv_indices,
        q_num_blocks=q_num_blocks,
        q_indices=q_indices,
        full_q_num_blocks=full_q_num_blocks,
        full_q_indices=full_q_indices,
        BLOCK_SIZE=(BLOCK, BLOCK),
        mask_mod=mask.mask_mod(),
    )


def _ordered(dense: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(b, q blocks, kv blocks) bool -> per query block the number of kv blocks and their indices first, as
    (b, heads, q blocks) and (b, heads, q blocks, kv blocks) int32 (FlexAttention's layout).

    Written out per head: built in a compiled graph, a head dimension of size 1 gets the stride 0 from Inductor
    (torch 2.11, CUDA), and FlexAttention's forward then read the first row's tables for every row
    (`benchmarks/tools/inductor_kernels.py` reads the stride off a compiled kernel)."""
    counts = dense.sum(-1, dtype=torch.int32)
    indices = torch.argsort((~dense).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    # for one head, contiguous() leaves the views as they are
    counts = counts[:, None].expand(-1, heads, -1).contiguous()  # (b, heads, q blocks)
    indices = indices[:, None].expand(-1, heads, -1, -1).contiguous()  # (b, heads, q blocks, kv blocks)
    return counts, indices
