"""Sentence and sentence-pair classification / regression data for `kolong finetune cls`.

Named datasets read from the shared data folder (`../shared/data`):

| name | task | train / eval |
|---|---|---|
| `nsmc` | sentiment of Naver movie reviews, NSMC's rule (1-4 negative, 9-10 positive) | balanced, split by movie (`kolong.data.nsmc`) |
| `klue-nli` | premise / hypothesis: entailment, neutral, contradiction | KLUE-NLI dev only is available: 80 / 20 split, seeded |
| `klue-sts` | sentence-pair similarity, regression on `real-label` in [0, 5] | KLUE-STS dev: 80 / 20 split, seeded |
| `kornli` | KorNLI's Korean XNLI | dev / test |
| `korsts` | KorSTS similarity, regression on [0, 5] | train / dev |

Any other value is a file: `.tsv`, `.csv` or `.jsonl` with a `text` (or `sentence1`) column, an
optional `text_pair` (or `sentence2`) column and a `label` column (strings or integers: classes;
floats: regression). Errors name the file and line.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from kolong.data import klue
from kolong.data.examples import NLI_LABELS, Example
from kolong.data.klue import read_klue_nli, read_klue_sts
from kolong.data.kornlu import read_kornli, read_korsts
from kolong.data.nsmc import read_nsmc
from kolong.data.shared import missing, shared_root
from kolong.data.sources import table_rows
from kolong.errors import DataError


@dataclass
class ClassificationData:
    name: str
    labels: list[str] | None  # None: regression
    train: list[Example] = field(default_factory=list)
    eval: list[Example] = field(default_factory=list)

    @property
    def is_regression(self) -> bool:
        return self.labels is None


def _split(examples: list[Example], eval_share: float, seed: int) -> tuple[list[Example], list[Example]]:
    shuffled = examples[:]
    random.Random(seed).shuffle(shuffled)
    cut = round(len(shuffled) * (1 - eval_share))
    return shuffled[:cut], shuffled[cut:]


def _require(path: Path) -> Path:
    if not path.is_file():
        raise missing(path)
    return path


def _klue_nli(root: Path, seed: int) -> ClassificationData:
    train, evaluation = _split(read_klue_nli(_require(root / klue.NLI_DEV)), 0.2, seed)
    return ClassificationData("klue-nli", list(NLI_LABELS), train, evaluation)


def _klue_sts(root: Path, seed: int) -> ClassificationData:
    train, evaluation = _split(read_klue_sts(_require(root / klue.STS_DEV)), 0.2, seed)
    return ClassificationData("klue-sts", None, train, evaluation)


def _kornli(root: Path, seed: int) -> ClassificationData:
    folder = root / "kornli"
    return ClassificationData(
        "kornli",
        list(NLI_LABELS),
        read_kornli(folder / "xnli.dev.ko.tsv"),
        read_kornli(folder / "xnli.test.ko.tsv"),
    )


def _korsts(root: Path, seed: int) -> ClassificationData:
    folder = root / "korsts"
    return ClassificationData(
        "korsts", None, read_korsts(folder / "sts-train.tsv"), read_korsts(folder / "sts-dev.tsv")
    )


def _nsmc(root: Path, seed: int, limit: int | None) -> ClassificationData:
    split = read_nsmc(_require(root / "nsmc" / "reviews.shared.tsv.gz"), seed=seed, limit=limit)
    train = [Example(r.text, r.label, None, str(r.review_id)) for r in split.train]
    evaluation = [Example(r.text, r.label, None, str(r.review_id)) for r in split.test]
    return ClassificationData("nsmc", ["negative", "positive"], train, evaluation)


NAMED = {"klue-nli": _klue_nli, "klue-sts": _klue_sts, "kornli": _kornli, "korsts": _korsts}  # and nsmc


def read_file(path: str | Path, split: str = "train") -> tuple[list[Example], list[str] | None]:
    """Examples of a .tsv / .csv / .jsonl file (or `split` of a saved or named `datasets` dataset with the
    same columns), and the class names (None for a regression file)."""
    path = Path(path)
    rows = table_rows(path, split, (".tsv", ".csv", ".jsonl"), "examples")
    raw = []
    for number, row in rows:
        text = row.get("text", row.get("sentence1"))
        if not isinstance(text, str) or "label" not in row or row["label"] in (None, ""):
            raise DataError(f"{path}:{number}: needs a text (or sentence1) and a label column")
        raw.append((number, text, row.get("text_pair", row.get("sentence2")), row["label"]))
    if not raw:
        raise DataError(f"{path} has no examples")
    values = [label for *_, label in raw]
    # Scores with any fraction are a regression target (STS: 0, 0.5, 3.2); whole numbers (1, "1", 1.0 alike)
    # or names are classes. Numbers and names mixed are refused rather than guessed.
    if all(_is_float(v) for v in values) and not all(_is_int(v) for v in values):
        return [Example(t, float(v), p or None, f"{path.name}:{n}") for n, t, p, v in raw], None
    numeric = [(n, v) for n, _, _, v in raw if _is_int(v)]
    named = [(n, v) for n, _, _, v in raw if not _is_int(v)]
    if numeric and named:
        raise DataError(
            f"{path}: labels mix numbers (line {numeric[0][0]}: {numeric[0][1]!r}) and names (line "
            f"{named[0][0]}: {named[0][1]!r}); use one kind"
        )
    names = sorted({_class_name(v) for v in values}, key=lambda v: (int(v), v) if numeric else (0, v))
    if len(names) < 2:
        raise DataError(f"{path}: every example has the label {names[0]!r}; classification needs two or more")
    return [
        Example(t, names.index(_class_name(v)), p or None, f"{path.name}:{n}") for n, t, p, v in raw
    ], names


def _class_name(value) -> str:
    return str(int(float(value))) if _is_int(value) else str(value)


def _is_int(value) -> bool:
    try:
        return float(value) == int(str(value))
    except (TypeError, ValueError):
        return False


def _is_float(value) -> bool:
    try:
        float(value)
        return not isinstance(value, bool)
    except (TypeError, ValueError):
        return False


def load_classification_data(
    data: str, eval_data: str | None = None, shared_data: str | Path | None = None, seed: int = 0,
    limit: int | None = None,
) -> ClassificationData:  # fmt: skip
    root = shared_root(shared_data)
    if data == "nsmc":
        result = _nsmc(root, seed, limit)
    elif data in NAMED:
        result = NAMED[data](root, seed)
    else:
        train, labels = read_file(data)
        if eval_data:
            evaluation, eval_labels = read_file(eval_data, split="validation")
            if (labels is None) != (eval_labels is None) or (labels and set(eval_labels) - set(labels)):
                raise DataError(
                    f"{eval_data} has labels {eval_labels} that the training file {data} does not"
                )
            if labels:  # re-index the eval file's labels by the training file's names
                evaluation = [
                    Example(e.text, labels.index(eval_labels[e.label]), e.pair, e.id) for e in evaluation
                ]
        else:
            train, evaluation = _split(train, 0.2, seed)
        result = ClassificationData(Path(data).stem, labels, train, evaluation)
    if limit is not None and data != "nsmc":
        result.train, result.eval = result.train[:limit], result.eval[: max(1, limit // 4)]
    if not result.train or not result.eval:
        raise DataError(
            f"{data}: needs training and evaluation examples ({len(result.train)} / {len(result.eval)})"
        )
    return result
