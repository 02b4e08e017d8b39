"""Korean tokenizers: morpheme-aware WordPiece / BPE / morpheme lists, and a ByT5-compatible byte tokenizer.

`import kolong` registers both classes with `AutoTokenizer` (kolong/integration.py), so saved tokenizers reload with
`AutoTokenizer.from_pretrained(DIR)`. The morphological analysers (MeCab-ko, Kiwi) are imported only when
first used; without them, `analyser="none"` and the byte tokenizer still work.
"""

from __future__ import annotations

from kolong.data.documents import Corpus, CorpusReport
from kolong.errors import AnalyserMissingError, CorpusError, TokenizerError
from kolong.tokenizers.byte import ByteTokenizer
from kolong.tokenizers.morpheme import MorphemeTokenizer, MorphemeTokenizerFast
from kolong.tokenizers.training import train_tokenizer

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
