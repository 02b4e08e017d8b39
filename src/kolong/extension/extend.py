"""`extend_position_embeddings`: the Python API behind `kolong extend`."""

from __future__ import annotations

import torch
from torch import nn

from kolong.extension.block_sparse import sparse_block_size
from kolong.extension.position_table import ExtensionError, find_position_table
from kolong.extension.rope import ROPE_METHODS, rope_extender
from kolong.extension.scaling import CONFIG_KEY, install_position_scaling
from kolong.extension.tables import METHODS, extend_rows

HISTORY_KEY = "kolong_extension"


def extend_position_embeddings(
    model: nn.Module,
    max_length: int,
    method: str = "interpolate",
    *,
    keep_short_behaviour: bool = False,
    std: float | None = None,
    seed: int = 0,
) -> nn.Module:
    """Give `model` a learned absolute position table for `max_length` tokens, in place, and return it.

    Args:
        model: a Hugging Face model with a learned absolute table (base model or any task head).
        max_length: the new number of token positions (RoBERTa-family tables get padding_idx + 1 more
            rows, so `config.max_position_embeddings` becomes max_length + padding_idx + 1 there).
        method: "interpolate" (the paper's doubling, generalised to any length), "copy" (tile the rows,
            Longformer), "last" (repeat the last row) or "random" (new rows ~ N(0, std)). For a RoPE model
            (ModernBERT, mmBERT): "linear" (position interpolation; "interpolate" means it there too), "ntk"
            or "yarn", applied to its global layers (`kolong.extension.rope`).
        keep_short_behaviour: only with "interpolate" and max_length a multiple of the old length:
            position ids are multiplied by the factor so inputs of up to the old length reproduce the
            original model (see `kolong.extension.scaling`; stored in the config).
        std: standard deviation of "random" rows; defaults to `config.initializer_range` (or 0.02).
        seed: seed of the "random" rows.
    """
    extend_rotation = rope_extender(getattr(model, "config", None))  # ModernBERT, mmBERT, kolong's rope
    if extend_rotation is not None:  # no table, a rotation
        if keep_short_behaviour:
            raise ExtensionError("keep-short behaviour is for learned position tables; RoPE models have none")
        extend_rotation(model, max_length, "linear" if method == "interpolate" else method)
        return model
    if method in ROPE_METHODS:
        raise ExtensionError(
            f"method {method!r} is for RoPE models (ModernBERT, mmBERT); {model.config.model_type} has a learned "
            f"position table: choose one of {', '.join(METHODS)}"
        )
    if method not in METHODS:
        raise ExtensionError(
            f"unknown extension method {method!r}; choose one of {', '.join(METHODS)} (learned tables) or "
            f"{', '.join(ROPE_METHODS)} (RoPE models)"
        )
    table = find_position_table(model)
    config = model.config
    old_length = table.max_length
    if not isinstance(max_length, int) or max_length <= old_length:
        raise ExtensionError(
            f"the target length must be larger than the model's current {old_length} positions (got {max_length})"
        )
    if getattr(config, CONFIG_KEY, None):
        raise ExtensionError(
            "this model already scales its position ids (keep-short behaviour); extend the original checkpoint instead"
        )
    block = sparse_block_size(config)
    if block and max_length % block:
        raise ExtensionError(
            f"{config.model_type}'s block-sparse attention pads every input to a multiple of its {block}-token "
            f"blocks, so a {max_length}-position table would be read past its end; choose a multiple of {block}, "
            f"e.g. --max-length {-(-max_length // block) * block}"
        )
    factor = None
    if keep_short_behaviour:
        if method != "interpolate":
            raise ExtensionError(f"keep-short behaviour needs method 'interpolate', not {method!r}")
        if max_length % old_length:
            raise ExtensionError(
                f"keep-short behaviour needs a target that is a whole multiple of {old_length} "
                f"(got {max_length}); try {old_length * max(2, round(max_length / old_length))}"
            )
        factor = max_length // old_length

    if std is None:
        std = float(getattr(config, "initializer_range", 0.02))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        new_rows = extend_rows(table.real_rows(), max_length, method, std=std, generator=generator)
    table.replace(new_rows)

    history = dict(getattr(config, HISTORY_KEY, None) or {})
    setattr(
        config,
        HISTORY_KEY,
        {
            "method": method,
            "original_max_length": history.get("original_max_length", old_length),
            "max_length": max_length,
            "keep_short_behaviour": bool(keep_short_behaviour),
        },
    )
    if factor is not None:
        setattr(config, CONFIG_KEY, {"factor": factor, "original_max_length": old_length})
        install_position_scaling(model)
    return model


def set_tokenizer_max_length(tokenizer, max_length: int):
    """Make a tokenizer truncate and pad for the extended model: sets `model_max_length` (saved with it)."""
    tokenizer.model_max_length = max_length
    if hasattr(tokenizer, "init_kwargs"):
        tokenizer.init_kwargs["model_max_length"] = max_length
    return tokenizer
