"""KLUE-DP (KLUE v1.1 TSV): sentences of eojeols with their head and DEPREL label.

Each sentence is a ``## id<TAB>sentence`` header followed by one line per eojeol,
``INDEX WORD_FORM LEMMA POS HEAD DEPREL`` (tab-separated, HEAD 0 = the root, indices from 1), blocks
separated by blank lines; ``##`` lines before the first header are comments. Errors name the file and
line. The labels are KLUE-baseline's 38 (`kolong.evaluation.klue.DP_LABELS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kolong.data.sources import utf8_text
from kolong.errors import DataError
from kolong.evaluation.klue import DP_LABELS

DP_LABEL_SET = frozenset(DP_LABELS)


@dataclass
class DPSentence:
    id: str
    text: str
    words: list[str]  # eojeols
    heads: list[int]  # 1-based index of each eojeol's head, 0 for the root
    labels: list[str]  # DEPREL
    pos: list[str]  # the POS tags of each eojeol's morphemes joined by +
    lemmas: list[str]  # each eojeol's morphemes, space-separated (the LEMMA column)


def read_klue_dp(path: str | Path) -> list[DPSentence]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path} does not exist or is not a file")
    sentences: list[DPSentence] = []
    current: DPSentence | None = None
    for number, line in enumerate(utf8_text(path).splitlines(), 1):
        where = f"{path}:{number}"
        if not line.strip():
            _keep(current, sentences, where)
            current = None
            continue
        if line.startswith("##"):
            identifier, tab, text = line[2:].strip().partition("\t")
            if tab:  # a sentence header; other ## lines are comments
                _keep(current, sentences, where)
                current = DPSentence(identifier.strip(), text.strip(), [], [], [], [], [])
            continue
        if current is None:
            raise DataError(f"{where}: an eojeol line without a '## id<TAB>sentence' header before it")
        fields = line.split("\t")
        if len(fields) != 6 or not fields[0].isdigit() or not fields[4].isdigit():
            raise DataError(f"{where}: expected INDEX WORD_FORM LEMMA POS HEAD DEPREL, got {line!r}")
        if int(fields[0]) != len(current.words) + 1:
            raise DataError(f"{where}: sentence {current.id}: eojeol {fields[0]} out of order")
        if fields[5] not in DP_LABELS:
            raise DataError(f"{where}: sentence {current.id}: unknown DEPREL {fields[5]!r}")
        current.words.append(fields[1])
        current.pos.append(fields[3])
        current.lemmas.append(fields[2])
        current.heads.append(int(fields[4]))
        current.labels.append(fields[5])
    _keep(current, sentences, f"{path}:end")
    if not sentences:
        raise DataError(f"{path} holds no KLUE-DP sentence")
    return sentences


def _keep(sentence: DPSentence | None, sentences: list[DPSentence], where: str) -> None:
    """Check a finished sentence (its heads point inside it) and append it; empty ones are dropped."""
    if sentence is not None and sentence.words:
        outside = [h for h in sentence.heads if h > len(sentence.words)]
        if outside:
            raise DataError(
                f"{where}: sentence {sentence.id}: head {outside[0]} is past its {len(sentence.words)} eojeols"
            )
        sentences.append(sentence)
