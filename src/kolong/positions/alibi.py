"""ALiBi (Press, Smith and Lewis 2022), symmetric for bidirectional attention.

    bias_ij = -m_h * |i - j|

with the paper's head slopes m_h: for h heads (a power of two) the geometric sequence
2^(-8/h), 2^(-16/h), ..., 2^(-8); otherwise the slopes of the closest smaller power of two p,
followed by every other slope of 2p heads until h are filled. No parameters, any length.
The reference path materialises (1, h, n, n); FlexAttention computes the bias in its kernel
(`alibi_flex`) and the chunked path one block of query rows at a time.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from kolong.attention.dispatch import Contribution
from kolong.attention.flex import attend
from kolong.attention.masks import key_positions
from kolong.attention.terms import ChunkBias, toeplitz_rows
from kolong.positions.base import PositionEncoding


def alibi_slopes(heads: int) -> torch.Tensor:
    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if heads & (heads - 1) == 0:
        return torch.tensor(power_of_two(heads), dtype=torch.float64)
    closest = 2 ** math.floor(math.log2(heads))
    slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][: heads - closest]
    return torch.tensor(slopes, dtype=torch.float64)


class ALiBiPositions(PositionEncoding):
    name = "alibi"
    relative = True

    @classmethod
    def panels(cls, length, dim, heads, options, config):
        slopes = alibi_slopes(heads).numpy()
        distance = np.abs(np.arange(length)[None, :] - np.arange(length)[:, None])
        return [
            (f"ALiBi bias, head 1 (m = {slopes[0]:.3g})", -slopes[0] * distance, "key position j", "query position i"),
            (f"ALiBi bias, head {heads} (m = {slopes[-1]:.3g})", -slopes[-1] * distance, "key position j",
             "query position i"),
        ]  # fmt: skip

    def prepare(self, length, device, dtype):
        return {"slopes": alibi_slopes(self.num_heads).to(device=device, dtype=torch.float32), "bias": None}

    def at_positions(self, state, position_ids):
        state["positions"] = position_ids.float()  # (b, n)
        return state

    def score_bias(self, layer, query, state):
        if state["bias"] is None:  # one (1, h, n, n) bias for every layer, (b, h, n, n) at given positions
            position = state.get("positions")
            if position is None:
                position = torch.arange(query.shape[2], device=query.device, dtype=torch.float32)[None]
            distance = (position[:, None, :] - position[:, :, None]).abs()  # |p_i - p_j|: (b|1, n, n)
            state["bias"] = (-state["slopes"][None, :, None, None] * distance[:, None]).to(query.dtype)
        return state["bias"]

    @property
    def contribution(self) -> Contribution:
        return Contribution("distance")  # -m_h |i - j|: nothing trained

    def chunk_bias(self, layer, query, state):
        return ALiBiChunkBias(state["slopes"])

    def flex_score(self, layer, query, state):
        return alibi_flex, (state["slopes"],)


def alibi_flex(q, k, v, block_mask, scale, dropout, options, slopes):
    def score_mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx).abs()

    return attend(q, k, v, score_mod, block_mask, scale, dropout, options)


class ALiBiChunkBias(ChunkBias):
    by_distance = True

    def __init__(self, slopes):
        self.slopes = slopes  # constants: no gradient

    def distances(self, tensors, distance, length):
        return -self.slopes.view(-1, *[1] * distance.dim()) * distance.abs()  # (h, ...)

    def scores(self, tensors, start, stop, length, keys=None):
        device = self.slopes.device
        if keys is None:  # the (h, 2n - 1) bias of every distance, read as a Toeplitz block
            distance = torch.arange(1 - length, length, device=device, dtype=self.slopes.dtype)
            return toeplitz_rows(self.distances(tensors, distance, length), start, stop, length)[None]
        distance = key_positions(keys, device)[None, :] - torch.arange(start, stop, device=device)[:, None]
        return self.distances(tensors, distance, length)[None]  # (1, h, c, len(keys))
