"""From a text to the morpheme-marked string the `tokenizers` backend encodes, and back to offsets.

`rewrite` runs in Python before the Rust backend sees anything:

1. lone surrogates become U+FFFD (same length; the backend cannot take them);
2. with `normalization="nfc"`, the text is NFC-normalised with an alignment to the original characters;
3. added tokens ([MASK], ...) are cut out and kept whole; the rest goes to the analyser;
4. every morpheme becomes one space-separated word; a morpheme that does not begin its eojeol (it follows
   the previous one without whitespace) is written with the prefix `##`, the WordPiece continuation prefix:
   `발전을 위한` -> `발전 ##을 위한` (surface forms) or `발전 ##을 위하 ##ᆫ` (lemma forms).

The backend's pre-tokenizer splits on single spaces only, so its word *k* is morpheme *k* and the offsets
it returns inside the marked string map back through `Alignment.span`.
"""

from __future__ import annotations

import itertools
import re

from kolong.tokenizers.analysers import Analyser
from kolong.tokenizers.normalization import nfc_alignment

MARK = "##"
_SURROGATES = re.compile(r"[\ud800-\udfff]")


class Alignment:
    """Where each morpheme (backend word) of one sequence came from in the original input.

    Stored per morpheme k: `start[k]:end[k]`, its span in the analysed (normalised) text; `forms[k]` when
    the morpheme is written as the analyser's form rather than the text (all its tokens then map to the whole
    span); `added`, the morphemes that are added tokens (never marked). The positions in the marked string
    and the word indices are derived on first use, so encoding without offsets never pays for them; so are
    the spans of an alignment made by `Alignment.surfaces` (see `surface_spans`).
    """

    __slots__ = (
        "_end", "_rewritten", "_source", "_start", "_words", "added", "forms", "length", "nfc", "word_starts",
    )  # fmt: skip

    def __init__(self, start: list[int] | None, end: list[int] | None, length: int) -> None:
        self._start = start
        self._end = end
        self._source: tuple[str, str] | None = None
        self.length = length
        self.forms: dict[int, str] = {}
        self.added: set[int] = set()
        self.nfc: tuple[list[int], list[int]] | None = None
        self.word_starts: list[int] | None = None  # pre-split input: where each given word starts
        self._rewritten: list[int] | None = None
        self._words: list[int] | None = None

    @classmethod
    def surfaces(cls, analysed: str, marked: str, length: int) -> Alignment:
        """The alignment of a marked string whose words are the surface morphemes of `analysed`."""
        alignment = cls(None, None, length)
        alignment._source = (analysed, marked)
        return alignment

    @property
    def start(self) -> list[int]:
        if self._start is None:
            self._start, self._end = surface_spans(*self._source)
        return self._start

    @property
    def end(self) -> list[int]:
        if self._end is None:
            self._start, self._end = surface_spans(*self._source)
        return self._end

    @property
    def source(self) -> tuple[str, str] | None:
        """(analysed text, marked string) while the spans are not derived yet, else None."""
        return self._source if self._start is None else None

    def __reduce__(self):  # compact pickling: worker processes send alignments back
        state = (self._start, self._end, self.length, self.forms, self.added, self.nfc, self.word_starts)
        return _restore, (*state, self.source, self.layout)

    @property
    def layout(self) -> tuple[list[int], list[int]] | None:
        """(marked position of each morpheme's first character, its word index) if derived, else None."""
        return None if self._rewritten is None else (self._rewritten, self._words)

    @layout.setter
    def layout(self, value: tuple[list[int], list[int]] | None) -> None:  # derived in a worker process
        self._rewritten, self._words = (None, None) if value is None else value

    def _prepare(self) -> None:
        if self._source is not None and self.word_starts is None:
            self._prepare_surfaces()
            return
        rewritten, words = [], []
        position, previous_end, eojeol, given = 0, -1, -1, 0
        forms, added, word_starts = self.forms, self.added, self.word_starts
        for k, (s, e) in enumerate(zip(self.start, self.end, strict=True)):
            gap = s > previous_end
            length = len(forms[k]) if k in forms else e - s
            if word_starts is not None:
                while given + 1 < len(word_starts) and word_starts[given + 1] <= s:
                    given += 1
                words.append(given)
            else:
                eojeol += gap
                words.append(eojeol)
            if gap or k in added:
                rewritten.append(position)
                position += length + 1
            else:
                rewritten.append(position + len(MARK))
                position += length + len(MARK) + 1
            if e > previous_end:
                previous_end = e
        self._rewritten, self._words = rewritten, words

    def _prepare_surfaces(self) -> None:
        """`_prepare` for surface morphemes in one pass over the marked string, spans included: a word
        without the mark begins an eojeol (marked_surfaces writes `##` exactly where no whitespace precedes)."""
        analysed, marked = self._source
        starts, ends, rewritten, words = [], [], [], []
        cursor = position = 0
        eojeol = -1
        find = analysed.find
        for word in marked.split(" ") if marked else ():
            if word.startswith(MARK):
                surface = word[2:]
                rewritten.append(position + 2)
            else:
                surface = word
                rewritten.append(position)
                eojeol += 1
            words.append(eojeol)
            at = find(surface, cursor)
            starts.append(at)
            cursor = at + len(surface)
            ends.append(cursor)
            position += len(word) + 1
        if self._start is None:
            self._start, self._end = starts, ends
        self._rewritten, self._words = rewritten, words

    @property
    def word(self) -> list[int]:
        """Per morpheme: the index of its eojeol (whitespace-delimited word), or of the given word."""
        if self._words is None:
            if self._source is not None and self.word_starts is None:
                # eojeol alone need no spans: count the words of the marked string that begin one
                words = itertools.accumulate(not w.startswith(MARK) for w in self._source[1].split(" "))
                self._words = [w - 1 for w in words] if self._source[1] else []
            else:
                self._prepare()
        return self._words

    def token_spans(self, offsets: list, pieces: list) -> tuple[list, list]:
        """(span in the original input, word index) of every token of this sequence, from its offsets in the
        marked string and its morpheme (None: a special token, span (0, 0)); `span` and `word` per token."""
        if self._rewritten is None:
            self._prepare()
        words = self._words
        word_ids = [None if k is None else words[k] for k in pieces]
        if self.forms or self.nfc is not None or self.word_starts is not None:
            span = self.span
            return [
                (0, 0) if k is None else span(k, a, b) for (a, b), k in zip(offsets, pieces, strict=True)
            ], word_ids
        # One morpheme's tokens: marked offset x maps to start + x - r past its body's first character r,
        # and to start on its `##` mark: max(x, r) + start - r.
        rewritten = self._rewritten
        shift = [s - r for s, r in zip(self.start, rewritten, strict=True)]
        spans = [
            (0, 0)
            if k is None
            else ((a if a > rewritten[k] else rewritten[k]) + shift[k], (b if b > rewritten[k] else rewritten[k]) + shift[k])
            for (a, b), k in zip(offsets, pieces, strict=True)
        ]  # fmt: skip
        return spans, word_ids

    def derive(self) -> Alignment:
        """Compute now what is otherwise computed on first use (spans, marked positions, words)."""
        if self._rewritten is None:
            self._prepare()
        return self

    def span(self, k: int, a: int, b: int) -> tuple[int, int]:
        """Offsets a:b of a token of morpheme k in the marked string -> span in the original input."""
        if self._rewritten is None:
            self._prepare()
        s = self.start[k]
        if k in self.forms:
            ns, ne = s, self.end[k]
        else:
            r = self._rewritten[k]
            ns = s + a - r if a > r else s
            ne = s + b - r if b > r else s
        if self.nfc is not None:
            starts, ends = self.nfc
            if ne > ns:
                ns, ne = starts[ns], ends[ne - 1]
            else:
                ns = ne = starts[ns] if ns < len(starts) else self.length
        if self.word_starts is not None:
            base = self.word_starts[self._words[k]]
            return ns - base, ne - base
        return ns, ne


def _restore(start, end, length, forms, added, nfc, word_starts, source=None, layout=None) -> Alignment:
    alignment = Alignment(start, end, length)
    alignment.forms, alignment.added, alignment.nfc, alignment.word_starts = forms, added, nfc, word_starts
    alignment._source, alignment.layout = source, layout
    return alignment


def surface_spans(analysed: str, marked: str) -> tuple[list[int], list[int]]:
    """The span in `analysed` of each word of `marked`, a marked string of surface morphemes that spell the
    non-whitespace characters of `analysed` in order (`##` begins a continuation, never a word's text)."""
    starts, ends = [], []
    cursor = 0
    find = analysed.find
    for word in marked.split(" ") if marked else ():
        surface = word[2:] if word.startswith(MARK) else word
        at = find(surface, cursor)
        starts.append(at)
        cursor = at + len(surface)
        ends.append(cursor)
    return starts, ends


def _cuts(text: str, special: re.Pattern) -> list[tuple[int, int, bool]]:
    """(start, end, is_added_token) segments of text."""
    cuts, cursor = [], 0
    for match in special.finditer(text):
        if match.start() > cursor:
            cuts.append((cursor, match.start(), False))
        cuts.append((match.start(), match.end(), True))
        cursor = match.end()
    if cursor < len(text):
        cuts.append((cursor, len(text), False))
    return cuts


def _mark(text: str, pieces: list, alignment: Alignment) -> str:
    """The marked string of generic pieces (form or None, start, end[, added])."""
    parts: list[str] = []
    starts, ends, forms, added = alignment.start, alignment.end, alignment.forms, alignment.added
    previous_end = -1
    for piece in pieces:
        form, s, e = piece[0], piece[1], piece[2]
        if form is None:
            body = text[s:e]
        else:
            body = form.replace(" ", "")
            if not body:
                continue
            forms[len(parts)] = body
        if len(piece) == 4:
            added.add(len(parts))
        elif s <= previous_end:
            body = MARK + body
        parts.append(body)
        starts.append(s)
        ends.append(e)
        if e > previous_end:
            previous_end = e
    return " ".join(parts)


def rewrite(
    text: str,
    analyser: Analyser,
    forms: str = "surface",
    normalization: str = "nfc",
    special: re.Pattern | None = None,
    word_starts: list[int] | None = None,
) -> tuple[str, Alignment]:
    """The marked string for the backend and its alignment (see the module docstring).

    `word_starts`: for pre-split input joined with single spaces, where each given word starts; spans are
    then relative to their word, and word indices are the given words'.
    """
    length = len(text)
    nfc = None
    if not text.isascii():
        if _SURROGATES.search(text):
            text = _SURROGATES.sub("\ufffd", text)
        if normalization == "nfc":
            aligned = nfc_alignment(text)
            if aligned is not None:
                text, starts, ends = aligned
                nfc = (starts, ends)

    has_special = special is not None and special.search(text) is not None
    if forms == "surface" and not has_special:
        marked = analyser.marked_surfaces(text)
        if marked is not None:
            alignment = Alignment.surfaces(text, marked, length)
            alignment.nfc, alignment.word_starts = nfc, word_starts
            return marked, alignment

    alignment = Alignment([], [], length)
    alignment.nfc, alignment.word_starts = nfc, word_starts
    if not has_special:
        pieces = analyser.analyse(text, forms)
    else:
        pieces = []
        for s, e, is_added in _cuts(text, special):
            if is_added:
                pieces.append((None, s, e, True))
            else:
                pieces.extend((form, a + s, b + s) for form, a, b in analyser.analyse(text[s:e], forms))
    return _mark(text, pieces, alignment), alignment
