"""kolong's own models, registered with the transformers Auto classes when transformers loads them
(kolong/integration.py). Names load on first use."""

from kolong.lazy import lazy_exports

_ENCODER = "kolong.models.encoder"
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "KolongConfig": _ENCODER,
        "KolongForMaskedLM": _ENCODER,
        "KolongForPreTraining": _ENCODER,
        "KolongForQuestionAnswering": _ENCODER,
        "KolongForSequenceClassification": _ENCODER,
        "KolongForTokenClassification": _ENCODER,
        "KolongModel": _ENCODER,
        "from_hf": _ENCODER,
        "register_auto_classes": _ENCODER,
    },
)


__all__ = [
    "KolongConfig",
    "KolongForMaskedLM",
    "KolongForPreTraining",
    "KolongForQuestionAnswering",
    "KolongForSequenceClassification",
    "KolongForTokenClassification",
    "KolongModel",
    "from_hf",
]
