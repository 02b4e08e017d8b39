"""kolong's encoder with pluggable position encodings (see docs/encoder.md)."""

from __future__ import annotations

from kolong.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "KolongConfig": "kolong.models.encoder.configuration",
        "ConversionError": "kolong.models.encoder.convert",
        "from_hf": "kolong.models.encoder.convert",
        "kolong_config_from_hf": "kolong.models.encoder.convert",
        "KolongForMaskedLM": "kolong.models.encoder.modeling",
        "KolongForPreTraining": "kolong.models.encoder.modeling",
        "KolongForQuestionAnswering": "kolong.models.encoder.modeling",
        "KolongForSequenceClassification": "kolong.models.encoder.modeling",
        "KolongForTokenClassification": "kolong.models.encoder.modeling",
        "KolongModel": "kolong.models.encoder.modeling",
        "KolongPreTrainedModel": "kolong.models.encoder.modeling",
    },
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

    from kolong.models.encoder.configuration import KolongConfig
    from kolong.models.encoder.modeling import (
        KolongForMaskedLM,
        KolongForPreTraining,
        KolongForQuestionAnswering,
        KolongForSequenceClassification,
        KolongForTokenClassification,
        KolongModel,
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
