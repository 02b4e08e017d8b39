"""kolong's own models (registered with the transformers Auto classes on `import kolong`)."""

from kolong.models.encoder import (
    KolongConfig,
    KolongForMaskedLM,
    KolongForQuestionAnswering,
    KolongForSequenceClassification,
    KolongForTokenClassification,
    KolongModel,
    from_hf,
    register_auto_classes,
)

register_auto_classes()

__all__ = [
    "KolongConfig",
    "KolongForMaskedLM",
    "KolongForQuestionAnswering",
    "KolongForSequenceClassification",
    "KolongForTokenClassification",
    "KolongModel",
    "from_hf",
]
