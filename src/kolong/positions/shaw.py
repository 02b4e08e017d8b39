"""Relation-aware self-attention (Shaw, Uszkoreit and Vaswani 2018), as in the Korean BERT paper.

    e_ij = x_i W_Q (x_j W_K + a^K_ij)^T / sqrt(d_z)            (Shaw eq. 4)
    z_i  = sum_j alpha_ij (x_j W_V + a^V_ij)                    (Shaw eq. 3)
    a_ij = w_clip(j - i, k),   clip(x, k) = max(-k, min(k, x))  (Shaw eq. 5)

Each table holds 2k + 1 vectors of the head size, shared by the heads (as in the paper); tables are
per layer unless `shared=True`. The key term is on by default, the value term with `value=True`.

Nothing of shape (n, n, d) is ever built: q_i . w_r is computed for the 2k + 1 distances r only,
(b, h, n, 2k+1), and gathered into the (b, h, n, n) logit bias through an (n, n) index of clipped
distances; the value term scatters the attention probabilities into the same 2k + 1 buckets,
(b, h, n, 2k+1), and multiplies by the value table.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from kolong.positions.base import PositionEncoding, kwarg_error, positive_int, table_count


def clipped_distances(length: int, max_distance: int, device=None) -> torch.Tensor:
    """(n, n) long index clip(j - i, k) + k into a table of 2k + 1 rows."""
    position = torch.arange(length, device=device)
    distance = position[None, :] - position[:, None]  # j - i
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

    def _table(self, tables: torch.Tensor, layer: int) -> torch.Tensor:
        return tables[0 if tables.shape[0] == 1 else layer]  # (2k+1, d_h)

    def prepare(self, length, device, dtype):
        return clipped_distances(length, self.max_distance, device)  # (n, n)

    def score_bias(self, layer, query, state):
        batch, heads, length, head_dim = query.shape
        table = self._table(self.key_tables, layer).to(query.dtype)
        # q_i . w^K_r / sqrt(d_z) for the 2k + 1 distances r: (b, h, n, 2k+1)
        per_distance = torch.matmul(query, table.T) / math.sqrt(head_dim)
        # bias_ij = q_i . w^K_clip(j-i) / sqrt(d_z): (b, h, n, n)
        return per_distance.gather(-1, state.expand(batch, heads, length, length))

    def value_term(self, layer, probs, state):
        if self.value_tables is None:
            return None
        batch, heads, length, _ = probs.shape
        buckets = probs.new_zeros(batch, heads, length, 2 * self.max_distance + 1)
        # sum_j alpha_ij over the j sharing a clipped distance: (b, h, n, 2k+1)
        buckets = buckets.scatter_add(-1, state.expand(batch, heads, length, length), probs)
        return torch.matmul(buckets, self._table(self.value_tables, layer).to(probs.dtype))  # (b, h, n, d_h)


class MaterialisedShawPositions(ShawPositions):
    """The textbook form, for tests and the memory benchmark only (not registered as a scheme).

    It builds a^K_ij and a^V_ij as (n, n, d_h) tensors and contracts them with einsum, which is what
    the efficient form above avoids.
    """

    def score_bias(self, layer, query, state):
        relative_keys = self._table(self.key_tables, layer).to(query.dtype)[state]  # a^K: (n, n, d_h)
        return torch.einsum("bhid,ijd->bhij", query, relative_keys) / math.sqrt(query.shape[-1])

    def value_term(self, layer, probs, state):
        if self.value_tables is None:
            return None
        relative_values = self._table(self.value_tables, layer).to(probs.dtype)[state]  # a^V: (n, n, d_h)
        return torch.einsum("bhij,ijd->bhid", probs, relative_values)
