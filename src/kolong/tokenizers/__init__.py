"""Korean tokenizers: morpheme-aware WordPiece / BPE / morpheme lists, and a ByT5-compatible byte tokenizer.

`import kolong` registers both classes with `AutoTokenizer`, so saved tokenizers reload with
`AutoTokenizer.from_pretrained(DIR)`. The morphological analysers (MeCab-ko, Kiwi) are imported only when
first used; without them, `analyser="none"` and the byte tokenizer still work.
"""

from __future__ import annotations

from kolong.tokenizers.byte import ByteTokenizer
from kolong.tokenizers.corpus import Corpus, CorpusReport
from kolong.tokenizers.errors import AnalyserMissingError, CorpusError, TokenizerError
from kolong.tokenizers.morpheme import MorphemeTokenizer, MorphemeTokenizerFast
from kolong.tokenizers.training import train_tokenizer


def _register() -> None:
    """Make `AutoTokenizer` resolve the `tokenizer_class` names written in tokenizer_config.json."""
    from transformers import AutoTokenizer, PretrainedConfig

    for cls in (MorphemeTokenizer, ByteTokenizer):
        # AutoTokenizer.register keys its mapping by a config class; these configs name no model.
        config = type(
            f"{cls.__name__}Config", (PretrainedConfig,), {"model_type": f"kolong-{cls.__name__.lower()}"}
        )
        AutoTokenizer.register(config, tokenizer_class=cls, exist_ok=True)


_register()

__all__ = [
    "AnalyserMissingError",
    "ByteTokenizer",
    "Corpus",
    "CorpusError",
    "CorpusReport",
    "MorphemeTokenizer",
    "MorphemeTokenizerFast",
    "TokenizerError",
    "train_tokenizer",
]
