"""The three regions of `kolong.attention.regions` with every score materialised: the reference the region
kernels are tested against (FlexAttention has no backward on CPU, so the split and the merge are checked here,
gradients included)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from kolong.attention.regions import REGIONS, RegionTerms, band_probabilities, merge, softmax_with_lse


def inside(region: str, reach: int, relative: torch.Tensor) -> torch.Tensor:
    """Whether key - query = `relative` lies in `region`."""
    if region == "left":
        return relative <= -reach
    if region == "right":
        return relative >= reach
    return relative.abs() < reach


# kernel(q, k, v, region, reach, band or None) -> (out normalised within the region, lse; -inf where empty)
Kernel = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def region_attention(q, k, v, terms: RegionTerms, kernel: Kernel, allowed_band=None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + bias + mask) v (+ the value term): (b, h, n, d_h), from the three regions.
    `allowed_band(r)`: the mask's (b|1, 1, n) verdict on each query's key at j - i = r, for the value term."""
    parts = [
        kernel(q, k, v, region, terms.reach, terms.band if region == "band" else None) for region in REGIONS
    ]
    (left_out, left_lse), band_part, (right_out, right_lse) = parts
    # the edges' constant bias shifts their log-sum-exp only (a softmax ignores a constant)
    out, lse, (left_share, _, right_share) = merge(
        [(left_out, left_lse + terms.left.to(left_lse.dtype)), band_part,
         (right_out, right_lse + terms.right.to(right_lse.dtype))]
    )  # fmt: skip
    if terms.value_band is None:
        return out
    value = left_share[..., None] * terms.value_left + right_share[..., None] * terms.value_right
    probs = band_probabilities(q, k, terms, lse, allowed_band)  # (b, h, n, 2r - 1)
    return out + (value + torch.matmul(probs, terms.value_band.to(probs.dtype))).to(out.dtype)


def exact_region_kernel(mask, scale: float | None = None) -> Kernel:
    """The reference kernel: every score materialised, the region and the mask applied, the log-sum-exp kept."""

    def kernel(q, k, v, region, reach, band):
        length = q.shape[2]
        step = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
        scores = torch.matmul(q, k.transpose(-1, -2)) * step  # (b, h, n, n)
        position = torch.arange(length, device=q.device)
        relative = position[None, :] - position[:, None]  # j - i
        if band is not None:
            index = (relative + band.shape[-1] // 2).clamp(0, band.shape[-1] - 1)
            scores = scores + band.gather(-1, index.expand(*band.shape[:2], -1, -1)).to(scores.dtype)
        allowed = inside(region, reach, relative)
        if mask is not None and not mask.empty:
            allowed = allowed & mask.rows(0, length, length, q.device)
        probs, lse = softmax_with_lse(scores.masked_fill(~allowed, -math.inf))
        return torch.matmul(probs, v), lse

    return kernel
