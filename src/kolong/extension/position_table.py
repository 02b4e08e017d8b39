"""Where a Hugging Face model keeps its learned absolute position table, and how to resize it.

All supported families (BERT, RoBERTa, XLM-RoBERTa, CamemBERT, ELECTRA, ALBERT, DistilBERT, and
kolong's encoder with `position_encoding="learned"`) keep an `nn.Embedding` named
`position_embeddings` on `model.base_model.embeddings` (kolong: on `model.base_model.positions`), with `config.max_position_embeddings` rows,
and non-persistent buffers `position_ids` (1, rows) and, for most, `token_type_ids` (1, rows).

RoBERTa-family tables (the embedding has a `padding_idx`) reserve rows 0..padding_idx: real position
p lives at row p + padding_idx + 1. Only those real rows are extended; reserved rows stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from kolong.errors import ExtensionError


@dataclass
class PositionTable:
    """A handle on one model's learned absolute position table."""

    model: nn.Module
    embeddings: nn.Module  # the module that owns `position_embeddings` and the buffers
    offset: int  # rows reserved before real position 0 (RoBERTa family: padding_idx + 1, else 0)

    @property
    def embedding(self) -> nn.Embedding:
        return self.embeddings.position_embeddings

    @property
    def rows(self) -> int:
        return self.embedding.num_embeddings

    @property
    def max_length(self) -> int:
        """The number of real token positions the table serves."""
        return self.rows - self.offset

    @property
    def padding_idx(self) -> int | None:
        return self.embedding.padding_idx

    def real_rows(self) -> torch.Tensor:
        return self.embedding.weight.detach()[self.offset :]

    def replace(self, real_rows: torch.Tensor) -> None:
        """Install a new table (reserved rows kept) and resize the buffers and the config to match."""
        old = self.embedding
        weight = torch.cat([old.weight.detach()[: self.offset], real_rows.to(old.weight)], dim=0)
        # from_pretrained wraps the tensor as is: no random init of a (rows, d) matrix to throw away.
        new = nn.Embedding.from_pretrained(
            weight, freeze=not old.weight.requires_grad, padding_idx=old.padding_idx
        )
        self.embeddings.position_embeddings = new
        self._resize_buffers(weight.shape[0])
        self.model.config.max_position_embeddings = weight.shape[0]

    def _resize_buffers(self, rows: int) -> None:
        # Re-register the way HF does in the embeddings' __init__: arange / zeros of shape (1, rows),
        # same dtype, device and persistence as before.
        for name, make in (("position_ids", torch.arange), ("token_type_ids", torch.zeros)):
            old = self.embeddings._buffers.get(name)
            if old is None:
                continue
            persistent = name not in self.embeddings._non_persistent_buffers_set
            values = make(rows, dtype=old.dtype, device=old.device).expand((1, -1))
            if name == "token_type_ids":
                values = values.contiguous()
            self.embeddings.register_buffer(name, values, persistent=persistent)


def find_position_table(model: nn.Module) -> PositionTable:
    """Locate the learned absolute position table of `model` or explain why it has none."""
    config = getattr(model, "config", None)
    if config is None:
        raise ExtensionError(f"{type(model).__name__} is not a Hugging Face model (it has no config)")
    model_type = getattr(config, "model_type", "?")

    field = "position_encoding" if hasattr(config, "position_encoding") else "position_embedding_type"
    scheme = getattr(config, field, None)
    if scheme not in (None, "absolute", "learned"):
        raise ExtensionError(
            f"{type(model).__name__} ({model_type}) uses {field}={scheme!r}, not a learned "
            "absolute table; only learned absolute tables and rotary positions (rope) can be extended"
        )
    if getattr(config, "sinusoidal_pos_embds", False):
        raise ExtensionError(
            f"{type(model).__name__} uses fixed sinusoidal position embeddings (sinusoidal_pos_embds=True), "
            "not a learned table; sinusoids are defined for any length, so there is nothing to extend"
        )

    base = getattr(model, "base_model", model)
    embeddings = getattr(base, "embeddings", None)
    table = getattr(embeddings, "position_embeddings", None)
    if table is None and hasattr(base, "positions"):  # kolong's encoder keeps the table on its scheme
        embeddings = base.positions
        table = getattr(embeddings, "position_embeddings", None)
    if not isinstance(table, nn.Embedding):
        raise ExtensionError(
            f"{type(model).__name__} ({model_type}) has no learned absolute position table "
            "(no nn.Embedding at base_model.embeddings.position_embeddings); models with rotary or relative "
            "positions (RoFormer, DeBERTa, ModernBERT, ...) cannot be extended this way"
        )
    offset = table.padding_idx + 1 if table.padding_idx is not None else 0
    return PositionTable(model=model, embeddings=embeddings, offset=offset)
