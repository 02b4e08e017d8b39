"""BigBird's block-sparse attention (ITC: two global blocks, a window of three blocks, r random blocks) in
memory linear in the length.

Zaheer et al. (2020), section 2: with the input cut into blocks of B tokens (nb blocks),

    query block 0 and nb - 1   attend to every key                                   (global rows)
    query block 1              attends to key blocks 0, 1, 2, nb - 1 and its r random blocks
    query block nb - 2         attends to key blocks 0, nb - 3, nb - 2, nb - 1 and its r random blocks
    query block i, otherwise   attends to key blocks 0, i - 1, i, i + 1, nb - 1 and its r random blocks

Each non-global query block's keys are gathered into (5 + r) B rows (block 1 and nb - 2 have one block fewer,
filled with an excluded placeholder) and attended by one batched SDPA call: b h nb (5 + r) B^2 scores, linear
in n. Padded keys get HF's additive penalty of -10,000 (not -inf, so that the outputs equal HF's), padded
queries a zero output. HF's BigBird (transformers 5.4 and later) computes the same outputs but also assembles
every layer's dense (b, h, n, n) probabilities, asked for or not; `kolong.extension.block_sparse` runs a
loaded BigBird model through this function instead whenever no attentions are asked for.
"""

from __future__ import annotations

import math

import torch

from kolong.attention.sdpa import sdpa

PENALTY = -10000.0  # HF BigBird's additive mask value (outputs equal to HF's, padded keys included)


def key_blocks(blocks: int, random_blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The key blocks of query blocks 1 .. nb - 2: indices (b|1, h, nb - 2, 5 + r) and whether each is real
    (False for the placeholder of blocks 1 and nb - 2, which have one block fewer). `random_blocks`:
    (b|1, h, nb - 2, r), row j the random key blocks of query block j + 1."""
    device = random_blocks.device
    rows = torch.arange(1, blocks - 1, device=device)  # the query blocks
    window = rows[:, None] + torch.arange(-1, 2, device=device)  # (nb - 2, 3): i - 1, i, i + 1
    real = torch.ones(blocks - 2, 5, dtype=torch.bool, device=device)
    # block 1's window is 0, 1, 2 and block nb - 2's nb - 3, nb - 2, nb - 1: the first (last) one is the global
    # block itself, kept once as global and once as a placeholder excluded from the softmax
    real[0, 1] = False
    real[-1, 3] = False
    first, last = torch.zeros_like(rows)[:, None], torch.full_like(rows, blocks - 1)[:, None]
    fixed = torch.cat([first, window, last], dim=1)  # (nb - 2, 5)
    shape = (*random_blocks.shape[:2], blocks - 2)
    indices = torch.cat([fixed.expand(*shape, 5), random_blocks], dim=-1)
    mask = torch.cat([real.expand(*shape, 5), torch.ones_like(random_blocks, dtype=torch.bool)], dim=-1)
    return indices, mask


def block_sparse_attention(q, k, v, key_mask: torch.Tensor, random_blocks: torch.Tensor, block: int):
    """softmax(q k^T / sqrt(d) + penalty) v over BigBird's pattern: q, k, v (b, h, n, d), n a multiple of
    `block`; `key_mask` (b, n), 1 for a real token; `random_blocks` (b|1, h, nb - 2, r) long. Returns (b, h, n, d),
    zero at padded query positions."""
    b, h, n, d = q.shape
    blocks = n // block
    if blocks * block != n or blocks < 4:
        raise ValueError(f"block-sparse attention needs a length of at least 4 blocks of {block}, got {n}")
    scale = 1.0 / math.sqrt(d)
    key_mask = key_mask.to(q.dtype)
    penalty = ((1.0 - key_mask) * PENALTY)[:, None, None, :]  # (b, 1, 1, n)

    # global rows: blocks 0 and nb - 1 against every key
    ends = torch.cat([q[:, :, :block], q[:, :, -block:]], dim=2)
    global_out = sdpa(ends, k, v, attn_mask=penalty, scale=scale)

    # every other query block against its 5 + r gathered key blocks
    indices, real = key_blocks(blocks, random_blocks)  # (b|1, h, nb - 2, 5 + r)
    indices = indices.expand(b, h, -1, -1)
    blocked_k = k.view(b, h, blocks, block, d)
    blocked_v = v.view(b, h, blocks, block, d)
    batch = torch.arange(b, device=q.device)[:, None, None, None]
    head = torch.arange(h, device=q.device)[None, :, None, None]
    keys = blocked_k[batch, head, indices].flatten(3, 4)  # (b, h, nb - 2, (5 + r) block, d)
    values = blocked_v[batch, head, indices].flatten(3, 4)
    padded = (1.0 - key_mask).view(b, 1, blocks, block)[batch, torch.zeros_like(head), indices]
    bias = padded.flatten(3, 4) * PENALTY  # (b, h, nb - 2, (5 + r) block)
    excluded = torch.full((), -math.inf, dtype=bias.dtype, device=q.device)
    bias = torch.where(real.repeat_interleave(block, dim=-1), bias, excluded)[
        :, :, :, None, :
    ]  # (b, h, nb - 2, 1, keys)
    queries = q.view(b, h, blocks, block, d)[:, :, 1:-1]
    inner = sdpa(queries, keys, values, attn_mask=bias.to(q.dtype), scale=scale)

    out = torch.cat([global_out[:, :, :block], inner.flatten(2, 3), global_out[:, :, block:]], dim=2)
    return out * key_mask[:, None, :, None]
