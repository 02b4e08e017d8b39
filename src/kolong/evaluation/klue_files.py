"""`kolong evaluate klue TASK`: score a predictions file against a KLUE gold file with KLUE's metrics.

Predictions are one JSON object keyed by the gold items' ids (KLUE's `guid`, the NER/DP sentence id, the
MRC question id):

| task | gold | prediction per id |
|---|---|---|
| ynat | KLUE-YNAT JSON (`guid`, `label`) | the topic label |
| nli | KLUE-NLI JSON | entailment / neutral / contradiction (or its index) |
| sts | KLUE-STS JSON | the predicted similarity, a number |
| ner | KLUE-NER TSV | the character tags, or the sentence in KLUE's `<text:TAG>` markup |
| dp | KLUE-DP TSV | {"heads": [...], "labels": [...]} per eojeol (head 0 = root) |
| mrc | KLUE-MRC / SQuAD JSON | the answer text |

Every gold item needs a prediction (a missing one is an error naming it), except for MRC, where KLUE's
rule is an option: counted wrong (default) or skipped. Predictions for ids not in the gold file are
reported, not scored.
"""

from __future__ import annotations

import math
from pathlib import Path

from kolong.data.sources import load_json
from kolong.errors import DataError
from kolong.evaluation import klue

TASKS = ("ynat", "nli", "sts", "ner", "dp", "mrc")
DEFAULT_GOLD = {  # under the shared data folder
    "nli": "klue/klue-nli-v1.1_dev.json",
    "sts": "klue/klue-sts-v1.1_dev.json",
    "ner": "klue/klue-ner-v1.1_dev.tsv",
    "dp": "klue/klue-dp-v1.1_dev.tsv",
}


def score_klue_files(
    task: str, gold_path: str | Path, predictions_path: str | Path, missing: str = "wrong"
) -> dict:
    """KLUE's scores (percentages) of the predictions file, with the counts of items scored and extra ids."""
    if task not in TASKS:
        raise DataError(f"unknown KLUE task {task!r}; choose one of {', '.join(TASKS)}")
    predictions = load_json(predictions_path)
    if not isinstance(predictions, dict):
        raise DataError(f"{predictions_path}: expected a JSON object {{id: prediction}}")
    gold = _GOLD[task](gold_path)
    extra = len(set(predictions) - set(gold))
    if task == "mrc":
        from kolong.evaluation.korquad import unscored_predictions

        unscored_predictions(predictions, gold, predictions_path, gold_path)
        wrong = next((k for k, v in predictions.items() if not isinstance(v, str)), None)
        if wrong is not None:
            raise DataError(
                f"{predictions_path}: {wrong}: expected the answer text, got {predictions[wrong]!r}"
            )
        return {**klue.mrc_scores(predictions, gold, missing), "extra": extra}
    absent = [key for key in gold if key not in predictions]
    if absent:
        raise DataError(
            f"{predictions_path}: no prediction for {len(absent)} of the {len(gold)} items of {gold_path} "
            f"(first: {absent[0]})"
        )
    scores = _SCORE[task](gold, predictions, str(predictions_path))
    return {**scores, "items": len(gold), "extra": extra}


def _ynat_gold(path) -> dict:
    rows = load_json(path)
    if not isinstance(rows, list) or not all(
        isinstance(r, dict) and "guid" in r and "label" in r for r in rows
    ):
        raise DataError(f"{path}: expected a JSON list of KLUE-YNAT items with guid and label")
    return {str(r["guid"]): r["label"] for r in rows}


def _nli_gold(path) -> dict:
    from kolong.data.klue import read_klue_nli

    return {e.id: e.label for e in read_klue_nli(path)}


def _sts_gold(path) -> dict:
    from kolong.data.klue import read_klue_sts

    return {e.id: e.label for e in read_klue_sts(path)}


def _ner_gold(path) -> dict:
    from kolong.data.klue_ner import read_klue_ner

    return {s.id: s.tags for s in read_klue_ner(path)}


def _dp_gold(path) -> dict:
    from kolong.data.klue_dp import read_klue_dp

    return {s.id: (s.heads, s.labels) for s in read_klue_dp(path)}


def _mrc_gold(path) -> dict:
    from kolong.data.squad import gold_answers, read_squad

    return {question: answers for question, answers, _ in gold_answers(read_squad(path).examples)}


def _labels(gold: dict, predictions: dict, where: str, names=None) -> tuple[list, list]:
    """Predicted and gold labels in gold order; a name that is not a label (a generation) is wrong (-1)."""
    predicted = []
    for key in gold:
        value = predictions[key]
        if names is not None and isinstance(value, str):
            value = names.index(value) if value in names else -1
        elif names is not None and (isinstance(value, bool) or not isinstance(value, int)):
            value = -1  # an index must be an int: true, 1.0 or [1] would otherwise compare equal to label 1
        predicted.append(value)
    return predicted, list(gold.values())


def _unknown(values, known) -> int:
    return sum(v not in known for v in values)


def _score_ynat(gold, predictions, where) -> dict:
    predicted, labels = _labels(gold, predictions, where)
    topics = set(labels)
    # A prediction that is no topic of the gold file (a generation, a number) is wrong; it does not become a
    # class of its own, whose F1 of 0 would lower the macro average once per distinct wrong value.
    unknown = sum(not _hashable(p) or p not in topics for p in predicted)
    predicted = [p if _hashable(p) and p in topics else None for p in predicted]
    return {"macro_f1": klue.ynat_macro_f1(predicted, labels), "unknown_labels": unknown}


def _hashable(value) -> bool:
    return isinstance(value, str | int | float)


def _score_nli(gold, predictions, where) -> dict:
    from kolong.data.examples import NLI_LABELS

    predicted, labels = _labels(gold, predictions, where, NLI_LABELS)
    return {"accuracy": klue.nli_accuracy(predicted, labels), "unknown_labels": _unknown(predicted, range(3))}


def _score_sts(gold, predictions, where) -> dict:
    predicted, labels = _labels(gold, predictions, where)
    bad = next(
        (
            k
            for k, v in zip(gold, predicted, strict=True)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
        ),
        None,
    )
    if bad is not None:
        raise DataError(
            f"{where}: {bad}: the predicted similarity {predictions[bad]!r} is not a finite number"
        )
    f1 = klue.sts_f1(predicted, labels)
    if len(set(predicted)) == 1:  # Pearson's r divides by the predictions' spread: it has no value here
        return {"pearson": None, "f1": f1, "note": f"every predicted similarity is {predicted[0]!r}: "
                "Pearson's r is undefined (null)"}  # fmt: skip
    return {"pearson": klue.sts_pearson(predicted, labels), "f1": f1}


def _score_ner(gold, predictions, where) -> dict:
    from kolong.data.klue_ner import parse

    predicted = []
    for key, tags in gold.items():
        value = predictions[key]
        if isinstance(value, str):
            value = parse(value)[1]
        if not isinstance(value, list) or len(value) != len(tags):
            raise DataError(f"{where}: {key}: expected {len(tags)} character tags (or the sentence's markup)")
        wrong = next(
            (i for i, tag in enumerate(value) if not (isinstance(tag, str) and tag in klue.NER_LABELS)), None
        )
        if wrong is not None:
            raise DataError(
                f"{where}: {key}: tag {value[wrong]!r} of character {wrong} is not one of KLUE-NER's "
                f"({', '.join(klue.NER_LABELS)})"
            )
        predicted.append(value)
    labels = list(gold.values())
    return {"entity_macro_f1": klue.ner_entity_macro_f1(predicted, labels),
            "char_macro_f1": klue.ner_char_macro_f1(predicted, labels)}  # fmt: skip


def _score_dp(gold, predictions, where) -> dict:
    heads_p, labels_p = [], []
    for key, (heads, _) in gold.items():
        value = predictions[key]
        if not (
            isinstance(value, dict)
            and len(value.get("heads", ())) == len(heads) == len(value.get("labels", ()))
        ):
            raise DataError(
                f'{where}: {key}: expected {{"heads": [...], "labels": [...]}} for its {len(heads)} eojeols'
            )
        wrong = next((h for h in value["heads"] if isinstance(h, bool) or not isinstance(h, int)), None)
        if wrong is not None:
            raise DataError(
                f"{where}: {key}: head {wrong!r} is not an eojeol number (an int, 0 for the root)"
            )
        heads_p.append(value["heads"])
        labels_p.append(value["labels"])
    heads_g = [h for h, _ in gold.values()]
    labels_g = [labels for _, labels in gold.values()]
    unknown = sum(_unknown(row, klue.DP_LABELS) for row in labels_p)
    labels_p = [[label if label in klue.DP_LABELS else None for label in row] for row in labels_p]  # wrong
    return {"uas_macro_f1": klue.dp_uas_macro_f1(heads_p, heads_g),
            "las_macro_f1": klue.dp_las_macro_f1(heads_p, heads_g, labels_p, labels_g), "unknown_labels": unknown}  # fmt: skip


_GOLD = {
    "ynat": _ynat_gold,
    "nli": _nli_gold,
    "sts": _sts_gold,
    "ner": _ner_gold,
    "dp": _dp_gold,
    "mrc": _mrc_gold,
}
_SCORE = {"ynat": _score_ynat, "nli": _score_nli, "sts": _score_sts, "ner": _score_ner, "dp": _score_dp}


MAIN_SCORES = {  # the columns of a model's results table, KLUE's reporting order
    "ynat": ("macro_f1",), "nli": ("accuracy",), "sts": ("pearson", "f1"), "ner": ("entity_macro_f1", "char_macro_f1"),
    "dp": ("uas_macro_f1", "las_macro_f1"), "mrc": ("exact_match", "rouge_w"),
}  # fmt: skip


def score_klue_directory(directory: str | Path, gold: dict[str, str | Path], missing: str = "wrong") -> dict:
    """Every `TASK.json` in `directory` scored against `gold[TASK]` (tasks without a file are left out)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"{directory}: not a directory (expected one TASK.json per KLUE task, e.g. nli.json)")
    found = {task: directory / f"{task}.json" for task in TASKS if (directory / f"{task}.json").is_file()}
    if not found:
        raise DataError(f"{directory} holds none of {', '.join(f'{t}.json' for t in TASKS)}")
    unscorable = [task for task in found if task not in gold]
    if unscorable:
        raise DataError(f"{found[unscorable[0]]}: no gold file for {unscorable[0]} (pass --data-dir with it)")
    return {task: score_klue_files(task, gold[task], path, missing) for task, path in found.items()}


def klue_table(model: str, scores: dict) -> str:
    """One model's KLUE results as a markdown table (percentages), the columns of MAIN_SCORES."""
    columns = [(task, name) for task in TASKS if task in scores for name in MAIN_SCORES[task]]
    header = "| model | " + " | ".join(f"{task} {name.replace('_', ' ')}" for task, name in columns) + " |"
    cells = " | ".join(
        "n/a" if scores[task][name] is None else f"{scores[task][name]:.2f}" for task, name in columns
    )
    return "\n".join([header, "|---|" + "---:|" * len(columns), f"| {model} | {cells} |"]) + "\n"
