"""Fixed sinusoids (Vaswani et al. 2017, section 3.5), defined for any length.

    PE(pos, 2i)   = sin(pos / 10000^(2i/d))
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d))

One frequency per (even, odd) pair of dimensions; the dot product PE(p) . PE(p + t) depends on t
only and decays with |t|. Nothing is learned and nothing is saved; the matrix is recomputed for the
positions at hand, so any input length works.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from kolong.positions.base import PositionEncoding, absolute_panels, finite_number


def sinusoid_table(positions: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """(..., ) positions -> (..., dim) encodings, sin on even and cos on odd dimensions."""
    pair = torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device)  # 2i
    inverse_frequency = base ** (-pair / dim)  # 1 / 10000^(2i/d)
    angles = positions.to(torch.float64)[..., None] * inverse_frequency  # (..., ceil(d/2))
    table = torch.empty(*positions.shape, dim, dtype=torch.float64, device=positions.device)
    table[..., 0::2] = torch.sin(angles)  # PE(pos, 2i)
    table[..., 1::2] = torch.cos(angles[..., : dim // 2])  # PE(pos, 2i+1)
    return table


class SinusoidalPositions(PositionEncoding):
    name = "sinusoidal"
    absolute = True
    defaults: ClassVar[dict[str, Any]] = {"base": 10000.0, "scale": 1.0}

    @classmethod
    def panels(cls, length, dim, heads, options, config):
        table = (sinusoid_table(torch.arange(length), dim, options["base"]) * options["scale"]).numpy()
        return absolute_panels(f"sinusoidal PE (length {length}, d = {dim})", table)

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        self.dim = config.embedding_size or config.hidden_size

    @classmethod
    def validate(cls, options, config):
        for key in ("base", "scale"):
            finite_number(cls.name, options, key, above=0)

    def encodings(self, positions: torch.Tensor) -> torch.Tensor:
        return sinusoid_table(positions, self.dim, self.options["base"]) * self.options["scale"]

    def forward(self, inputs_embeds, input_ids=None, position_ids=None, attention_mask=None):
        if position_ids is None:
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)[None]  # (1, n)
        return inputs_embeds + self.encodings(position_ids).to(inputs_embeds.dtype)  # (b, n, e)
