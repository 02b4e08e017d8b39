"""The one small interface every position scheme implements.

A scheme acts on the token embeddings, on queries and keys, or on the attention logits and values; each hook
defaults to "do nothing":

- `forward(inputs_embeds, ...)`: absolute schemes add (learned, sinusoidal) or multiply (MemN2N) a
  position signal into the token embeddings, before the embedding LayerNorm;
- `score_bias(layer, query, state)`: relative schemes return an additive term for the attention
  logits (Shaw's key term, T5 buckets, ALiBi), already in logit units, shape (batch|1, heads, n, n), which
  the `eager` path (the reference) adds to the scores;
- `rotate(layer, query, key, state)`: RoPE rotates queries and keys;
- `value_term(layer, probs, state)`: Shaw's optional value term needs the attention probabilities
  (`needs_probabilities`).

`score_bias` and `value_term` are the reference (the `eager` attention path). A scheme with a logit
bias also gives the fused paths the same terms without any (n, n) tensor:

- `chunk_bias(layer, query, state)`: a `ChunkBias` (kolong.attention.chunked) that builds the
  bias one block of query rows at a time and reduces the gradient back onto its inputs;
- `regions(layer, query, state)`: for a bias that is constant past a distance r on each side (`contribution.reach`
  r > 0, Shaw's clipped distances), the `RegionTerms` of its three regions (`attention/sdpa_regions.py`);
- `flex_score(layer, query, state)`: `(function, tensors)`, a module-level function
  `function(q, k, v, block_mask, scale, dropout, options, *tensors)` that defines a FlexAttention `score_mod`
  over `tensors` and returns `kolong.attention.flex.attend(q, k, v, score_mod, block_mask, scale, dropout,
  options)` (compiled once per function; `attend` adds attention dropout when `dropout` is not None; `options`
  are the kernel options the attention engine chose for the tensors the score_mod reads).

What a scheme hands to attention is declared, not inferred: `contribution` (a
`kolong.attention.dispatch.Contribution`: nothing, a rotation, a bias by distance alone, a bias that depends on
the query, and whether a value term follows), from which the attention engine plans its path.

`prepare(length, device, dtype)` runs once per forward and returns whatever the layers share (an
index of clipped distances, cos/sin tables, a bias that every layer reuses).

Schemes are chosen by `config.position_encoding` (a name in the registry) plus
`config.position_kwargs`; each class declares its keyword arguments and their defaults in
`defaults`, and `check_kwargs` rejects unknown or invalid ones with a ValueError naming the field.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from kolong.attention.dispatch import Contribution

Panel = tuple[str, "np.ndarray", str, str]


def absolute_panels(title: str, table: np.ndarray) -> list[Panel]:
    """An absolute scheme's (length x dim) matrix and the dot products of its position vectors."""
    return [
        (title, table, "dimension", "position"),
        ("dot product of position vectors", table @ table.T, "position j", "position i"),
    ]


def kwarg_error(scheme: str, key: str, message: str) -> ValueError:
    return ValueError(f"position_kwargs[{key!r}] of position_encoding={scheme!r}: {message}")


class PositionEncoding(nn.Module):
    name: ClassVar[str]
    defaults: ClassVar[dict[str, Any]] = {}
    # True when attention logits depend on positions only through i - j (shift-invariant).
    relative: ClassVar[bool] = False
    # True for schemes that act on the embeddings (learned, sinusoidal, memn2n).
    absolute: ClassVar[bool] = False
    needs_probabilities: bool = False
    # Facts the rest of kolong reads from the scheme (plots, benchmarks), so adding one needs no other edit.
    per_head: ClassVar[bool] = False  # plots: `dim` is the head size (hidden = dim x heads)
    bench_kwargs: ClassVar[dict[str, Any]] = {}  # `kolong bench encoder`: the options it measures

    def __init__(self, config, **kwargs: Any):
        super().__init__()
        self.options = self.check_kwargs(kwargs, config)
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_layers = config.num_hidden_layers

    @classmethod
    def check_kwargs(cls, kwargs: dict[str, Any] | None, config) -> dict[str, Any]:
        """Merge `kwargs` into the scheme's defaults; unknown keys and bad values raise ValueError."""
        kwargs = dict(kwargs or {})
        unknown = sorted(set(kwargs) - set(cls.defaults))
        if unknown:
            known = ", ".join(sorted(cls.defaults)) or "none"
            raise kwarg_error(cls.name, unknown[0], f"unknown option (this scheme takes: {known})")
        options = {**cls.defaults, **kwargs}
        cls.validate(options, config)
        return options

    @classmethod
    def validate(cls, options: dict[str, Any], config) -> None:
        """Raise ValueError naming the field when an option is out of range."""

    @classmethod
    def panels(cls, length: int, dim: int, heads: int, options: dict[str, Any], config) -> list[Panel]:
        """What `kolong plot positions --scheme NAME` draws: (title, matrix, x label, y label) per panel."""
        return []

    def max_length(self) -> int | None:
        """The longest input the scheme can encode, or None when any length works."""
        return None

    def forward(
        self,
        inputs_embeds: torch.Tensor,
        input_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return inputs_embeds

    def packed_position_ids(self, positions: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """Position ids for packed documents, from each token's `positions` within its document (b, n)."""
        return positions

    def prepare(self, length: int, device: torch.device, dtype: torch.dtype) -> Any:
        return None

    def score_bias(self, layer: int, query: torch.Tensor, state: Any) -> torch.Tensor | None:
        return None

    def at_positions(self, state: Any, position_ids: torch.Tensor) -> Any:
        """`state` for given (b, n) positions, one set per example (K-BERT's soft positions, which come with a
        visible matrix): relative schemes then read distances between them rather than j - i, and the plan table
        sends such calls to the reference path. Absolute schemes read positions in `forward`: unchanged."""
        return state

    def layer_argument(self, depth: int, device: torch.device) -> int | torch.Tensor:
        """What the model gives this scheme's methods as `layer` at `depth`: the depth. Schemes that pick a
        table per layer take `per_layer_index` instead: dynamo specialises an int it reads, so a layer compiled on
        its own (`pretrain mlm --compile regions`) would compile once per depth, and past dynamo's recompile
        limit (8) leave the deeper layers eager."""
        return depth

    def rotate(
        self, layer: int, query: torch.Tensor, key: torch.Tensor, state: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return query, key

    def value_term(self, layer: int, probs: torch.Tensor, state: Any) -> torch.Tensor | None:
        return None

    @property
    def has_logit_bias(self) -> bool:
        """True for schemes that add a term to the attention logits (they override `chunk_bias`)."""
        return type(self).chunk_bias is not PositionEncoding.chunk_bias

    @property
    def contribution(self) -> Contribution:
        """What this scheme hands to attention. kolong's schemes declare it; a scheme that does not is read from
        its hooks, assuming the most general bias (one that depends on the query) when it has one."""
        if self.has_logit_bias:
            trained = any(parameter.requires_grad for parameter in self.parameters())
            return Contribution("query", value_term=self.needs_probabilities, trained=trained)
        if type(self).rotate is not PositionEncoding.rotate:
            return Contribution("rotation")
        return Contribution("none")

    def chunk_bias(self, layer: int, query: torch.Tensor, state: Any):
        """The logit bias for chunked exact attention (a `ChunkBias`), or None for schemes without one."""
        return None

    def flex_score(self, layer: int, query: torch.Tensor, state: Any) -> tuple[Any, tuple] | None:
        """(flex function, tensors) for FlexAttention, or None for schemes without a logit bias."""
        return None

    def regions(self, layer: int, query: torch.Tensor, state: Any):
        """The logit bias (and value term) in three regions, a `kolong.attention.terms.RegionTerms`, for a scheme
        whose `contribution.reach` r > 0: the bias is one constant per row for j - i <= -r and another for
        j - i >= r, and varies only in the band between. The `sdpa-regions` path calls it exactly when the reach
        is positive (`CallFacts.regions_fit`), so a scheme that declares a reach must override it."""
        raise NotImplementedError(
            f"{type(self).__name__} declares contribution.reach > 0 but has no regions(); see PositionEncoding.regions"
        )

    def init_weights(self, std: float) -> None:
        """Initialise the scheme's own parameters (called from the model's `_init_weights`)."""

    def extra_repr(self) -> str:
        return ", ".join(f"{key}={value!r}" for key, value in self.options.items())


def per_layer_index(tables: torch.Tensor, depth: int, device: torch.device) -> int | torch.Tensor:
    """`layer_argument` of a scheme with (L or 1, ...) `tables`: 0 where one table serves every layer, else the
    depth as a 0-d tensor, which indexes the tables as the int would and is an input to a compiled layer."""
    return 0 if tables.shape[0] == 1 else torch.full((), depth, dtype=torch.long, device=device)


def layer_table(tables: torch.Tensor, layer: int | torch.Tensor) -> torch.Tensor:
    """`tables[layer]` for an int or a 0-d tensor from `per_layer_index` (indexing with the tensor itself reads
    its value, which dynamo would guard on; `index_select` keeps it a tensor)."""
    if tables.shape[0] == 1:
        return tables[0]
    return tables[layer] if isinstance(layer, int) else tables.index_select(0, layer.reshape(1))[0]


def table_count(options: dict[str, Any], num_layers: int) -> int:
    """Relative tables are per layer unless the scheme's `shared` option says otherwise."""
    return 1 if options.get("shared") else num_layers


def finite_number(
    scheme: str, options: dict[str, Any], key: str, above: float, inclusive: bool = False
) -> None:
    """`options[key]` must be a finite number (JSON's NaN and Infinity are refused) above `above` (or equal to
    it, `inclusive`)."""
    value = options[key]
    number = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if not number or value < above or (value == above and not inclusive):
        bound = ">=" if inclusive else ">"
        raise kwarg_error(scheme, key, f"must be a finite number {bound} {above:g}, got {value!r}")


def positive_int(scheme: str, options: dict[str, Any], key: str, minimum: int = 1) -> None:
    value = options[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise kwarg_error(scheme, key, f"must be an integer >= {minimum}, got {value!r}")
