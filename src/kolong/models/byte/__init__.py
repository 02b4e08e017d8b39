"""kolong's byte-level encoder-decoder (ByT5 layout) with optional GBST downsampling (see docs/byte.md)."""

from __future__ import annotations

from kolong.models.byte.configuration import KolongByteConfig
from kolong.models.byte.convert import T5ConversionError, add_gbst, config_from_t5, from_t5
from kolong.models.byte.gbst import GBST
from kolong.models.byte.modeling import (
    KolongByteEncoderOutput,
    KolongByteForConditionalGeneration,
    KolongBytePreTrainedModel,
)


def register_auto_classes() -> None:
    """Make `AutoConfig` / `AutoModelForSeq2SeqLM` resolve model_type "kolong-byte" (idempotent)."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    AutoConfig.register(KolongByteConfig.model_type, KolongByteConfig, exist_ok=True)
    AutoModelForSeq2SeqLM.register(KolongByteConfig, KolongByteForConditionalGeneration, exist_ok=True)


__all__ = [
    "GBST",
    "KolongByteConfig",
    "KolongByteEncoderOutput",
    "KolongByteForConditionalGeneration",
    "KolongBytePreTrainedModel",
    "T5ConversionError",
    "add_gbst",
    "config_from_t5",
    "from_t5",
    "register_auto_classes",
]
