"""kolong's byte-level encoder-decoder (ByT5 layout) with optional GBST downsampling (see docs/byte.md)."""

from __future__ import annotations

from kolong.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "KolongByteConfig": "kolong.models.byte.configuration",
        "T5ConversionError": "kolong.models.byte.convert",
        "add_gbst": "kolong.models.byte.convert",
        "config_from_t5": "kolong.models.byte.convert",
        "from_t5": "kolong.models.byte.convert",
        "GBST": "kolong.models.byte.gbst",
        "greedy_generate": "kolong.models.byte.greedy",
        "KolongByteEncoderOutput": "kolong.models.byte.modeling",
        "KolongByteForConditionalGeneration": "kolong.models.byte.modeling",
        "KolongBytePreTrainedModel": "kolong.models.byte.modeling",
    },
)


def register_auto_classes() -> None:
    """Make `AutoConfig` / `AutoModelForSeq2SeqLM` resolve model_type "kolong-byte" (idempotent)."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    from kolong.models.byte.configuration import KolongByteConfig
    from kolong.models.byte.modeling import KolongByteForConditionalGeneration

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
    "greedy_generate",
    "register_auto_classes",
]
