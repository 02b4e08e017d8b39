"""How long can this model read: the one answer, for kolong's encoder and for any HF model.

kolong's encoder asks its scheme (`PositionEncoding.max_length()`: the learned table's rows, None for
schemes that take any length); an HF model with a learned absolute table answers with that table's real
rows (RoBERTa's reserved rows excluded); anything else with `config.max_position_embeddings`.
"""

from __future__ import annotations

from kolong.errors import DataError, ExtensionError
from kolong.extension.position_table import find_position_table
from kolong.positions.base import PositionEncoding

ANY_LENGTH = 10**9  # what "no limit" compares as


def model_max_length(model) -> int:
    """The longest input `model` can encode, in tokens (ANY_LENGTH when its scheme has no limit)."""
    positions = getattr(getattr(model, "base_model", model), "positions", None)
    if isinstance(positions, PositionEncoding):
        limit = positions.max_length()
        return ANY_LENGTH if limit is None else int(limit)
    try:
        return find_position_table(model).max_length
    except ExtensionError:
        return int(getattr(model.config, "max_position_embeddings", None) or ANY_LENGTH)


def check_max_length(model, max_length: int, model_name: str, flag: str = "--max-length") -> None:
    """A DataError naming the option (`flag`: the CLI's, or a Python argument's name) when `model` cannot read
    `max_length` tokens (its position table would be indexed past its end, a traceback deep in the model)."""
    limit = model_max_length(model)
    if max_length > limit:
        given, fix = (f"{flag} {max_length}", f"pass {flag} {limit}") if flag.startswith("-") else (
            f"{flag}={max_length}", f"pass {flag}={limit}")  # fmt: skip
        raise DataError(
            f"{given} exceeds the {limit} positions of {model_name}; {fix} or less, or extend it first: "
            f"kolong extend {model_name} --max-length {max_length} -o EXTENDED"
        )


def max_length_for(model, requested: int | None, default: int, model_name: str) -> int:
    """Tokens per input: `requested` where given (checked against the model's positions), else the smaller
    of `default` and the model's positions."""
    if requested is None:
        return min(default, model_max_length(model))
    check_max_length(model, requested, model_name)
    return requested
