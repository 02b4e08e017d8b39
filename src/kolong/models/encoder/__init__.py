"""kolong's encoder with pluggable position encodings (see docs/encoder.md)."""

from __future__ import annotations

from kolong.models.encoder.configuration import KolongConfig
from kolong.models.encoder.convert import ConversionError, from_hf, kolong_config_from_hf
from kolong.models.encoder.modeling import (
    KolongForMaskedLM,
    KolongForPreTraining,
    KolongForQuestionAnswering,
    KolongForSequenceClassification,
    KolongForTokenClassification,
    KolongModel,
    KolongPreTrainedModel,
)


def register_auto_classes() -> None:
    """Make `AutoConfig` / `AutoModel*` resolve model_type "kolong" (idempotent)."""
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForMaskedLM,
        AutoModelForPreTraining,
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    pairs = (
        (AutoModel, KolongModel),
        (AutoModelForMaskedLM, KolongForMaskedLM),
        (AutoModelForPreTraining, KolongForPreTraining),
        (AutoModelForQuestionAnswering, KolongForQuestionAnswering),
        (AutoModelForSequenceClassification, KolongForSequenceClassification),
        (AutoModelForTokenClassification, KolongForTokenClassification),
    )
    AutoConfig.register(KolongConfig.model_type, KolongConfig, exist_ok=True)
    for auto, model in pairs:
        auto.register(KolongConfig, model, exist_ok=True)


__all__ = [
    "ConversionError",
    "KolongConfig",
    "KolongForMaskedLM",
    "KolongForPreTraining",
    "KolongForQuestionAnswering",
    "KolongForSequenceClassification",
    "KolongForTokenClassification",
    "KolongModel",
    "KolongPreTrainedModel",
    "from_hf",
    "kolong_config_from_hf",
    "register_auto_classes",
]
