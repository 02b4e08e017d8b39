"""`AutoTokenizer` entries for kolong's tokenizers (run by kolong/integration.py when transformers loads)."""

from __future__ import annotations


def register_tokenizers() -> None:
    """Make `AutoTokenizer` resolve the `tokenizer_class` names written in tokenizer_config.json (idempotent)."""
    from transformers import AutoTokenizer, PretrainedConfig

    from kolong.tokenizers.byte import ByteTokenizer
    from kolong.tokenizers.morpheme import MorphemeTokenizer

    for cls in (MorphemeTokenizer, ByteTokenizer):
        # AutoTokenizer.register keys its mapping by a config class; these configs name no model.
        config = type(
            f"{cls.__name__}Config", (PretrainedConfig,), {"model_type": f"kolong-{cls.__name__.lower()}"}
        )
        AutoTokenizer.register(config, tokenizer_class=cls, exist_ok=True)
