"""T5's bucketed relative attention bias (Raffel et al. 2020, section 2.1), bidirectional.

Each head learns one scalar per bucket of the relative position j - i. Half the buckets serve
j - i > 0 and half j - i <= 0; in each half, the first num_buckets / 4 distances get a bucket of their
own and larger ones share logarithmically wider buckets up to `max_distance`, beyond which all
distances share the last bucket. The function matches HF's `T5Attention._relative_position_bucket`
(tested). T5 computes the bias once and every layer reuses it (`shared=True`, the default).

The bias depends on j - i only, so every path starts from one vector per head over the 2n - 1
distances. The reference (`eager`) indexes it into (1, h, n, n); the chunked path reads the distances within the
reach where the buckets saturate, the edges standing for the rest (`T5ChunkBias`), and sums its gradient along
diagonals within the reach (a skewed write into a zero buffer, no scatter) and as plain sums past it; FlexAttention computes
the bucket in its kernel from the bucket boundaries (`t5_flex`) and reads the small (buckets, h) table at
inference; in training it reads a (b, h, n, buckets) copy of it instead, because FlexAttention's backward
adds each score's gradient into the tensor the score_mod read, atomically: into 32 x 12 addresses that was
b n^2 / 32 colliding adds each, which serialised training (docs/encoder.md has the measurement). The copy gives
every query row its own buckets.
Buckets are computed on the CPU once, so every device and path agrees with HF's function exactly.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from kolong.attention.dispatch import Contribution
from kolong.attention.flex import attend
from kolong.attention.masks import key_positions
from kolong.attention.terms import ChunkBias, toeplitz_rows
from kolong.positions.base import (
    PositionEncoding,
    kwarg_error,
    layer_table,
    per_layer_index,
    positive_int,
    table_count,
)


def relative_position_bucket(
    relative_position: torch.Tensor,
    num_buckets: int = 32,
    max_distance: int = 128,
    bidirectional: bool = True,
) -> torch.Tensor:
    """Bucket index of each relative position j - i."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = -relative_position.clamp(max=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # log-spaced buckets between max_exact and max_distance
    scaled = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (scaled * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class T5Positions(PositionEncoding):
    name = "t5"
    relative = True
    defaults: ClassVar[dict[str, Any]] = {"num_buckets": 32, "max_distance": 128, "shared": True}

    @classmethod
    def panels(cls, length, dim, heads, options, config):
        positions = torch.arange(length)
        relative = positions[None, :] - positions[:, None]
        buckets = relative_position_bucket(relative, options["num_buckets"], options["max_distance"]).numpy()
        return [
            (f"T5 bucket of j - i ({options['num_buckets']} buckets, max distance {options['max_distance']})",
             buckets, "key position j", "query position i"),
        ]  # fmt: skip

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        tables = table_count(self.options, self.num_layers)
        self.bias_tables = nn.Parameter(torch.empty(tables, self.options["num_buckets"], self.num_heads))
        # read off tensors here, once: in a forward, .tolist() would break a compiled model's graph at every layer
        self.boundaries = bucket_boundaries(**self._bucket_options())
        self.reach = saturation(**self._bucket_options())

    @classmethod
    def validate(cls, options, config):
        positive_int(cls.name, options, "num_buckets", minimum=4)
        if options["num_buckets"] % 2:
            raise kwarg_error(
                cls.name, "num_buckets", f"must be even (bidirectional), got {options['num_buckets']}"
            )
        positive_int(cls.name, options, "max_distance", minimum=options["num_buckets"] // 4 + 1)
        if not isinstance(options["shared"], bool):
            raise kwarg_error(cls.name, "shared", f"must be true or false, got {options['shared']!r}")

    def init_weights(self, std: float) -> None:
        from transformers import initialization as init

        init.normal_(self.bias_tables, mean=0.0, std=std)

    def prepare(self, length, device, dtype):
        relative = torch.arange(1 - length, length)  # j - i for every distance: (2n-1,)
        buckets = relative_position_bucket(relative, **self._bucket_options())
        # the chunked paths' vector: distances -reach..reach, its edges standing for every distance past them
        within = relative_position_bucket(torch.arange(-self.reach, self.reach + 1), **self._bucket_options())
        return {
            "buckets": buckets.to(device),
            "within_reach": within.to(device),
            "length": length,
            "bias": {},
        }

    def per_distance(self, layer, state, dtype) -> torch.Tensor:
        """The bias of every distance j - i = 1-n .. n-1 for every head: (h, 2n-1)."""
        # contiguous: every path reads it along the distances (a transposed view strides by h there)
        return layer_table(self.bias_tables, layer)[state["buckets"]].T.to(dtype).contiguous()

    def layer_argument(self, depth, device):
        return per_layer_index(self.bias_tables, depth, device)

    def _shared(self, state, key, make):
        """`make()`, kept in `state` for every layer where one table serves them all (a table per layer: made
        for each; `layer` may be a tensor, no dictionary key)."""
        if self.bias_tables.shape[0] > 1:
            return make()
        if key not in state["bias"]:
            state["bias"][key] = make()
        return state["bias"][key]

    def at_positions(self, state, position_ids):
        # p_j - p_i lies in 1-n .. n-1 as j - i does: soft positions are at most n - 1
        state["soft_index"] = _distance_index(position_ids, state["length"])  # (b, n, n)
        return state

    def score_bias(self, layer, query, state):
        def make():  # (1, h, n, n), or (b, h, n, n) at given positions
            index = state.get("soft_index")
            if index is None:
                index = _distance_index(
                    torch.arange(state["length"], device=query.device)[None], state["length"]
                )
            return self.per_distance(layer, state, query.dtype)[:, index].transpose(0, 1)

        return self._shared(state, "bias", make)

    @property
    def contribution(self) -> Contribution:
        # a learned bias per bucket of j - i
        return Contribution("distance", trained=True)

    def chunk_bias(self, layer, query, state):
        table = layer_table(self.bias_tables, layer)
        return T5ChunkBias(table[state["within_reach"]].T.to(query.dtype).contiguous(), self.reach)

    def flex_score(self, layer, query, state):
        table = layer_table(self.bias_tables, layer)  # (buckets, h)
        buckets = (self.options["num_buckets"], self.boundaries)
        if not (torch.is_grad_enabled() and table.requires_grad):
            return t5_flex, (table.to(query.dtype), *buckets)

        def make():  # fp32: up to n gradients are added into each entry
            batch, heads, length, _ = query.shape
            return table.T[None, :, None, :].expand(batch, heads, length, -1).float().contiguous()

        return t5_flex_rows, (self._shared(state, "rows", make), *buckets)

    def _bucket_options(self):
        return {"num_buckets": self.options["num_buckets"], "max_distance": self.options["max_distance"]}


def saturation(num_buckets: int, max_distance: int) -> int:
    """The least distance d from which the bucket of j - i is the same for every |j - i| >= d on each side (91 for
    32 buckets and max_distance 128), read off the reference function."""
    distances = torch.arange(0, max_distance + 2, device="cpu")  # on CPU also while HF builds on "meta"
    reach = 1
    for sign in (-1, 1):
        buckets = relative_position_bucket(sign * distances, num_buckets, max_distance).tolist()
        last = next(d for d in range(len(buckets)) if all(b == buckets[-1] for b in buckets[d:]))
        reach = max(reach, last)
    return reach


def bucket_boundaries(num_buckets: int, max_distance: int) -> tuple[int, ...]:
    """The smallest |j - i| of each log-spaced bucket after the first one, read off the reference function."""
    half = num_buckets // 2
    distances = torch.arange(0, max_distance + 2, device="cpu")  # on CPU also while HF builds on "meta"
    buckets = relative_position_bucket(-distances, num_buckets, max_distance).tolist()  # j - i <= 0 half
    exact = half // 2
    return tuple(
        next(distance for distance, value in enumerate(buckets) if value >= bucket)
        for bucket in range(exact + 1, half)
    )


def _bucket(relative, num_buckets, boundaries):
    """T5's bucket of j - i from the bucket boundaries: integer comparisons a kernel can run."""
    half = num_buckets // 2
    exact = half // 2
    distance = relative.abs()
    bucket = torch.where(distance < exact, distance, exact)
    for boundary in boundaries:
        bucket = bucket + (distance >= boundary).to(bucket.dtype)
    return bucket + (relative > 0).to(bucket.dtype) * half


def t5_flex(q, k, v, block_mask, scale, dropout, options, table, num_buckets, boundaries):
    """FlexAttention with T5's bias read from the (buckets, h) table (inference)."""

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + table[_bucket(kv_idx - q_idx, num_buckets, boundaries), h]

    return attend(q, k, v, score_mod, block_mask, scale, dropout, options)


def t5_flex_rows(q, k, v, block_mask, scale, dropout, options, rows, num_buckets, boundaries):
    """FlexAttention with T5's bias read from the (b, h, n, buckets) copy of the table (training)."""

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + rows[b, h, q_idx, _bucket(kv_idx - q_idx, num_buckets, boundaries)]

    return attend(q, k, v, score_mod, block_mask, scale, dropout, options)


class T5ChunkBias(ChunkBias):
    """T5's bias for the chunked paths: per head one entry for each distance -reach..reach, the two edges standing
    for every distance past them, where T5's buckets saturate. Row blocks read it through the distance clipped to
    the reach; its gradient is the block's diagonal sums over the keys within reach of some row of the block (a
    skewed write into a zero buffer, no scatter) and plain sums over the keys past the reach of every row. Without
    a reach the vector holds every distance of the input, (h, 2n - 1), each its own."""

    by_distance = True

    def __init__(self, per_distance, reach: int | None = None):
        self.tensors = (per_distance,)  # (h, 2 reach + 1)
        self.reach = (per_distance.shape[1] - 1) // 2 if reach is None else reach

    def _index(self, distance: torch.Tensor) -> torch.Tensor:
        return distance.clamp(-self.reach, self.reach) + self.reach

    def distances(self, tensors, distance, length):
        return tensors[0][:, self._index(distance)]  # (h, ...)

    def scores(self, tensors, start, stop, length, keys=None):
        device = tensors[0].device
        if keys is None:
            every = self.distances(tensors, torch.arange(1 - length, length, device=device), length)
            return toeplitz_rows(every, start, stop, length)[None]  # (1, h, c, n)
        keys = key_positions(keys, device)
        return self.distances(
            tensors, keys[None, :] - torch.arange(start, stop, device=device)[:, None], length
        )[None]  # (1, h, c, len(keys))

    def score_grads(
        self, tensors, start, stop, d_scores, grads, keys=None
    ):  # the whole row: key_runs is False
        if grads[0] is None:
            return
        grad = grads[0]
        _, heads, rows, length = d_scores.shape
        # keys left of `low` are at distance <= -reach from every row of the block, keys from `high` on at >= reach
        low = min(max(0, start - self.reach + 1), length)
        high = max(low, min(length, stop - 1 + self.reach))
        grad[:, 0] += d_scores[..., :low].sum((0, 2, 3)).to(grad.dtype)
        grad[:, -1] += d_scores[..., high:].sum((0, 2, 3)).to(grad.dtype)
        width = high - low
        if width == 0:
            return
        # Skew: entry (a, t) of the strip's sum over the batch goes to column t - a + c of a zero (h, c, width + c + 1)
        # buffer, written through a view whose rows step width + c (one less than the buffer's), so the column sums
        # are the sums along diagonals. One zero fill and one strided write.
        skewed = d_scores.new_zeros(heads, rows, width + rows + 1)
        view = skewed.as_strided((heads, rows, width), (skewed.stride(0), width + rows, 1), rows)
        torch.sum(d_scores[..., low:high], 0, out=view)
        diagonals = skewed.sum(1)[:, 1 : width + rows]  # t - a = 1 - c .. width - 1
        distance = torch.arange(low - start + 1 - rows, low - start + width, device=grad.device)
        grad.index_add_(1, self._index(distance), diagonals.to(grad.dtype))


def _distance_index(position: torch.Tensor, length: int) -> torch.Tensor:
    """(b, n, n) index p_j - p_i + n - 1 into the per-distance table (2n - 1 rows) from (b, n) positions."""
    return position[:, None, :] - position[:, :, None] + length - 1
