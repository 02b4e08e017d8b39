"""Unicode NFC with an alignment back to the original characters.

Text is split into clusters at safe boundaries (a character that does not combine with what precedes it),
each cluster is normalised on its own, and every normalised character remembers the original span of its
cluster. A cluster that NFC leaves unchanged maps character by character; one that NFC rewrites (conjoining
jamo composed into a syllable, a letter plus combining accents) maps every normalised character to the whole
original cluster. If the clusters do not reproduce NFC of the whole text (exotic composition across a
boundary), the whitespace-delimited chunks are used instead, and at worst the whole text is one cluster.
"""

from __future__ import annotations

import re
import unicodedata

# Hangul medial vowels and final consonants (conjoining jamo that compose with a preceding syllable part).
_JAMO_VT = re.compile(r"[\u1160-\u11ff\ud7b0-\ud7ff]")


def _clusters(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for i in range(1, len(text)):
        char = text[i]
        if unicodedata.combining(char) or _JAMO_VT.match(char):
            continue  # combining marks and medial/final jamo attach to what precedes them
        spans.append((start, i))
        start = i
    if text:
        spans.append((start, len(text)))
    return spans


def _chunks(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"\S+|\s+", text)]


def nfc_alignment(text: str) -> tuple[str, list[int], list[int]] | None:
    """NFC of `text` and, per normalised character, the start and end of its original span.

    Returns None when `text` is already NFC (the alignment is the identity).
    """
    if unicodedata.is_normalized("NFC", text):
        return None
    whole = unicodedata.normalize("NFC", text)
    for spans in (_clusters(text), _chunks(text), [(0, len(text))]):
        pieces = [(unicodedata.normalize("NFC", text[s:e]), s, e) for s, e in spans]
        if "".join(p for p, _, _ in pieces) == whole:
            break
    starts: list[int] = []
    ends: list[int] = []
    for normalised, s, e in pieces:
        if normalised == text[s:e]:
            starts.extend(range(s, e))
            ends.extend(range(s + 1, e + 1))
        else:
            starts.extend([s] * len(normalised))
            ends.extend([e] * len(normalised))
    return whole, starts, ends
