"""A toy position scheme living outside kolong: one module, registered with one line (docs/contributing.md).

Each position p adds `scale * p / max_length` to every embedding dimension, up to `max_length` positions.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from kolong.positions.base import PositionEncoding, absolute_panels, positive_int


class ToyPositions(PositionEncoding):
    name = "toy"
    absolute = True
    defaults: ClassVar[dict[str, Any]] = {"max_length": 96, "scale": 0.1}
    bench_kwargs: ClassVar[dict[str, Any]] = {"max_length": 4096}

    @classmethod
    def validate(cls, options, config):
        positive_int(cls.name, options, "max_length")

    def max_length(self) -> int:
        return self.options["max_length"]

    def forward(self, inputs_embeds, input_ids=None, position_ids=None, attention_mask=None):
        length = inputs_embeds.shape[1]
        ramp = (
            torch.arange(length, device=inputs_embeds.device, dtype=inputs_embeds.dtype) / self.max_length()
        )
        return inputs_embeds + self.options["scale"] * ramp[None, :, None]  # (b, n, d)

    @classmethod
    def panels(cls, length, dim, heads, options, config):
        table = np.repeat(options["scale"] * np.arange(length)[:, None] / options["max_length"], dim, axis=1)
        return absolute_panels(f"toy ramp (length {length})", table)
