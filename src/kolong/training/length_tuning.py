"""Tuning at length: what changes when a model trains past the length it was pre-trained for (its original
positions, before `kolong extend`)."""

from __future__ import annotations

from collections.abc import Callable


def original_length(model) -> int | None:
    """The positions a model had before `kolong extend` lengthened it (None: never extended)."""
    from kolong.extension.extend import HISTORY_KEY

    history = getattr(getattr(model, "config", None), HISTORY_KEY, None) or {}
    value = history.get("original_max_length")
    return int(value) if value else None


def set_attention_dropout(model, p: float) -> list[float]:
    """Set every attention dropout of `model` (HF's and kolong's encoders) to `p`; the values it had."""
    import torch

    before = []
    for name in ("attention_probs_dropout_prob", "attention_dropout"):
        if isinstance(getattr(model.config, name, None), float):
            before.append(getattr(model.config, name))
            setattr(model.config, name, p)
    for module in model.modules():
        if "Attention" not in type(module).__name__:
            continue
        if isinstance(getattr(module, "dropout", None), torch.nn.Dropout):
            before.append(module.dropout.p)
            module.dropout.p = p
        for name in ("dropout_p", "attention_dropout"):
            if isinstance(getattr(module, name, None), float):
                before.append(getattr(module, name))
                setattr(module, name, p)
    return before


def attention_dropout_past_original(
    model, training_length: int, keep: bool, report: Callable[[str], None]
) -> None:
    """Past a model's original length its new positions are what tuning teaches, and attention dropout there sends
    PyTorch's SDPA on CPU to its math path, which keeps every score of every head: turned off unless `keep`, and
    said in one line either way."""
    original = original_length(model)
    if original is None or training_length <= original:
        return
    if keep:
        report(f"training at {training_length:,} tokens, past the model's original {original:,}: attention dropout "
               "kept (--keep-attention-dropout)")  # fmt: skip
        return
    before = max(set_attention_dropout(model, 0.0), default=0.0)
    if before:
        report(f"training at {training_length:,} tokens, past the model's original {original:,}: attention dropout "
               f"{before:g} -> 0 (--keep-attention-dropout keeps it)")  # fmt: skip
