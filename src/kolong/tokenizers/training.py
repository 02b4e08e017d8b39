"""Training a morpheme-aware vocabulary: analyse the corpus, then WordPiece, BPE or the morpheme list.

- `wordpiece`: HF `tokenizers`' WordPiece trainer over the morpheme-marked words (`발전`, `##을`);
- `bpe`: HF's BPE trainer over the same words, with `##` on word-internal pieces (MeCab + BPE, the best
  setting of Kakao Brain's study on most tasks);
- `morpheme-list`: the relative-position Korean BERT paper's vocabulary, the N most frequent morphemes
  (a WordLevel model: a morpheme outside the list is [UNK]).

The corpus streams once through the analyser (one document per line); the trainers see only the marked
strings.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from kolong.errors import TokenizerError
from kolong.tokenizers.analysers import ANALYSERS, FORMS, get_analyser
from kolong.tokenizers.morpheme import (
    NORMALIZATIONS,
    SPECIAL_TOKENS,
    MorphemeTokenizer,
    configure_backend,
)
from kolong.tokenizers.segment import rewrite

MODELS = ("wordpiece", "bpe", "morpheme-list")
MAX_CHARS_PER_WORD = 100  # longer morphemes (URLs, runs of symbols) become [UNK], as in BERT


def _check(analyser: str, model: str, forms: str, normalization: str, vocab_size: int, min_frequency: int):
    for value, allowed, what in (
        (analyser, ANALYSERS, "analyser"),
        (model, MODELS, "model"),
        (forms, FORMS, "forms"),
        (normalization, NORMALIZATIONS, "normalization"),
    ):
        if value not in allowed:
            raise TokenizerError(f"unknown {what} {value!r}; choose one of {', '.join(allowed)}")
    if vocab_size <= len(SPECIAL_TOKENS):
        raise TokenizerError(f"--vocab-size must be larger than the {len(SPECIAL_TOKENS)} special tokens")
    if min_frequency < 1:
        raise TokenizerError("--min-frequency must be at least 1")


def marked_documents(
    documents: Iterable[str],
    analyser: str = "mecab",
    forms: str = "surface",
    normalization: str = "nfc",
    on_document: Callable[[], None] | None = None,
):
    """The morpheme-marked string of every document, as the tokenizer's backend will see them."""
    segmenter = get_analyser(analyser)
    seen = 0
    for document in documents:
        if on_document is not None:
            on_document()
        if not isinstance(document, str):
            raise TokenizerError(f"documents must be strings, got {type(document).__name__}")
        if document.strip():
            seen += 1
            yield rewrite(document, segmenter, forms, normalization)[0]
    if seen == 0:
        raise TokenizerError("the corpus is empty: no document to train on")


def train_tokenizer(
    documents: Iterable[str],
    analyser: str = "mecab",
    vocab_size: int = 32000,
    model: str = "wordpiece",
    forms: str = "surface",
    normalization: str = "nfc",
    min_frequency: int = 2,
    on_document: Callable[[], None] | None = None,
) -> MorphemeTokenizer:
    """Train a `MorphemeTokenizer` on an iterable of documents (e.g. a `kolong.tokenizers.Corpus`)."""
    _check(analyser, model, forms, normalization, vocab_size, min_frequency)
    get_analyser(analyser)  # fail early (install hint) before reading the corpus
    marked = marked_documents(documents, analyser, forms, normalization, on_document)
    specials = list(SPECIAL_TOKENS)
    if model == "morpheme-list":
        counts: collections.Counter = collections.Counter()
        for text in marked:
            counts.update(text.split(" "))
        counts.pop("", None)
        vocab = {token: i for i, token in enumerate(specials)}
        for token, count in counts.most_common():
            if len(vocab) >= vocab_size or count < min_frequency:
                break
            if token not in vocab and len(token) <= MAX_CHARS_PER_WORD:
                vocab[token] = len(vocab)
        backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    else:
        if model == "wordpiece":
            backend = Tokenizer(
                models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=MAX_CHARS_PER_WORD)
            )
            trainer = trainers.WordPieceTrainer(
                vocab_size=vocab_size,
                min_frequency=min_frequency,
                special_tokens=specials,
                continuing_subword_prefix="##",
                show_progress=False,
            )
        else:
            backend = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##"))
            trainer = trainers.BpeTrainer(
                vocab_size=vocab_size,
                min_frequency=min_frequency,
                special_tokens=specials,
                continuing_subword_prefix="##",
                show_progress=False,
            )
        backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
        backend.train_from_iterator(marked, trainer)
    configure_backend(backend)
    return MorphemeTokenizer(
        tokenizer_object=backend, analyser=analyser, forms=forms, normalization=normalization
    )


def save_tokenizer(tokenizer: MorphemeTokenizer, output_dir: str | Path) -> Path:
    tokenizer.save_pretrained(str(output_dir))
    return Path(output_dir)
