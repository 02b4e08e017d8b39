"""KLUE-NLI and KLUE-STS (KLUE v1.1 JSON files; the dev sets are in the shared data folder).

NLI: premise / hypothesis with `gold_label` entailment, neutral or contradiction. STS: sentence1 /
sentence2 with `labels.real-label`, a similarity in [0, 5]. Errors name the file and the item.
KLUE-NER has its own reader (`data/klue_ner.py`).
"""

from __future__ import annotations

from pathlib import Path

from kolong.data.examples import NLI_LABELS, Example
from kolong.data.sources import load_json
from kolong.errors import DataError

NLI_DEV = "klue/klue-nli-v1.1_dev.json"  # under the shared data folder
STS_DEV = "klue/klue-sts-v1.1_dev.json"


def _items(path: str | Path, what: str) -> list[tuple[str, dict]]:
    rows = load_json(path)
    if not isinstance(rows, list):
        raise DataError(f"{path}: expected a JSON list of {what}")
    items = []
    for index, row in enumerate(rows):
        guid = row.get("guid", "?") if isinstance(row, dict) else "?"
        where = f"{path}: item {index} ({guid})"
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected an object")
        items.append((where, row))
    return items


def _strings(where: str, row: dict, *keys: str) -> list[str]:
    if not all(isinstance(row.get(key), str) for key in keys):
        raise DataError(f"{where}: needs string fields {' and '.join(keys)}")
    return [row[key] for key in keys]


def read_klue_nli(path: str | Path) -> list[Example]:
    """Premise (text) / hypothesis (pair) examples labelled by their index in `NLI_LABELS`."""
    examples = []
    for index, (where, row) in enumerate(_items(path, "premise / hypothesis pairs")):
        premise, hypothesis = _strings(where, row, "premise", "hypothesis")
        label = row.get("gold_label")
        if label not in NLI_LABELS:
            raise DataError(f"{where}: gold_label {label!r} is not one of {', '.join(NLI_LABELS)}")
        examples.append(Example(premise, NLI_LABELS.index(label), hypothesis, str(row.get("guid", index))))
    return examples


def read_klue_sts(path: str | Path) -> list[Example]:
    """Sentence pairs labelled by their real-valued similarity (0 to 5)."""
    examples = []
    for index, (where, row) in enumerate(_items(path, "sentence pairs")):
        first, second = _strings(where, row, "sentence1", "sentence2")
        score = row.get("labels", {}).get("real-label") if isinstance(row.get("labels"), dict) else None
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise DataError(f"{where}: labels.real-label {score!r} is not a number")
        examples.append(Example(first, float(score), second, str(row.get("guid", index))))
    return examples
