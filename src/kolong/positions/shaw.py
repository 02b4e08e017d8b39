"""Relation-aware self-attention (Shaw, Uszkoreit and Vaswani 2018), as in the Korean BERT paper.

    e_ij = x_i W_Q (x_j W_K + a^K_ij)^T / sqrt(d_z)            (Shaw eq. 4)
    z_i  = sum_j alpha_ij (x_j W_V + a^V_ij)                    (Shaw eq. 3)
    a_ij = w_clip(j - i, k),   clip(x, k) = max(-k, min(k, x))  (Shaw eq. 5)

Each table holds 2k + 1 vectors of the head size, shared by the heads (as in the paper); tables are
per layer unless `shared=True`. The key term is on by default, the value term with `value=True`.

Nothing of shape (n, n, d) is ever built: q_i . w_r is computed for the 2k + 1 distances r only, a
(b, h, n, 2k+1) profile. The reference (`eager`) gathers it into a (b, h, n, n) logit bias and
scatters the probabilities into the 2k + 1 buckets for the value term. The fused paths never build
(n, n): FlexAttention reads the profile at clip(j - i) inside its kernel (`shaw_flex`), and the
chunked path (`ShawChunkBias`) uses the band-plus-edges form of the bucket sums: inside the band
|j - i| < k each bucket is one diagonal, and the two clipped edges j - i <= -k and j - i >= k are a
masked row sum and the rest of the row.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from kolong.attention.dispatch import Contribution
from kolong.attention.flex import attend
from kolong.attention.terms import ChunkBias, RegionTerms
from kolong.positions.base import (
    PositionEncoding,
    kwarg_error,
    layer_table,
    per_layer_index,
    positive_int,
    table_count,
)


def clipped_distances(length: int, max_distance: int, device=None) -> torch.Tensor:
    """(n, n) long index clip(j - i, k) + k into a table of 2k + 1 rows."""
    return clipped_index(torch.arange(length, device=device), max_distance)


def clipped_index(position: torch.Tensor, max_distance: int) -> torch.Tensor:
    """(..., n, n) index clip(p_j - p_i, k) + k from (..., n) positions."""
    distance = position[..., None, :] - position[..., :, None]  # p_j - p_i
    return distance.clamp(-max_distance, max_distance) + max_distance


class ShawPositions(PositionEncoding):
    name = "shaw"
    relative = True
    defaults: ClassVar[dict[str, Any]] = {"max_distance": 16, "value": False, "shared": False}
    per_head = True
    bench_kwargs: ClassVar[dict[str, Any]] = {"max_distance": 16}

    @classmethod
    def panels(cls, length, dim, heads, options, config):
        index = clipped_distances(length, options["max_distance"]).numpy() - options["max_distance"]
        return [
            (f"Shaw clip(j - i, k = {options['max_distance']})", index, "key position j", "query position i")
        ]

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        self.max_distance = self.options["max_distance"]
        rows = 2 * self.max_distance + 1
        tables = table_count(self.options, self.num_layers)
        self.key_tables = nn.Parameter(torch.empty(tables, rows, self.head_dim))  # w^K
        if self.options["value"]:
            self.value_tables = nn.Parameter(torch.empty(tables, rows, self.head_dim))  # w^V
            self.needs_probabilities = True
        else:
            self.value_tables = None

    @classmethod
    def validate(cls, options, config):
        positive_int(cls.name, options, "max_distance", minimum=1)
        for key in ("value", "shared"):
            if not isinstance(options[key], bool):
                raise kwarg_error(cls.name, key, f"must be true or false, got {options[key]!r}")

    def init_weights(self, std: float) -> None:
        from transformers import initialization as init

        init.normal_(self.key_tables, mean=0.0, std=std)
        if self.value_tables is not None:
            init.normal_(self.value_tables, mean=0.0, std=std)

    def layer_argument(self, depth, device):
        return per_layer_index(self.key_tables, depth, device)

    def profile(self, layer, query) -> torch.Tensor:
        """q_i . w^K_r / sqrt(d_z) for the 2k + 1 distances r: (b, h, n, 2k+1)."""
        table = layer_table(self.key_tables, layer).to(query.dtype)
        return torch.matmul(query, table.T) / math.sqrt(query.shape[-1])

    def prepare(self, length, device, dtype):
        return {}  # the (n, n) index: built by the reference path only, once per forward

    def at_positions(self, state, position_ids):
        state["index"] = clipped_index(position_ids, self.max_distance)[:, None]  # (b, 1, n, n)
        return state

    def _index(self, state, length, device):
        if "index" not in state:
            state["index"] = clipped_distances(length, self.max_distance, device)  # (n, n)
        return state["index"]

    def score_bias(self, layer, query, state):
        batch, heads, length, _ = query.shape
        # bias_ij = q_i . w^K_clip(j-i) / sqrt(d_z): (b, h, n, n)
        index = self._index(state, length, query.device).expand(batch, heads, length, length)
        return self.profile(layer, query).gather(-1, index)

    @property
    def contribution(self) -> Contribution:
        # q_i . w^K_clip(j - i): a bias that depends on the query; w^V adds a value term
        return Contribution(
            "query", value_term=self.value_tables is not None, trained=True, reach=self.max_distance
        )

    def regions(self, layer, query, state) -> RegionTerms:
        """The bias in the three regions: the clipped edges j - i <= -k and >= k are one constant per row."""
        profile, k = self.profile(layer, query), self.max_distance  # (b, h, n, 2k+1)
        terms = RegionTerms(k, profile[..., 0], profile[..., 1 : 2 * k], profile[..., 2 * k])
        if self.value_tables is not None:
            values = layer_table(self.value_tables, layer).to(query.dtype)  # (2k+1, d_h)
            terms.value_left, terms.value_band, terms.value_right = (
                values[0],
                values[1 : 2 * k],
                values[2 * k],
            )
        return terms

    def chunk_bias(self, layer, query, state):
        values = None if self.value_tables is None else layer_table(self.value_tables, layer).to(query.dtype)
        return ShawChunkBias(self.profile(layer, query), values, self.max_distance)

    def flex_score(self, layer, query, state):
        # trained: float32 in the kernel (`flex.trained_reads_in_float32`)
        return shaw_flex, (self.profile(layer, query), self.max_distance)

    def value_term(self, layer, probs, state):
        if self.value_tables is None:
            return None
        batch, heads, length, _ = probs.shape
        buckets = probs.new_zeros(batch, heads, length, 2 * self.max_distance + 1)
        # sum_j alpha_ij over the j sharing a clipped distance: (b, h, n, 2k+1)
        index = self._index(state, length, probs.device).expand(batch, heads, length, length)
        buckets = buckets.scatter_add(-1, index, probs)
        return torch.matmul(buckets, layer_table(self.value_tables, layer).to(probs.dtype))  # (b, h, n, d_h)


def shaw_flex(q, k, v, block_mask, scale, dropout, options, profile, max_distance):
    """FlexAttention with Shaw's key term read from the (b, h, n, 2k+1) profile inside the kernel.

    The index is clamped, so it stays in range on masked entries too (an unclamped one leaves the kernel's fast path).
    """

    def score_mod(score, b, h, q_idx, kv_idx):
        bucket = (kv_idx - q_idx).clamp(-max_distance, max_distance) + max_distance
        return score + profile[b, h, q_idx, bucket]

    return attend(q, k, v, score_mod, block_mask, scale, dropout, options)


def _first(keys: range | None) -> int:
    """The first key of a block over `keys` (a run, or every key)."""
    return 0 if keys is None else keys.start


class ShawChunkBias(ChunkBias):
    """Shaw's terms for chunked attention, by region. In a block of rows start..stop-1, keys left of
    `start - k + 1` are at distance <= -k from every row (bucket 0: one constant per row) and keys from
    `stop - 1 + k` on at distance >= k (bucket 2k); only the strip between reads the profile by distance. So a
    block's bias is two broadcast adds and a gather over the strip, and its reduction two row sums and the strip's
    (no scatter, no index over the whole row). The same holds over one run of keys (packed documents' spans), the
    block's columns then the keys `run.start` on."""

    key_runs = True

    def __init__(self, profile, value_table, max_distance: int):
        self.tensors = (profile,) if value_table is None else (profile, value_table)
        self.has_values = value_table is not None
        self.k = max_distance

    def _strip(self, start, stop, first, end) -> tuple[int, int]:
        """The columns [low, high) of a block over keys first..end-1 whose distance from some row of the block is
        inside (-k, k)."""
        low = min(max(0, start - self.k + 1 - first), end - first)
        return low, max(low, min(end, stop - 1 + self.k) - first)

    def _buckets(self, start, stop, keys, device) -> torch.Tensor:
        """(c, len(keys)): bucket clip(j - i, k) + k of each row i and key j."""
        rows = torch.arange(start, stop, device=device)[:, None]
        return (keys[None, :] - rows).clamp(-self.k, self.k) + self.k

    def _expand(self, per_bucket, start, stop, length, keys=None):
        """(b, h, c, 2k+1) -> (b, h, c, n | keys), a new contiguous tensor: entry (i, j) is bucket clip(j - i, k) + k
        of row i."""
        if keys is None or isinstance(keys, range):
            first, end = (0, length) if keys is None else (keys.start, keys.stop)
            out = per_bucket.new_empty(*per_bucket.shape[:3], end - first)
            self._place(per_bucket, start, stop, out, first)
            return out
        index = self._buckets(start, stop, keys, per_bucket.device)
        return per_bucket.gather(-1, index.expand(*per_bucket.shape[:2], -1, -1))

    def _place(self, per_bucket, start, stop, out, first: int = 0):
        """out (b, h, c, columns: keys first..) = the expanded buckets, region by region."""
        low, high = self._strip(start, stop, first, first + out.shape[-1])
        keys = torch.arange(first + low, first + high, device=out.device)
        index = self._buckets(start, stop, keys, out.device).expand(*per_bucket.shape[:2], -1, -1)
        strip = per_bucket.gather(-1, index)
        regions = (
            (slice(0, low), per_bucket[..., :1]),  # j - i <= -k for every row of the block
            (slice(high, None), per_bucket[..., -1:]),  # j - i >= k
            (slice(low, high), strip),
        )
        # each view taken just before its write: under autograd, writing through a view of `out` taken before an
        # earlier write into it raises
        for columns, value in regions:
            out[..., columns].copy_(value)

    def _reduce(self, x, start, stop, first: int = 0):
        """(b, h, c, columns: keys first..) -> (b, h, c, 2k+1): the sum of each row over the keys of each clipped
        distance."""
        low, high = self._strip(start, stop, first, first + x.shape[-1])
        strip = x[..., low:high]
        buckets = self._buckets(
            start, stop, torch.arange(first + low, first + high, device=x.device), x.device
        )
        k, device = self.k, x.device
        # the strip's keys at distance r (|r| < k) from row i sit at column i + r - first - low; the others are edges
        columns = (
            torch.arange(start, stop, device=device)[:, None]
            - first
            - low
            + torch.arange(1 - k, k, device=device)
        )
        inside = (columns >= 0) & (columns < high - low)
        if high > low:
            band = strip.gather(-1, columns.clamp(0, high - low - 1).expand(*x.shape[:2], -1, -1)) * inside
        else:  # a run wholly on one side of the block: no key within reach
            band = x.new_zeros(*x.shape[:3], 2 * k - 1)
        left = x[..., :low].sum(-1, keepdim=True) + (strip * (buckets == 0)).sum(-1, keepdim=True)
        right = x[..., high:].sum(-1, keepdim=True) + (strip * (buckets == 2 * k)).sum(-1, keepdim=True)
        return torch.cat((left, band, right), dim=-1)

    def scores(self, tensors, start, stop, length, keys=None):
        return self._expand(tensors[0][:, :, start:stop], start, stop, length, keys)

    def block(self, tensors, start, stop, length, shape, dtype, keys=None, shift=None):
        # the shift folded into the (c, 2k + 1) buckets before they are spread over the row: no pass of its own
        per_bucket = tensors[0][:, :, start:stop].to(dtype)
        if shift is not None:
            per_bucket = per_bucket - shift[..., None].to(dtype)
        return self._expand(per_bucket, start, stop, length, keys).expand(shape).contiguous()

    def score_grads(self, tensors, start, stop, d_scores, grads, keys=None):
        if grads[0] is not None:
            grads[0][:, :, start:stop] += self._reduce(d_scores, start, stop, _first(keys)).to(grads[0].dtype)

    def values(self, tensors, start, stop, probs, keys=None):
        # sum_r (sum_{j: clip(j-i) = r} alpha_ij) w^V_r: (b, h, c, d_h)
        return torch.matmul(self._reduce(probs, start, stop, _first(keys)), tensors[1].to(probs.dtype))

    def value_grads(self, tensors, start, stop, probs, d_out, grads, keys=None):
        table = tensors[1].to(probs.dtype)  # (2k+1, d_h)
        first = _first(keys)
        if grads[1] is not None:
            buckets = self._reduce(probs, start, stop, first)  # (b, h, c, 2k+1)
            grads[1] += torch.einsum("bhcr,bhcd->rd", buckets, d_out).to(grads[1].dtype)
        # d alpha_ij += dz_i . w^V_clip(j-i)
        runs = range(first, first + probs.shape[-1])
        return self._expand(torch.matmul(d_out, table.T), start, stop, probs.shape[-1], runs)
