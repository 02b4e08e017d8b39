"""kolong's own models (registered with the transformers Auto classes on `import kolong`)."""

from kolong.models.byte import register_auto_classes as register_byte_auto_classes
from kolong.models.encoder import (
    KolongConfig,
    KolongForMaskedLM,
    KolongForPreTraining,
    KolongForQuestionAnswering,
    KolongForSequenceClassification,
    KolongForTokenClassification,
    KolongModel,
    from_hf,
    register_auto_classes,
)

register_auto_classes()
register_byte_auto_classes()

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
