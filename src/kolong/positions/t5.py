"""T5's bucketed relative attention bias (Raffel et al. 2020, section 2.1), bidirectional.

Each head learns one scalar per bucket of the relative position j - i. Half the buckets serve
j - i > 0 and half j - i <= 0; in each half, the first num_buckets / 4 distances get a bucket of their
own and larger ones share logarithmically wider buckets up to `max_distance`, beyond which all
distances share the last bucket. The function matches HF's `T5Attention._relative_position_bucket`
(tested). T5 computes the bias once and every layer reuses it (`shared=True`, the default).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from kolong.positions.base import PositionEncoding, kwarg_error, positive_int, table_count


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
        position = torch.arange(length, device=device)
        relative = position[None, :] - position[:, None]  # j - i: (n, n)
        buckets = relative_position_bucket(
            relative, self.options["num_buckets"], self.options["max_distance"]
        )
        if self.bias_tables.shape[0] == 1:  # one bias for every layer, computed once
            return {"buckets": buckets, "bias": self._bias(0, buckets, dtype)}
        return {"buckets": buckets, "bias": None}

    def _bias(self, layer, buckets, dtype):
        return self.bias_tables[layer][buckets].permute(2, 0, 1)[None].to(dtype)  # (1, h, n, n)

    def score_bias(self, layer, query, state):
        if state["bias"] is not None:
            return state["bias"]
        return self._bias(layer, state["buckets"], query.dtype)
