"""Bucket tensors spread over more columns, so that FlexAttention's backward does not queue on one address.

FlexAttention's backward adds the gradient of every score into the entry of each trained tensor its
score_mod read, with one atomic add per score (Inductor's lowering, torch 2.5-2.15). Where many keys of a
query row read one entry, the adds of a tile go to one address and run one after another: Shaw's two
clipped buckets hold every key k (16) or more from the query, T5's far buckets most of a long row. On
an H100 (2026-11-27) Shaw with attention dropout trained at 0.45x / 0.22x `learned` at 512 / 2,048 tokens,
and T5 reading its (32, 12) table at 0.03x / 0.01x.

Spreading bucket t over width[t] columns, the key j reading column offset[t] + j mod width[t], gives the
keys of a tile their own addresses. The columns are copies of the bucket, so every score is unchanged, and
the backward of the copy (index_select) sums the columns' gradients back into the bucket:

    spread[..., offset[t] + r] = rows[..., t]        for 0 <= r < width[t]
    column(t, j) = offset[t] + (j & (width[t] - 1))    (widths are powers of two)

A bucket of c distances gets the largest power of two <= c columns, at most SPREAD; exact buckets (one
distance, one key per row) keep one. SPREAD = 1 turns spreading off (the default until a GPU run has
measured it: `kolong bench encoder --implementations shaw,shaw-spread,t5,t5-spread`). The spread copy is
float32 (b, h, n, sum(widths)), which also accumulates the adds in float32.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch


def _from_environment(text: str) -> int | str:
    # Checked where it is used (`widths`), so a bad value stops the run that would spread, not every import.
    return int(text) if text.strip().isdigit() else text


# Widest spread of one bucket (a power of two); 1: off. KOLONG_FLEX_SPREAD=32 in the environment turns it on.
SPREAD = _from_environment(os.environ.get("KOLONG_FLEX_SPREAD", "1"))


def check_spread(widest) -> int:
    if not isinstance(widest, int) or widest < 1 or widest & (widest - 1):
        raise ValueError(f"the FlexAttention bucket spread (KOLONG_FLEX_SPREAD) must be a power of two >= 1, "
                         f"got {widest!r}")  # fmt: skip
    return widest


def widths(distances: Sequence[float], widest: int) -> tuple[int, ...]:
    """Columns per bucket: the largest power of two <= its number of distances (math.inf: unbounded), at
    most `widest`."""
    check_spread(widest)
    return tuple(widest if count == math.inf else min(widest, 1 << int(math.log2(max(count, 1))))
                 for count in distances)  # fmt: skip


def spread(rows: torch.Tensor, bucket_widths: Sequence[int]):
    """(..., m) bucket values -> their (..., sum(widths)) float32 copy, with the (m,) offsets and masks that
    `column` reads (long, on rows' device)."""
    if len(bucket_widths) != rows.shape[-1]:
        raise ValueError(f"{len(bucket_widths)} widths for {rows.shape[-1]} buckets")
    # From Python lists: constants to a compiled model, no data-dependent shapes
    source = [bucket for bucket, width in enumerate(bucket_widths) for _ in range(width)]
    offsets = [sum(bucket_widths[:bucket]) for bucket in range(len(bucket_widths))]
    masks = [width - 1 for width in bucket_widths]
    source, offsets, masks = (torch.tensor(values, dtype=torch.long, device=rows.device)
                              for values in (source, offsets, masks))  # fmt: skip
    return rows.float().index_select(-1, source), offsets, masks


def column(bucket: torch.Tensor, kv_idx: torch.Tensor, offsets: torch.Tensor, masks: torch.Tensor):
    """The column of the spread copy that key `kv_idx` reads for `bucket` (inside a score_mod)."""
    return offsets[bucket] + (kv_idx & masks[bucket])
