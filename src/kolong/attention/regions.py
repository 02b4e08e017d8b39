"""Exact attention with a relative bias that is constant past a reach r on each side, as three regions merged
by their log-sum-exp: no trained tensor's gradient lands in a few hot addresses.

Shaw's key term q_i . w_clip(j - i, k) and T5's buckets past the distance where the bucket function saturates
are one constant per row (Shaw) or per head (T5) on each side. Split every query row into

    left   L_i = { j : j - i <= -r }     bias c^L_i, one constant for the row
    band   B_i = { j : |j - i| <  r }    bias band[i, j - i + r - 1], read one-to-one
    right  R_i = { j : j - i >=  r }     bias c^R_i

and attend to each region alone: out_X, lse_X (the log-sum-exp of its scores; -inf where the region holds no
allowed key). A constant bias does not change a softmax, so the edges run without a score_mod and their
constant enters their log-sum-exp only: lse_L' = lse_L + c^L_i. The three merge exactly:

    lse_i = log(exp lse_L' + exp lse_B + exp lse_R'),   out_i = sum_X exp(lse_X' - lse_i) out_X

A single score_mod reading the whole clipped profile would add every edge score's gradient into the two edge
entries of its row (up to n adds into one address); here the band reads each (i, r) once and the edges'
constants get their gradient through the merge, in ordinary tensor code. Shaw's value term follows from the same
split: the edges' probability mass times w^V_-k and w^V_+k, plus the band's probabilities (from its scores
computed one distance at a time, never an (n, n) or (n, 2k - 1, d) tensor) times w^V.

Two kernels run it: FlexAttention on CUDA (`flex.flex_region_attention`, a block mask per region from the mask's
structure) and SDPA's fused kernel on CPU (`sdpa_regions.py`); tests hold both to a materialised reference of the
same split and merge (tests/reference_regions.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

REGIONS = ("left", "band", "right")


@dataclass
class RegionTerms:
    """A scheme's bias in the three regions: `reach` r; `left` and `right`, the edges' constants (b|1, h, n|1);
    `band` (b, h, n, 2r - 1), entry (i, r') the bias at j - i = r' - r + 1; for a value term, the value rows
    at the two edges (d_h,) and in the band (2r - 1, d_h)."""

    reach: int
    left: torch.Tensor
    band: torch.Tensor
    right: torch.Tensor
    value_left: torch.Tensor | None = None
    value_band: torch.Tensor | None = None
    value_right: torch.Tensor | None = None


def merge(
    parts: list[tuple[torch.Tensor, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """(out, lse) of attention over the union of the parts' key sets, from each part's (out, lse), and each part's
    share of the probability mass. A row no part reaches (every lse -inf) gets 0 and lse -inf, finite in the
    backward too (no softmax over -infs)."""
    shares, lse = softmax_with_lse(torch.stack([lse for _, lse in parts], dim=-1))  # over (b, h, n, parts)
    shares = list(shares.unbind(-1))
    out = sum(share[..., None].to(out.dtype) * out for share, (out, _) in zip(shares, parts, strict=True))
    return out, lse, shares


def band_probabilities(q, k, terms: RegionTerms, lse: torch.Tensor, allowed_band=None) -> torch.Tensor:
    """p_{i, i + r} for |r| < reach: (b, h, n, 2 reach - 1), one distance at a time (q_i . k_{i + r} as a row-wise
    product of q with k shifted by r), 0 where i + r falls outside the row or the mask forbids the pair."""
    length, scale = q.shape[2], 1.0 / math.sqrt(q.shape[-1])
    finite = torch.isfinite(lse)
    safe = torch.where(finite, lse, torch.zeros_like(lse)).to(torch.promote_types(q.dtype, torch.float32))
    columns = []
    for offset in range(1 - terms.reach, terms.reach):
        shifted = torch.roll(k, -offset, dims=2)  # row i holds k_{i + offset}
        exact = torch.promote_types(q.dtype, torch.float32)  # float32, or float64 for float64 inputs
        score = (q * shifted).sum(-1).to(exact) * scale + terms.band[..., offset + terms.reach - 1].to(exact)
        position = torch.arange(length, device=q.device)
        valid = (position + offset >= 0) & (position + offset < length)
        if allowed_band is not None:
            valid = valid & allowed_band(offset)
        columns.append(torch.where(valid & finite, torch.exp(score - safe), torch.zeros_like(score)))
    return torch.stack(columns, -1)


def mask_band(mask) -> Callable[[int], torch.Tensor] | None:
    """`allowed_band` of an AttentionMask (None: every pair): each query's key at j - i = r allowed or not."""
    if mask is None or mask.empty:
        return None

    def allowed(offset: int) -> torch.Tensor:
        length = (mask.real if mask.real is not None else mask.documents).shape[1]
        keys = (
            (torch.arange(length) + offset)
            .clamp(0, length - 1)
            .to((mask.real if mask.real is not None else mask.documents).device)
        )
        ok = torch.ones((), dtype=torch.bool)
        if mask.real is not None:
            ok = ok & mask.real.index_select(1, keys)
        if mask.documents is not None:
            ok = ok & (mask.documents == mask.documents.index_select(1, keys)) & (mask.documents != 0)
        return ok[:, None, :]  # (b, 1, n)

    return allowed


def softmax_with_lse(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over the last dimension and its log-sum-exp: a row of -inf alone gets probabilities 0 and
    log-sum-exp -inf (not NaN). Out of place, so that autograd can differentiate the exact kernel through it."""
    top = scores.amax(-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weights = torch.exp(scores - top)
    total = weights.sum(-1, keepdim=True)
    reached = total > 0
    safe = torch.where(reached, total, torch.ones_like(total))  # log(0) would send NaN back through the where
    return weights / safe, torch.where(reached, top + safe.log(), -math.inf).squeeze(-1)
