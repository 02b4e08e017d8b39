"""Learned absolute positions (BERT; ConvS2S initialises the table from N(0, 0.1)).

The table is an `nn.Embedding` named `position_embeddings` with `config.max_position_embeddings`
rows, so `kolong.extend_position_embeddings` and `kolong extend` resize it exactly as they resize
BERT's. With `reserve_padding_rows=True` the table follows RoBERTa: rows 0..pad_token_id are
reserved, real position p lives at row p + pad_token_id + 1 and padding tokens read row
pad_token_id (position ids are counted from `input_ids != pad_token_id`, as RoBERTa does).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from kolong.positions.base import PositionEncoding, finite_number, kwarg_error


class LearnedPositions(PositionEncoding):
    name = "learned"
    absolute = True
    defaults: ClassVar[dict[str, Any]] = {"init_std": None, "reserve_padding_rows": False}

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        self.padding_idx = config.pad_token_id if self.options["reserve_padding_rows"] else None
        self.offset = self.padding_idx + 1 if self.padding_idx is not None else 0
        width = config.embedding_size or config.hidden_size
        self.position_embeddings = nn.Embedding(
            config.max_position_embeddings, width, padding_idx=self.padding_idx
        )
        # Read by the model's _init_weights, which visits this table before its owner.
        self.position_embeddings.init_std = self.options["init_std"]

    @classmethod
    def validate(cls, options, config):
        if options["init_std"] is not None:
            finite_number(cls.name, options, "init_std", above=0)
        if options["reserve_padding_rows"]:
            if config.pad_token_id is None:
                raise kwarg_error(cls.name, "reserve_padding_rows", "needs config.pad_token_id")
            if config.max_position_embeddings <= config.pad_token_id + 1:
                raise kwarg_error(
                    cls.name,
                    "reserve_padding_rows",
                    f"max_position_embeddings={config.max_position_embeddings} leaves no rows after the "
                    f"{config.pad_token_id + 1} reserved ones",
                )

    def max_length(self) -> int:
        return self.position_embeddings.num_embeddings - self.offset

    def position_ids(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor) -> torch.Tensor:
        batch, length = inputs_embeds.shape[:2]
        if length > self.max_length():
            raise ValueError(
                f"input of {length} tokens is longer than the {self.max_length()} learned positions "
                "(position_encoding='learned'); extend the table with `kolong extend` or "
                "kolong.extend_position_embeddings"
            )
        if self.padding_idx is not None and input_ids is not None:
            real = input_ids.ne(self.padding_idx).long()  # (b, n)
            return torch.cumsum(real, dim=1) * real + self.padding_idx
        positions = torch.arange(self.offset, self.offset + length, device=inputs_embeds.device)
        return positions.expand(batch, -1)

    def packed_position_ids(self, positions: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        padding = self.padding_idx if self.padding_idx is not None else 0
        return torch.where(real.bool(), positions + self.offset, padding)

    def forward(self, inputs_embeds, input_ids=None, position_ids=None, attention_mask=None):
        if position_ids is None:
            position_ids = self.position_ids(input_ids, inputs_embeds)  # (b, n)
        return inputs_embeds + self.position_embeddings(position_ids)  # (b, n, e)
