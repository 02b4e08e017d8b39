"""Full attention with a bias by distance alone (T5, ALiBi) on CPU inference: SDPA per block of query rows.

    for each block of c query rows [s, s + c):
        mask  = bias(j - i) where allowed(i, j), else -inf        (h, c, n): SDPA's float mask
        out[s : s + c] = SDPA(q[s : s + c], k, v, mask)

The chunked path (`chunked.py`) computes the same rows with a matmul, the bias, a log-sum-exp and a second
matmul; SDPA's fused CPU kernel does the last three in one pass (one call at 2,048 tokens and 12 heads took
0.17x the chunked path's time with ALiBi, 0.3x with T5; model-level numbers: `kolong bench encoder`). Memory stays linear in n: one block's mask, about MASK_ENTRIES entries, at a time.
Gradients would keep every block's mask, so training keeps the chunked path (`banded.fits`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kolong.models.encoder.banded import MASK_ENTRIES
from kolong.models.encoder.chunked import ChunkBias
from kolong.models.encoder.masks import AttentionMask


@torch.compiler.disable  # a loop over row blocks; inside a compiled model it runs eagerly, as the chunked path
def rowwise_attention(q, k, v, mask: AttentionMask | None, bias: ChunkBias) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + bias + mask) v: (b, h, n, d_h), exact; rows with no allowed key get 0."""
    batch, heads, length, _ = q.shape
    rows = max(16, MASK_ENTRIES // (batch * heads * length))
    out = torch.empty_like(q)
    for start in range(0, length, rows):
        stop = min(start + rows, length)
        scores = bias.scores(bias.tensors, start, stop, length).to(q.dtype)  # (1, h, c, n)
        allowed = None if mask is None else mask.rows(start, stop, length, q.device)  # (b|1, 1, c|1, n)
        if allowed is not None:
            scores = torch.where(allowed, scores, float("-inf"))
        out[:, :, start:stop] = F.scaled_dot_product_attention(q[:, :, start:stop], k, v, attn_mask=scores)
    return out
