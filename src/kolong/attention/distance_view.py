"""A bias by distance alone with no gradient into it (ALiBi's training; T5's and ALiBi's inference on CPU): SDPA's
fused kernel and its backward, the bias as a strided view.

A bias by distance alone is Toeplitz, B[i, j] = b[j - i + n - 1]. Over a row's L real keys in reverse order it
is Hankel, B[i, L - 1 - j'] = r[n - L + i + j'] for r = b reversed: every row a consecutive window of r, the
whole (h, n, L) bias a strided view with no copy, which SDPA's fused CPU kernel reads through its strides:

    out = SDPA(q, reverse(k[:L]), reverse(v[:L]), attn_mask=that view)

one call, nothing quadratic in memory. A bias with a gradient would send SDPA to its unfused path. Rows padded at
their end go one call per length.
"""

from __future__ import annotations

import torch

from kolong.attention.masks import AttentionMask
from kolong.attention.sdpa import sdpa
from kolong.attention.terms import ChunkBias, hankel_view


@torch.compiler.disable  # reads row lengths on the host; inside a compiled model it runs eagerly
def distance_attention(q, k, v, mask: AttentionMask | None, bias: ChunkBias) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + bias + mask) v: (b, h, n, d_h), exact, for padding at the rows' ends."""
    length = q.shape[2]
    ends = row_ends(mask, length)
    distance = torch.arange(1 - length, length, device=q.device)
    per_distance = bias.distances(bias.tensors, distance, length).to(q.dtype)  # (h, 2n - 1)
    return each_length(lambda q, k, v, end: _hankel(q, k, v, per_distance, end), q, k, v, ends)


def each_length(attend, q, k, v, ends: list[int]) -> torch.Tensor:
    """`attend(q, k, v, end)` over the rows whose tokens end at `end`, one call per length, in the rows' order."""
    if len(set(ends)) == 1:
        return attend(q, k, v, ends[0])
    groups: dict[int, list[int]] = {}
    for row, end in enumerate(ends):
        groups.setdefault(end, []).append(row)
    parts, order = [], []
    for end, rows in groups.items():
        index = torch.tensor(rows, device=q.device)
        parts.append(attend(q[index], k[index], v[index], end))
        order.extend(rows)
    return torch.cat(parts)[torch.tensor(order, device=q.device).argsort()]


def row_ends(mask: AttentionMask | None, length: int) -> list[int] | None:
    """Each row's number of real tokens when they come first (padding at the end only), else None."""
    if mask is None or mask.empty:
        return [length]
    if not mask.keys_only:  # packed documents (or a window, which never comes here)
        return None
    return mask.padding_ends()


def _hankel(q, k, v, per_distance: torch.Tensor, end: int) -> torch.Tensor:
    """Every query's attention to the first `end` keys, the bias a Hankel view."""
    if end == 0:
        return torch.zeros_like(q)
    bias = hankel_view(per_distance, q.shape[2], end)
    return sdpa(q, k[:, :, :end].flip(2), v[:, :, :end].flip(2), attn_mask=bias)
