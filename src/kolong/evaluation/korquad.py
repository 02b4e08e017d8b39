"""Official KorQuAD 1.0 metric, and KLUE-MRC's EM / ROUGE-W, on SQuAD-format data.

KorQuAD 1.0 (the official `evaluate-v1.0.py`, reimplemented):
    normalise(s) = collapse_whitespace(drop_ascii_punctuation(lower(s with each of ' " 《 》 < > 〈 〉 ( ) ‘ ’
                   replaced by a space)))
    EM = normalise(prediction) == normalise(gold)
    F1 = F1 over the multiset of the non-space characters of the normalised strings
    Each question scores the max over its gold answers; a question without a prediction scores 0;
    both are averaged over all questions and reported x 100.

KLUE-MRC, exactly as KLUE-baseline computes it (`kolong.evaluation.klue`, docs/klue.md):
    normalise_klue(s) = collapse_whitespace(drop_ascii_punctuation(lower(s)))   (brackets such as 《》 stay)
    EM       = normalise_klue(prediction) == normalise_klue(gold)
    ROUGE-W  = F1 of the longest common *substring* (contiguous) of the normalised strings, spaces included:
               P = L / len(prediction), R = L / len(gold).
    Unanswerable questions (SQuAD v2 style) score 1 when the prediction is empty, else 0. A question without
    a prediction scores 0 here (KLUE's script skips it: `kolong evaluate klue mrc --missing skip`).
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Iterable, Mapping

_REPLACED_BY_SPACE = str.maketrans({c: " " for c in "'\"《》<>〈〉()‘’"})
_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    text = text.translate(_REPLACED_BY_SPACE).lower().translate(_ASCII_PUNCTUATION)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def _characters(text: str) -> list[str]:
    return [c for c in normalize_answer(text) if c != " "]


def character_f1(prediction: str, gold: str) -> float:
    predicted, expected = _characters(prediction), _characters(gold)
    same = sum((Counter(predicted) & Counter(expected)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


def _klue_exact_match(prediction: str, gold: str) -> float:
    from kolong.evaluation.klue import normalize_klue_mrc

    return float(normalize_klue_mrc(prediction) == normalize_klue_mrc(gold))


def _klue_rouge_w(prediction: str, gold: str) -> float:
    from kolong.evaluation.klue import normalize_klue_mrc, rouge_w

    return rouge_w(normalize_klue_mrc(prediction), normalize_klue_mrc(gold))


def _best(metric, prediction: str, golds: Iterable[str]) -> float:
    return max((metric(prediction, gold) for gold in golds), default=0.0)


def question_scores(
    questions: Iterable[tuple[str, list[str], bool]], predictions: Mapping[str, str], metric: str = "korquad"
) -> dict:
    """Per-question scores in [0, 1] (a missing prediction scores 0): the units of a bootstrap interval.

    Returns {"exact_match": [...], "f1" or "rouge_w": [...], "missing": [question ids without a prediction]}.
    """
    if metric not in ("korquad", "klue-mrc"):
        raise ValueError(f"unknown metric {metric!r}; choose korquad or klue-mrc")
    if metric == "korquad":
        same, second_name, second, normalize = exact_match, "f1", character_f1, normalize_answer
    else:  # KLUE-baseline's definitions (kolong.evaluation.klue)
        from kolong.evaluation.klue import normalize_klue_mrc as normalize

        same, second_name, second = _klue_exact_match, "rouge_w", _klue_rouge_w
    exact, other, missing = [], [], []
    for question_id, golds, impossible in questions:
        if question_id not in predictions:
            missing.append(question_id)
            exact.append(0.0)
            other.append(0.0)
            continue
        prediction = predictions[question_id]
        if impossible or not golds:
            hit = float(normalize(prediction) == "")
            exact.append(hit)
            other.append(hit)
            continue
        exact.append(_best(same, prediction, golds))
        other.append(_best(second, prediction, golds))
    return {"exact_match": exact, second_name: other, "missing": missing}


def score_questions(
    questions: Iterable[tuple[str, list[str], bool]], predictions: Mapping[str, str], metric: str = "korquad"
) -> dict:
    """Score (id, gold texts, is_impossible) triples against {id: predicted text}.

    Returns percentages: {"exact_match", "f1"} for korquad, {"exact_match", "rouge_w"} for klue-mrc,
    plus "total" and "missing" (questions without a prediction, scored 0).
    """
    return _percentages(question_scores(questions, predictions, metric))


def _percentages(scores: dict) -> dict:
    """question_scores' lists -> the mean of each in percent, "total" and "missing" (a count)."""
    scores = dict(scores)
    missing = len(scores.pop("missing"))
    total = len(scores["exact_match"])
    scale = 100.0 / total if total else 0.0
    return {
        **{name: sum(values) * scale for name, values in scores.items()},
        "total": total,
        "missing": missing,
    }


def score_intervals(
    questions: Iterable[tuple[str, list[str], bool]],
    predictions: Mapping[str, str],
    metric: str = "korquad",
    seed: int = 0,
) -> dict:
    """Bootstrap 95% intervals over questions, in percent: {"exact_match": {mean, low, high, n}, "f1": ...}."""
    from kolong.evaluation.bootstrap import interval

    scores = question_scores(questions, predictions, metric)
    scores.pop("missing")
    return {name: interval([100.0 * v for v in values], seed=seed) for name, values in scores.items()}


def read_predictions(path) -> dict[str, str]:
    """A predictions file as the official script reads it: JSON {question id: answer text}."""
    from kolong.data.sources import load_json
    from kolong.errors import DataError

    payload = load_json(path)
    if not isinstance(payload, dict) or not all(isinstance(v, str) for v in payload.values()):
        raise DataError(f"{path}: predictions must be a JSON object {{question id: answer text}}")
    return payload


def unscored_predictions(predictions: dict, questions, predictions_path, data) -> list[str]:
    """The prediction ids that answer no question (warned about); a file that answers none is refused: an
    empty one, or one for another data file, would score 0 on every question without saying why."""
    from kolong.errors import DataError, warn

    questions = list(questions)
    unscored = sorted(set(predictions) - set(questions))
    if not predictions:
        raise DataError(f"{predictions_path} holds no prediction")
    if len(unscored) == len(predictions):
        raise DataError(
            f"none of the {len(predictions)} predictions of {predictions_path} answers a question of {data} "
            f"(prediction ids such as {unscored[0]!r}, question ids such as {questions[0]!r}): "
            "predictions of another file?"
        )
    if unscored:
        warn(
            f"{len(unscored)} of {len(predictions)} predictions answer no question of {data} and are not "
            f"scored (e.g. {', '.join(map(repr, unscored[:3]))})"
        )
    return unscored


def evaluate_files(data, predictions_path, metric: str = "korquad", on_bad_example: str = "error") -> dict:
    """`kolong evaluate qa`: score a predictions file against a SQuAD/KorQuAD file (no torch needed)."""
    from kolong.data.squad import read_squad

    dataset = read_squad(data, on_bad_example)
    gold = dataset.gold()  # never empty: read_squad refuses a file with no question
    predictions = read_predictions(predictions_path)
    unscored = unscored_predictions(
        predictions, [question_id for question_id, *_ in gold], predictions_path, data
    )
    per_question = question_scores(gold, predictions, metric)
    unanswered = per_question["missing"]
    if unanswered:  # the official script warns of each; one line with the count and the first ids here
        from kolong.errors import warn

        warn(
            f"{len(unanswered)} of {len(gold)} questions of {data} have no prediction in {predictions_path} "
            f"and score 0 (e.g. {', '.join(map(repr, unanswered[:3]))})"
        )
    scores = _percentages(per_question)
    scores["skipped_examples"] = len(dataset.skipped)
    scores["unscored_predictions"] = len(unscored)
    return scores
