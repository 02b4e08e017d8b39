"""Attention dropout inside FlexAttention, which has none: exact, in two passes over the scores.

Attention dropout as BERT and SDPA apply it zeroes each probability with probability p and scales the
rest by 1 / (1 - p):

    z_i = sum_j m_ij p_ij v_j / (1 - p),   p_ij = exp(s_ij) / Z_i,   Z_i = sum_j exp(s_ij)

A score_mod that sends dropped scores to -inf makes FlexAttention normalise over the kept entries:

    z'_i = sum_j m_ij exp(s_ij) v_j / Z'_i,   Z'_i = sum_j m_ij exp(s_ij)

so z_i = z'_i * exp(lse'_i - lse_i) / (1 - p), where lse' = log Z' and lse = log Z come from a pass with
and a pass without the drops (FlexAttention returns both; its backward takes their gradients).

The mask m is a counter-based hash of (a random key per batch row and head, i, j) in int32 inside the
score_mod: the backward recomputes the same drops, nothing of shape (n, n) is stored, and every backend (and
`keep_mask`, the reference) gives the same bits.
"""

from __future__ import annotations

import torch
from torch.nn.attention.flex_attention import AuxRequest, flex_attention

KEEP_BITS = 24  # the keep decision compares 24 hash bits with round(p * 2^24)


def draw_keys(batch: int, heads: int, device) -> torch.Tensor:
    """(b, h) random int32 keys: one dropout stream per batch row and head, from torch's generator."""
    return torch.randint(-(2**31), 2**31, (batch, heads), device=device, dtype=torch.int32)


def _shift(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int32 (the mask clears the sign bits an arithmetic shift copies in)."""
    return (x >> bits) & ((1 << (32 - bits)) - 1)


def keep_bits(key: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
    """KEEP_BITS uniform bits for entry (i, j) of the stream `key`: one multiply per index and three
    xor-shift-multiply rounds in int32 (products wrap modulo 2^32 on every backend), about 14 operations a score."""
    i, j = q_idx.to(torch.int32), kv_idx.to(torch.int32)
    x = key ^ (i * 0x27D4EB2D) ^ (j * 0x165667B1)
    x = (x ^ _shift(x, 15)) * 0x2C1B3C6D
    x = (x ^ _shift(x, 12)) * 0x297A2D39
    x = x ^ _shift(x, 15)
    return _shift(x, 32 - KEEP_BITS)


def threshold(p: float) -> int:
    return round(p * (1 << KEEP_BITS))


def keep_mask(keys: torch.Tensor, p: float, queries: int, keys_length: int) -> torch.Tensor:
    """(b, h, n_q, n_k) bool: the entries `attend` keeps (the reference)."""
    rows = torch.arange(queries, device=keys.device)[:, None]
    columns = torch.arange(keys_length, device=keys.device)[None, :]
    return keep_bits(keys[:, :, None, None], rows, columns) >= threshold(p)


def attend(q, k, v, score_mod, block_mask, scale, keys: torch.Tensor, p: float, options: dict | None = None):
    """FlexAttention with `score_mod` and attention dropout p; `options`: both passes' `kernel_options`."""
    cut = threshold(p)

    def dropping(score, b, h, q_idx, kv_idx):
        if score_mod is not None:
            score = score_mod(score, b, h, q_idx, kv_idx)
        kept = keep_bits(keys[b, h], q_idx, kv_idx) >= cut
        return torch.where(kept, score, -float("inf"))

    lse = AuxRequest(lse=True)
    kept_context, kept = flex_attention(q, k, v, score_mod=dropping, block_mask=block_mask, scale=scale,
                                        return_aux=lse, kernel_options=options)  # fmt: skip
    every_context, every = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale,
                                          return_aux=lse, kernel_options=options)  # fmt: skip
    # a row dropped whole (lse' = -inf) gets ratio 0, the -inf put in after the difference: no NaN gradient
    log_ratio = torch.where(torch.isfinite(kept.lse), kept.lse - every.lse, -float("inf"))  # (b, h, n)
    ratio = log_ratio.exp() / (1.0 - p)
    # Inductor's lowering of the second pass's backward (torch 2.11-2.15, CUDA) fails without a gradient for its
    # output, of which only the lse is used: a zero-weighted use gives it one (its contexts are finite).
    return kept_context * ratio[..., None].to(kept_context.dtype) + 0.0 * every_context
