"""Rotary position embeddings (Su et al. 2021, RoFormer eq. 34), with scaling for long inputs.

Queries and keys are rotated pairwise by angles pos * theta_i, theta_i = base^(-2i/d), so that
q_m . k_n depends on m - n only. Dimensions are paired as (i, i + d/2) ("rotate half", as GPT-NeoX
and Llama). Two ways to stretch a model trained at length L to longer inputs:

- `scaling="linear"` (position interpolation, Chen et al. 2023): pos -> pos / factor;
- `scaling="ntk"` (NTK-aware): base -> base * factor^(d / (d - 2)), which keeps the highest
  frequencies and slows the lowest ones;
- `scaling="yarn"` (Peng et al. 2023): each frequency interpolated by how many turns it makes over the
  `original_length` the model was trained at (fewer than `beta_slow` = 1: divided by the factor; more than
  `beta_fast` = 32: kept; a linear ramp between), and cos / sin scaled by 0.1 ln(factor) + 1, the
  attention temperature. The same formula as transformers' "yarn" rope type (tested against it).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch

from kolong.attention.dispatch import Contribution
from kolong.positions.base import PositionEncoding, finite_number, kwarg_error


def yarn_temperature(factor: float) -> float:
    """YaRN's scale of cos and sin, (0.1 ln s + 1): attention logits grow by its square at every length."""
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class RotaryPositions(PositionEncoding):
    name = "rope"
    relative = True
    defaults: ClassVar[dict[str, Any]] = {
        "base": 10000.0,
        "scaling": None,
        "factor": 1.0,
        "original_length": None,
    }
    per_head = True

    @classmethod
    def panels(cls, length, dim, heads, options, config):
        cos, sin = (part.numpy() for part in cls(config, **options).prepare(length, "cpu", torch.float64))
        x = np.ones(dim) / np.sqrt(dim)
        rotated = x * cos + np.concatenate([-x[dim // 2 :], x[: dim // 2]]) * sin  # R_p x: (n, d)
        return [
            (f"RoPE cos(p * theta_i) (d_head = {dim})", cos, "dimension", "position"),
            ("RoPE <R_i x, R_j x> for a constant x", rotated @ rotated.T, "position j", "position i"),
        ]

    @classmethod
    def validate(cls, options, config):
        head_dim = config.hidden_size // config.num_attention_heads
        if head_dim % 2:
            raise kwarg_error(cls.name, "base", f"rotary positions need an even head size, got {head_dim}")
        finite_number(cls.name, options, "base", above=1)
        if options["scaling"] not in (None, "linear", "ntk", "yarn"):
            raise kwarg_error(
                cls.name, "scaling", f"must be null, 'linear', 'ntk' or 'yarn', got {options['scaling']!r}"
            )
        finite_number(cls.name, options, "factor", above=1, inclusive=True)
        if options["scaling"] == "yarn":
            original = options["original_length"]
            if isinstance(original, bool) or not isinstance(original, int) or original < 1:
                raise kwarg_error(cls.name, "original_length", "yarn needs the length the model was trained at, "
                                  f"a whole number of tokens, got {original!r}")  # fmt: skip

    def frequencies(self, device=None) -> torch.Tensor:
        dim = self.head_dim
        base = float(self.options["base"])
        if self.options["scaling"] == "ntk":
            base = base * self.options["factor"] ** (dim / (dim - 2))
        pair = torch.arange(0, dim, 2, dtype=torch.float64, device=device)
        theta = base ** (-pair / dim)  # theta_i: (d/2,)
        if self.options["scaling"] == "yarn":
            theta = self._yarn(theta, base, dim)
        return theta

    def _yarn(self, theta: torch.Tensor, base: float, dim: int) -> torch.Tensor:
        """YaRN's per-frequency mix (its eq. 17-19): frequency i turns L / (2 pi / theta_i) times over the
        trained length L; dimensions are ramped from extrapolation (kept) to interpolation (/ factor)."""
        import math

        def dimension(turns: float) -> float:  # the pair index that turns `turns` times over L
            return (
                dim * math.log(self.options["original_length"] / (turns * 2 * math.pi)) / (2 * math.log(base))
            )

        low = max(math.floor(dimension(32.0)), 0)  # beta_fast: faster pairs are kept
        high = min(math.ceil(dimension(1.0)), dim - 1)  # beta_slow: slower pairs are interpolated
        ramp = (torch.arange(dim // 2, dtype=torch.float64, device=theta.device) - low) / max(
            high - low, 0.001
        )
        kept = 1 - ramp.clamp(0, 1)  # 1: extrapolate (keep), 0: interpolate
        return theta / self.options["factor"] * (1 - kept) + theta * kept

    def prepare(self, length, device, dtype):
        return self._tables(torch.arange(length, dtype=torch.float64, device=device), dtype)

    def at_positions(self, state, position_ids):
        cos, sin = self._tables(position_ids.to(torch.float64), state[0].dtype)  # (b, n, d_h) each
        return cos[:, None], sin[:, None]  # (b, 1, n, d_h): one rotation per example

    def _tables(self, position, dtype):
        """cos and sin of every position's angles: (..., d_h) each."""
        if self.options["scaling"] == "linear":
            position = position / self.options["factor"]
        angles = position[..., None] * self.frequencies(position.device)  # (..., d/2)
        angles = torch.cat((angles, angles), dim=-1)  # (..., d)
        scale = yarn_temperature(self.options["factor"]) if self.options["scaling"] == "yarn" else 1.0
        return (angles.cos() * scale).to(dtype), (angles.sin() * scale).to(dtype)

    @property
    def contribution(self) -> Contribution:
        return Contribution("rotation")

    def rotate(self, layer, query, key, state):
        cos, sin = state  # (n, d_h) each
        # In the query's dtype: under autocast q is bf16 while the tables follow the fp32 embeddings.
        cos, sin = cos.to(query.dtype), sin.to(query.dtype)
        return query * cos + rotate_half(query) * sin, key * cos + rotate_half(key) * sin
