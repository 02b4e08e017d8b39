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


DP_DEV = "klue/klue-dp-v1.1_dev.tsv"
NER_DEV = "klue/klue-ner-v1.1_dev.tsv"


def klue_sentences(folder: str | Path) -> list[str]:
    """Every distinct sentence of the KLUE dev sets in `folder` (NLI, STS, NER, DP), in file order: text for
    pre-training corpora (`kolong data corpus --source klue`). Missing files are skipped."""
    from kolong.data.klue_ner import read_klue_ner

    folder = Path(folder)
    sentences: dict[str, None] = {}
    for name, reader in ((NLI_DEV, read_klue_nli), (STS_DEV, read_klue_sts)):
        path = folder / Path(name).name
        if path.is_file():
            for example in reader(path):
                sentences.update(dict.fromkeys((example.text, example.pair)))
    if (folder / Path(NER_DEV).name).is_file():
        sentences.update(dict.fromkeys(s.text for s in read_klue_ner(folder / Path(NER_DEV).name)))
    path = folder / Path(DP_DEV).name
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("## klue-dp") and "\t" in line:  # "## <id>\t<sentence>" heads each sentence
                sentences[line.split("\t", 1)[1]] = None
    return [s for s in sentences if s and s.strip()]
