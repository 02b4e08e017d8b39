"""KorNLI and KorSTS (Kakao Brain's KorNLUDatasets: tab-separated files with a header line).

KorNLI (`xnli.dev.ko.tsv`, `xnli.test.ko.tsv`): sentence1, sentence2, gold_label. KorSTS
(`sts-train.tsv`, `sts-dev.tsv`, ...): sentence1, sentence2 and a `score` in [0, 5]. Errors name the
file and line.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from kolong.data.examples import NLI_LABELS, Example
from kolong.data.shared import missing
from kolong.data.sources import utf8_text
from kolong.errors import DataError


def _rows(path: str | Path) -> list[tuple[int, dict]]:
    path = Path(path)
    if not path.is_file():
        raise missing(path)
    handle = io.StringIO(utf8_text(path), newline="")
    rows = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
    return [(number, row) for number, row in enumerate(rows, 2)]  # line 1 is the header


def _pair(path: Path, number: int, row: dict) -> tuple[str, str]:
    if not isinstance(row.get("sentence1"), str) or not isinstance(row.get("sentence2"), str):
        raise DataError(f"{path}:{number}: needs sentence1 and sentence2 columns")
    return row["sentence1"], row["sentence2"]


def read_kornli(path: str | Path) -> list[Example]:
    path = Path(path)
    examples = []
    for number, row in _rows(path):
        first, second = _pair(path, number, row)
        if row.get("gold_label") not in NLI_LABELS:
            raise DataError(
                f"{path}:{number}: gold_label {row.get('gold_label')!r} is not one of {list(NLI_LABELS)}"
            )
        examples.append(Example(first, NLI_LABELS.index(row["gold_label"]), second, f"{path.name}:{number}"))
    return examples


def read_korsts(path: str | Path) -> list[Example]:
    path = Path(path)
    examples = []
    for number, row in _rows(path):
        first, second = _pair(path, number, row)
        try:
            score = float(row["score"])
        except (TypeError, ValueError, KeyError):
            raise DataError(f"{path}:{number}: score {row.get('score')!r} is not a number") from None
        examples.append(Example(first, score, second, f"{path.name}:{number}"))
    return examples
