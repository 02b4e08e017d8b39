"""Keep-short behaviour: scaled position ids for an interpolated table.

After `interpolate` by an integer factor k (N = k * n rows), row k * p of the new table *is* original
row p. Feeding position ids p * k therefore reproduces the original model exactly on inputs of up to
n tokens (LongEmbed's trick). Longer inputs cannot all use stride k, so each example gets the largest
integer stride that still fits the table:

    stride(L) = clamp((N - 1) // (L - 1), 1, k),     position of token p = p * stride(L)

where L is the example's length without padding (counted from `input_ids != pad_token_id`; the
padded width when only `inputs_embeds` are given). Inputs of <= n tokens get stride k (the original
model), inputs of more than N / 2 tokens get stride 1 (the plain extended table), and in between
tokens are spread over the table as evenly as integers allow.

The setting lives in `config.kolong_position_scaling = {"factor": k, "original_max_length": n}`.
Stock transformers classes know nothing about it, so kolong installs a forward pre-hook on the
embeddings module that computes these ids whenever the caller passes no `position_ids`. The hook is
installed by kolong's own model classes (their `post_init`), by every `AutoModel*.from_pretrained` /
`from_config` after `import kolong` (kolong/integration.py) and by `kolong.checkpoints.load_model` (through `integration.prepare_loaded`), which all
of kolong's commands load through. kolong does not patch transformers' `PreTrainedModel`, so a stock class
loaded directly (`BertModel.from_pretrained(dir)`) has no hook: call `install_position_scaling(model)` on
it, or it reads plain ids 0..L-1 (the plain interpolated table, not the original model on short inputs).
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from kolong.constants import POSITION_SCALING_KEY
from kolong.extension.position_table import PositionTable, find_position_table

CONFIG_KEY = POSITION_SCALING_KEY
_HOOK_ATTRIBUTE = "_kolong_position_scaling_hook"


def scaled_strides(lengths: torch.Tensor, table_length: int, factor: int) -> torch.Tensor:
    """stride(L) = clamp((N - 1) // (L - 1), 1, k) for a tensor of lengths L."""
    gaps = (lengths - 1).clamp(min=1)
    return ((table_length - 1) // gaps).clamp(min=1, max=factor)


def scaled_position_ids(
    table: PositionTable,
    factor: int,
    input_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
) -> torch.Tensor:
    """Position ids (batch, seq) that index rows of `table` (offset included)."""
    reference = input_ids if input_ids is not None else inputs_embeds
    batch, width = reference.shape[0], reference.shape[1]
    device = reference.device
    pad_id = getattr(table.model.config, "pad_token_id", None)
    if table.padding_idx is not None:
        pad_id = table.padding_idx

    if input_ids is not None and pad_id is not None:
        real = input_ids.ne(pad_id)  # (batch, seq)
    else:
        real = torch.ones(batch, width, dtype=torch.bool, device=device)
    lengths = real.sum(dim=1)  # (batch,)
    strides = scaled_strides(lengths, table.max_length, factor)  # (batch,)

    if table.padding_idx is not None:
        # RoBERTa family: real tokens count up from padding_idx + 1, padding stays at padding_idx.
        index = torch.cumsum(real, dim=1) - 1  # (batch, seq)
        positions = index * strides[:, None] + table.offset
        return torch.where(real, positions, torch.full_like(positions, table.padding_idx))
    index = torch.arange(width, device=device).expand(batch, -1)
    return (index * strides[:, None]).clamp(max=table.rows - 1)


def install_position_scaling(model: nn.Module) -> bool:
    """Attach the scaled-ids hook to `model` if its config asks for it. Returns True if a hook is active."""
    settings = getattr(getattr(model, "config", None), CONFIG_KEY, None)
    if not settings:
        return False
    table = find_position_table(model)
    embeddings = table.embeddings
    if getattr(embeddings, _HOOK_ATTRIBUTE, None) is not None:
        return True
    factor = int(settings["factor"])
    signature = inspect.signature(embeddings.forward)

    def add_position_ids(module, args, kwargs):
        bound = signature.bind(*args, **kwargs)
        if bound.arguments.get("position_ids") is not None:
            return None
        # `table` reads its sizes live, so a later extension of the same model is seen here.
        bound.arguments["position_ids"] = scaled_position_ids(
            table, factor, bound.arguments.get("input_ids"), bound.arguments.get("inputs_embeds")
        )
        return bound.args, bound.kwargs

    handle = embeddings.register_forward_pre_hook(add_position_ids, with_kwargs=True)
    setattr(embeddings, _HOOK_ATTRIBUTE, handle)
    return True


def remove_position_scaling(model: nn.Module) -> None:
    table = find_position_table(model)
    handle = getattr(table.embeddings, _HOOK_ATTRIBUTE, None)
    if handle is not None:
        handle.remove()
        setattr(table.embeddings, _HOOK_ATTRIBUTE, None)
