"""Local + global attention as one batched SDPA call over query blocks and their key bands (CPU's fast path).

    queries of block i:  rows [i c, (i + 1) c)                       (c = max(window, banded_min_rows))
    its keys:            the band [i c - w, (i + 1) c + w)  +  every global key outside it
    allowed(row, key):   |row - key| <= w, or the key is global       (and the key is real, same document)
    global rows:         attend to every key (one more SDPA call over the whole input)

Longformer's "sliding chunks", the band cut out by `unfold` (a view), the mask shared by every block: n (c + 2w +
g) scores rather than n^2, in SDPA's fused kernel with autograd's backward, memory linear in n. A bias by
distance alone (T5, ALiBi) joins as SDPA's float mask. The plan table takes it for a window without dropout and
without a trained or query-dependent bias.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kolong.attention import options as attention_options
from kolong.attention.masks import AttentionMask
from kolong.attention.options import AttentionOptions
from kolong.attention.sdpa import sdpa
from kolong.attention.terms import ChunkBias


def _blocks(x: torch.Tensor, rows: int, padded: int) -> torch.Tensor:
    """(b, n, ...) -> (b, blocks, rows, ...): the rows of each query block, the end padded with zeros."""
    x = F.pad(x, [0, 0] * (x.dim() - 2) + [0, padded - x.shape[1]])
    return x.unflatten(1, (padded // rows, rows))


def _bands(x: torch.Tensor, rows: int, window: int, padded: int) -> torch.Tensor:
    """(b, n, ...) -> (b, blocks, rows + 2 window, ...): the keys each query block can reach (zeros outside)."""
    x = F.pad(x, [0, 0] * (x.dim() - 2) + [window, window + padded - x.shape[1]])
    return x.unfold(1, rows + 2 * window, rows).movedim(-1, 2)


def _band_mask(mask: AttentionMask, length: int, rows: int, padded: int, device) -> torch.Tensor:
    """(b|1, blocks, rows, span) bool: which band keys each query may attend to."""
    window = mask.window
    span = rows + 2 * window
    offset = torch.arange(span, device=device)[None, :] - torch.arange(rows, device=device)[:, None]
    near = (offset >= 0) & (offset <= 2 * window)  # |query - key| <= window, in band coordinates
    blocks = padded // rows
    key = torch.arange(blocks, device=device)[:, None] * rows - window + torch.arange(span, device=device)
    allowed = near[None, None] & ((key >= 0) & (key < length))[None, :, None, :]  # (1, blocks, rows, span)
    if mask.real is not None:
        allowed = allowed & _bands(mask.real, rows, window, padded)[:, :, None, :]
    if mask.documents is not None:
        documents = mask.documents
        allowed = allowed & (
            _blocks(documents, rows, padded)[..., None] == _bands(documents, rows, window, padded)[:, :, None]
        )
    return allowed


def _global_key_mask(mask: AttentionMask, positions: torch.Tensor, rows: int, padded: int, device):
    """(b, blocks, rows, g) bool: a global key outside the query's band, in the query's document."""
    query = torch.arange(padded, device=device).view(padded // rows, rows)
    outside = (positions[None, None, :] - query[..., None]).abs() > mask.window  # inside: the band has it
    allowed = outside[None] & mask.global_tokens[:, positions][:, None, None, :]
    if mask.documents is not None:
        allowed = allowed & (
            _blocks(mask.documents, rows, padded)[..., None] == mask.documents[:, positions][:, None, None, :]
        )
    return allowed


def _scores(
    bias: ChunkBias, allowed: torch.Tensor, distance: torch.Tensor, length: int, dtype
) -> torch.Tensor:
    """SDPA's float mask: the bias at each distance (h, *distance.shape) where allowed, -inf elsewhere."""
    scores = bias.distances(bias.tensors, distance, length).to(dtype)
    return torch.where(allowed.unsqueeze(-3), scores.movedim(0, -3), float("-inf"))


def _global_rows(
    q, k, v, mask: AttentionMask, positions: torch.Tensor, bias: ChunkBias | None
) -> torch.Tensor:
    """(b, h, g, d_h): the global queries attend to every real key of their document."""
    length = k.shape[2]
    allowed = torch.ones(1, 1, length, dtype=torch.bool, device=q.device)  # (b|1, g|1, n)
    if mask.real is not None:
        allowed = allowed & mask.real[:, None, :]
    if mask.documents is not None:
        allowed = allowed & (mask.documents[:, positions][:, :, None] == mask.documents[:, None, :])
    if bias is None:
        attn_mask = allowed[:, None]  # (b|1, 1, g|1, n)
    else:
        distance = torch.arange(length, device=q.device)[None, :] - positions[:, None]  # (g, n)
        attn_mask = _scores(bias, allowed, distance, length, q.dtype)  # (b|1, h, g, n)
    return sdpa(q[:, :, positions], k, v, attn_mask=attn_mask)


def _heads_first(x: torch.Tensor) -> torch.Tensor:
    """(b, blocks, m, h, d_h) -> (b * blocks, h, m, d_h): one SDPA batch row per query block."""
    return x.flatten(0, 1).transpose(1, 2)


@torch.compiler.disable  # reads the global positions on the host; inside a compiled model it runs eagerly
def banded_attention(q, k, v, mask: AttentionMask, bias: ChunkBias | None = None,
                     options: AttentionOptions | None = None) -> torch.Tensor:  # fmt: skip
    """softmax(q k^T / sqrt(d) + bias + mask) v under a local (+ global) mask: (b, h, n, d_h), exact; `bias`, if
    any, by distance alone. A query with no allowed key gets 0 (SDPA's softmax since torch 2.5)."""
    options = options or attention_options.DEFAULT
    batch, heads, length, head_dim = q.shape
    window = mask.window
    rows = max(window, options.banded_min_rows)
    padded = -(-length // rows) * rows
    blocks = padded // rows
    q_, k_, v_ = (x.transpose(1, 2) for x in (q, k, v))  # (b, n, h, d_h): the sequence axis next to the batch
    queries = _blocks(q_, rows, padded)  # (b, blocks, rows, h, d_h)
    keys, values = (
        _bands(k_, rows, window, padded),
        _bands(v_, rows, window, padded),
    )  # (b, blocks, span, h, d_h)
    positions = mask.global_positions().to(q.device)
    if positions.numel():  # every block also reads the global keys (masked where its band holds them)
        keys = torch.cat([keys, k_[:, positions][:, None].expand(-1, blocks, -1, -1, -1)], 2)
        values = torch.cat([values, v_[:, positions][:, None].expand(-1, blocks, -1, -1, -1)], 2)

    def band_allowed():  # (b, blocks, rows, span [+ g])
        allowed = _band_mask(mask, length, rows, padded, q.device).expand(batch, -1, -1, -1)
        if positions.numel():
            allowed = torch.cat([allowed, _global_key_mask(mask, positions, rows, padded, q.device)], -1)
        return allowed

    allowed = mask.keep("band", band_allowed)
    if bias is None:
        out = sdpa(
            _heads_first(queries), _heads_first(keys), _heads_first(values),
            attn_mask=allowed.flatten(0, 1)[:, None],  # (b * blocks, 1, rows, span [+ g]): shared by the heads
        ).unflatten(0, (batch, blocks))  # fmt: skip
    else:
        row, key = torch.arange(rows, device=q.device), torch.arange(rows + 2 * window, device=q.device)
        distance = (key[None, :] - window - row[:, None]).expand(blocks, -1, -1)  # key - query, every block
        if positions.numel():
            query = torch.arange(padded, device=q.device).view(blocks, rows)
            distance = torch.cat([distance, positions - query[..., None]], -1)  # (blocks, rows, span + g)
        # The float mask has a value per head: blocks go to SDPA in groups of about `mask_entries` of them.
        group = max(1, options.mask_entries // (batch * heads * rows * distance.shape[-1]))
        parts = []
        for start in range(0, blocks, group):
            part = slice(start, start + group)
            attn_mask = _scores(bias, allowed[:, part], distance[part], length, q.dtype)  # (b, g, h, rows, .)
            parts.append(sdpa(
                _heads_first(queries[:, part]), _heads_first(keys[:, part]), _heads_first(values[:, part]),
                attn_mask=attn_mask.flatten(0, 1),
            ).unflatten(0, (batch, -1)))  # fmt: skip
        out = torch.cat(parts, 1)
    # (b, blocks, h, rows, d_h) -> (b, h, n, d_h)
    out = out.transpose(1, 2).reshape(batch, heads, padded, head_dim)[:, :, :length]
    if positions.numel():
        is_global = mask.global_tokens[:, positions][:, None, :, None]  # (b, 1, g, 1): global in this row
        rows_out = torch.where(is_global, _global_rows(q, k, v, mask, positions, bias), out[:, :, positions])
        out = out.index_copy(2, positions, rows_out)
    return out
