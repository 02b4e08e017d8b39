"""`MappedEncoding`: a backend encoding of morpheme-marked text whose offsets, `word_ids` and char/word/token
conversions refer to the caller's original strings (the morpheme tokenizer's outputs)."""

from __future__ import annotations

from kolong.tokenizers.segment import Alignment


class MappedEncoding:
    """A backend encoding seen through the alignments of its one or two input sequences.

    It offers what `BatchEncoding` asks of a `tokenizers.Encoding`; offsets and words are computed on first
    use (a plain `tokenizer(texts)` call never pays for them).
    """

    def __init__(self, encoding, alignments: tuple[Alignment, ...]) -> None:
        self._encoding = encoding
        self._alignments = alignments
        self._offsets: list[tuple[int, int]] | None = None
        self._word_ids: list[int | None] | None = None

    def __getattr__(self, name):
        # ids, type_ids, tokens, attention_mask, special_tokens_mask, sequence_ids, n_sequences...
        return getattr(self._encoding, name)

    def __len__(self) -> int:
        return len(self._encoding)

    @property
    def piece_ids(self) -> list[int | None]:
        """The backend's pre-token (morpheme) of each token, where `word_ids` gives the caller's eojeol."""
        return self._encoding.word_ids

    def _compute_words(self) -> None:
        """Only the eojeol of each token (no offsets): what a corpus needs for whole-word masking."""
        alignments = self._alignments
        if len(alignments) == 1:
            words = alignments[0].word
            self._word_ids = [None if k is None else words[k] for k in self._encoding.word_ids]
            return
        self._word_ids = [
            None if piece is None or sequence is None else alignments[sequence].word[piece]
            for piece, sequence in zip(self._encoding.word_ids, self._encoding.sequence_ids, strict=True)
        ]

    def _compute(self) -> None:
        # One sequence: its tokens' morphemes are None exactly on the special tokens.
        encoding = self._encoding
        if len(self._alignments) == 1:
            self._offsets, self._word_ids = self._alignments[0].token_spans(
                encoding.offsets, encoding.word_ids
            )
            return
        # A pair: each sequence's tokens through its own alignment; special tokens (no sequence) get (0, 0).
        offsets: list = [(0, 0)] * len(encoding)
        word_ids: list = [None] * len(encoding)
        marked, pieces, sequences = encoding.offsets, encoding.word_ids, encoding.sequence_ids  # each a copy
        for sequence, alignment in enumerate(self._alignments):
            tokens = [i for i, s in enumerate(sequences) if s == sequence]
            spans, words = alignment.token_spans([marked[i] for i in tokens], [pieces[i] for i in tokens])
            for i, span, word in zip(tokens, spans, words, strict=True):
                offsets[i], word_ids[i] = span, word
        self._offsets, self._word_ids = offsets, word_ids

    @property
    def offsets(self) -> list[tuple[int, int]]:
        if self._offsets is None:
            self._compute()
        return self._offsets

    @property
    def word_ids(self) -> list[int | None]:
        if self._word_ids is None:
            self._compute_words()
        return self._word_ids

    @property
    def words(self) -> list[int | None]:
        return self.word_ids

    @property
    def morpheme_ids(self) -> list[int | None]:
        """Per token, the index of its morpheme in the input (each morpheme is one backend word)."""
        return list(self._encoding.word_ids)

    @property
    def overflowing(self) -> list[MappedEncoding]:
        return [MappedEncoding(e, self._alignments) for e in self._encoding.overflowing]

    def token_to_sequence(self, token: int) -> int | None:
        return self._encoding.sequence_ids[token]

    def token_to_word(self, token: int) -> int | None:
        return self.word_ids[token]

    def token_to_chars(self, token: int) -> tuple[int, int] | None:
        if self.word_ids[token] is None:
            return None
        return self.offsets[token]

    def _tokens_of(self, sequence: int):
        return [i for i, s in enumerate(self._encoding.sequence_ids) if s == sequence]

    def word_to_tokens(self, word: int, sequence: int = 0) -> tuple[int, int] | None:
        ids = [i for i in self._tokens_of(sequence) if self.word_ids[i] == word]
        return (ids[0], ids[-1] + 1) if ids else None

    def word_to_chars(self, word: int, sequence: int = 0) -> tuple[int, int] | None:
        spans = [self.offsets[i] for i in self._tokens_of(sequence) if self.word_ids[i] == word]
        return (min(s for s, _ in spans), max(e for _, e in spans)) if spans else None

    def char_to_token(self, char: int, sequence: int = 0) -> int | None:
        for i in self._tokens_of(sequence):
            start, end = self.offsets[i]
            if start <= char < end and self.word_ids[i] is not None:
                return i
        return None

    def char_to_word(self, char: int, sequence: int = 0) -> int | None:
        token = self.char_to_token(char, sequence)
        return None if token is None else self.word_ids[token]
