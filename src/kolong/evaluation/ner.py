"""NER scores over character IOB2 tags: entity-level F1 (seqeval, strict IOB2) and KLUE's character F1.

- Entity F1: micro precision / recall / F1 of whole entities (start, end and type must all match), with
  seqeval's strict IOB2 mode (an I- tag that does not continue a B- of its type is not an entity).
- Character F1: KLUE's character-level macro F1: the per-label F1 over characters of every IOB2 label
  except O (B-PS, I-PS, ...), averaged over the labels that occur in the gold or predicted tags (on KLUE
  dev, all twelve).

Scores are percentages, as KLUE reports them.
"""

from __future__ import annotations

from collections import Counter


def entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    from seqeval.metrics import f1_score, precision_score, recall_score
    from seqeval.scheme import IOB2

    _check(gold, predicted)
    options = dict(mode="strict", scheme=IOB2, zero_division=0)
    return {
        "entity_precision": 100.0 * float(precision_score(gold, predicted, **options)),
        "entity_recall": 100.0 * float(recall_score(gold, predicted, **options)),
        "entity_f1": 100.0 * float(f1_score(gold, predicted, **options)),
    }


def character_f1(gold: list[list[str]], predicted: list[list[str]]) -> float:
    _check(gold, predicted)
    true_positive, gold_count, predicted_count = Counter(), Counter(), Counter()
    for gold_tags, predicted_tags in zip(gold, predicted, strict=True):
        for g, p in zip(gold_tags, predicted_tags, strict=True):
            gold_count[g] += 1
            predicted_count[p] += 1
            if g == p:
                true_positive[g] += 1
    labels = sorted((set(gold_count) | set(predicted_count)) - {"O"})
    if not labels:
        return 100.0
    scores = []
    for label in labels:
        tp, g, p = true_positive[label], gold_count[label], predicted_count[label]
        scores.append(0.0 if tp == 0 else 2 * tp / (g + p))
    return 100.0 * sum(scores) / len(scores)


def ner_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    scores = entity_scores(gold, predicted)
    scores["char_f1"] = character_f1(gold, predicted)
    return scores


def _check(gold, predicted) -> None:
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    for i, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
