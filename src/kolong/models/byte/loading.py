"""Loading kolong's byte models: its own checkpoints, T5 / ByT5 ones converted, or a fresh model of a named size,
each with its ByteTokenizer."""

from __future__ import annotations

import json
from pathlib import Path

from kolong.checkpoints import check_model_type
from kolong.errors import DataError

SIZES = {
    # d_model, heads x head_dim, d_ff, encoder:decoder depth
    "tiny": dict(hidden_size=64, num_attention_heads=4, head_dim=16, intermediate_size=128, encoder_layers=3),
    "small": dict(
        hidden_size=1472, num_attention_heads=6, head_dim=64, intermediate_size=3584, encoder_layers=12
    ),
    "base": dict(
        hidden_size=1536, num_attention_heads=12, head_dim=64, intermediate_size=3968, encoder_layers=18
    ),
}


def load_byte_model(model: str | None = None, init: str | None = None, seed: int = 42, **config_overrides):
    """A kolong byte model and its ByteTokenizer from a kolong or T5 / ByT5 checkpoint, or fresh (`init`)."""
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    from kolong.models.byte.configuration import KolongByteConfig
    from kolong.models.byte.convert import from_t5
    from kolong.models.byte.modeling import KolongByteForConditionalGeneration

    if (model is None) == (init is None):
        raise DataError("give either a checkpoint (--model) or a size for a fresh model (--init)")
    if init is not None:
        if init not in SIZES:
            raise DataError(f"unknown size {init!r}; choose one of {', '.join(SIZES)}")
        torch.manual_seed(seed)
        loaded = KolongByteForConditionalGeneration(KolongByteConfig(**{**SIZES[init], **config_overrides}))
        return loaded, load_byte_tokenizer(None)
    if (Path(model) / "config.json").is_file():
        check_model_type(Path(model))
    try:
        config = AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as error:
        raise DataError(f"cannot load a model configuration from {model}: {error}") from None
    if config.model_type in ("t5", "mt5"):
        loaded = from_t5(model, **config_overrides)
    elif config.model_type == "kolong-byte":
        loaded = AutoModelForSeq2SeqLM.from_pretrained(model, **config_overrides)
    else:
        raise DataError(
            f"{model} is a {config.model_type!r} model, not a kolong byte or T5 / ByT5 checkpoint"
        )
    return loaded, load_byte_tokenizer(model)


def load_byte_tokenizer(model: str | None, sentinels: str = "byt5"):
    """The checkpoint's saved ByteTokenizer, else a new one (google/byt5 ids; its HF tokenizer is not used:
    ByT5Tokenizer numbers sentinels 259 + k, google/byt5's pre-training 258 - k)."""
    from kolong.tokenizers import ByteTokenizer

    if model is not None and Path(model, "tokenizer_config.json").is_file():
        settings = json.loads(Path(model, "tokenizer_config.json").read_text(encoding="utf-8"))
        if settings.get("tokenizer_class") == "ByteTokenizer":
            return ByteTokenizer.from_pretrained(model)
    return ByteTokenizer(sentinels=sentinels)
