"""KLUE's metrics exactly as KLUE-baseline computes them (`klue_baseline/metrics/functional.py`).

Each function takes plain Python sequences and returns a percentage. Where the baseline's code and its
docstrings or paper disagree, the code wins (it produced the published numbers), and the quirk is named:

- YNAT: macro F1 over the 7 topics (scikit-learn `f1_score(average="macro")`).
- NLI: accuracy.
- STS: Pearson r of the real-valued scores; F1 of "similar" (score >= 3) as a binary label.
- NER entity: seqeval strict IOB2, macro over entity types, with every sentence's tags joined into ONE
  sequence (as the baseline flattens them: an entity cut by a sentence end could join the next one's I-).
- NER character: scikit-learn macro F1 over the character tags, over *every* label of the label list,
  O included (the baseline's docstring says "except O", its code passes every label index), and a label
  absent from both gold and predictions scores 1 (`zero_division=True`).
- DP UAS: macro F1 with the head indices as classes, over eojeols whose gold head is not -1 (padding).
- DP LAS: macro F1 over DEPREL labels, where the labels from index 15 of KLUE's 38-label list (VP_CMP,
  ...) are pooled into one "others" class and an eojeol with a wrong head counts as a wrong label.
- MRC: EM and ROUGE-W (longest common *substring*, F1 with beta = 1) after KLUE's normalisation, best over
  the gold answers, "" the gold of unanswerable questions. KLUE's normalisation lowercases, deletes ASCII
  punctuation and collapses spaces; its regex for quotes and brackets ([...] followed by literal "()‘’")
  almost never matches, so 《》〈〉‘’ stay (KorQuAD's normalisation removes them). A question with no
  prediction: KLUE-baseline's training metric fails on it and its evaluation script skips it; here it is
  counted as wrong (`missing="wrong"`, the default, scores that cannot be raised by predicting less) or
  skipped (`missing="skip"`, the script's numbers).
- RE: micro F1 over the labels other than no_relation; AUPRC: the mean over the classes of the area under
  each class's one-vs-rest precision-recall curve (`precision_recall_curve` + `auc`), x 100.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from difflib import SequenceMatcher

import numpy as np

# KLUE-DP's DEPREL labels in KLUE-baseline's order (klue_baseline/data/klue_dp.py): from index 15 on
# they are pooled as "others" by the LAS metric.
DP_LABELS = (
    "NP", "NP_AJT", "VP", "NP_SBJ", "VP_MOD", "NP_OBJ", "AP", "NP_CNJ", "NP_MOD", "VNP", "DP", "VP_AJT",
    "VNP_MOD", "NP_CMP", "VP_SBJ", "VP_CMP", "VP_OBJ", "VNP_CMP", "AP_MOD", "X_AJT", "VP_CNJ", "VNP_AJT", "IP",
    "X", "X_SBJ", "VNP_OBJ", "VNP_SBJ", "X_OBJ", "AP_AJT", "L", "X_MOD", "X_CNJ", "VNP_CNJ", "X_CMP", "AP_CMP",
    "AP_SBJ", "R", "NP_SVJ",
)  # fmt: skip
DP_OTHERS_FROM = 15
OTHERS, WRONG_HEAD = -3, -2  # the baseline's class numbers for pooled labels and labels of wrong heads
NER_LABELS = (
    "B-DT",
    "I-DT",
    "B-LC",
    "I-LC",
    "B-OG",
    "I-OG",
    "B-PS",
    "I-PS",
    "B-QT",
    "I-QT",
    "B-TI",
    "I-TI",
    "O",
)
_KLUE_MRC_PATTERN = re.compile(r"[\'\"《》<>〈〉]\(\)\‘\’")  # KLUE's pattern, as written
_ASCII_PUNCTUATION = set(string.punctuation)


def _check_lengths(what: str, predictions: Sequence, labels: Sequence) -> None:
    if len(predictions) != len(labels):
        raise ValueError(f"{what}: {len(predictions)} predictions but {len(labels)} gold labels")
    if not labels:
        raise ValueError(f"{what}: nothing to score")


def ynat_macro_f1(predictions: Sequence, labels: Sequence) -> float:
    from sklearn.metrics import f1_score

    _check_lengths("ynat", predictions, labels)
    # the classes of KLUE's average: every topic in the gold or the predictions (sklearn's union)
    topics = {
        t: k for k, t in enumerate(dict.fromkeys([*labels, *(p for p in predictions if p is not None)]))
    }
    # None (a prediction that is no topic) is wrong and no class: a miss of its gold topic
    predicted = [-1 if p is None else topics[p] for p in predictions]
    gold = [topics[t] for t in labels]
    return 100.0 * float(
        f1_score(gold, predicted, labels=list(topics.values()), average="macro", zero_division=0)
    )


def nli_accuracy(predictions: Sequence, labels: Sequence) -> float:
    _check_lengths("nli", predictions, labels)
    return 100.0 * sum(p == g for p, g in zip(predictions, labels, strict=True)) / len(labels)


def sts_pearson(predictions: Sequence[float], labels: Sequence[float]) -> float:
    from scipy.stats import pearsonr

    _check_lengths("sts", predictions, labels)
    return 100.0 * float(pearsonr(predictions, labels)[0])


def sts_f1(predictions: Sequence[float], labels: Sequence[float], threshold: float = 3.0) -> float:
    from sklearn.metrics import f1_score

    _check_lengths("sts", predictions, labels)
    binary = [[int(v >= threshold) for v in values] for values in (labels, predictions)]
    return 100.0 * float(f1_score(binary[0], binary[1], average="binary"))


def _check_tags(what: str, predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]) -> None:
    _check_lengths(what, predicted, gold)
    for i, (p, g) in enumerate(zip(predicted, gold, strict=True)):
        if len(p) != len(g):
            raise ValueError(f"{what}: sentence {i} has {len(p)} predicted tags but {len(g)} gold tags")


def _flat(what: str, predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]) -> tuple[list, list]:
    _check_tags(what, predicted, gold)
    return [t for tags in predicted for t in tags], [t for tags in gold for t in tags]


def ner_entity_macro_f1(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]) -> float:
    """seqeval's strict IOB2 macro F1 over the sentences as one flat sequence, as KLUE-baseline scores it."""
    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB2

    _check_tags("ner", predicted, gold)
    runs_predicted, runs_gold = _entity_runs(predicted, gold)
    return 100.0 * float(f1_score(runs_gold, runs_predicted, average="macro", mode="strict", scheme=IOB2))


def _entity_runs(predicted, gold) -> tuple[list[list[str]], list[list[str]]]:
    """The sentences joined into the shortest runs that no entity crosses, in both tag lists.

    In the flat sequence an I- tag at a sentence's start continues the entity before it; seqeval copies the
    rest of its sequence at every entity, which is quadratic in one flat sequence (slow for KLUE-NER's 5,000
    dev sentences). A sentence that starts with no I- tag in either list starts a run: strict IOB2 begins
    entities at B- tags only, so every run holds the flat sequence's entities (tested against it)."""
    runs_predicted: list[list[str]] = []
    runs_gold: list[list[str]] = []
    for tags_predicted, tags_gold in zip(predicted, gold, strict=True):
        continues = any(tags and str(tags[0]).startswith("I") for tags in (tags_predicted, tags_gold))
        if runs_gold and (continues or not tags_gold):
            runs_predicted[-1].extend(tags_predicted)
            runs_gold[-1].extend(tags_gold)
        else:
            runs_predicted.append(list(tags_predicted))
            runs_gold.append(list(tags_gold))
    return runs_predicted or [[]], runs_gold or [[]]


def ner_char_macro_f1(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]],
                      labels: Sequence[str] = NER_LABELS) -> float:  # fmt: skip
    from sklearn.metrics import f1_score

    flat_predicted, flat_gold = _flat("ner", predicted, gold)
    unknown = sorted((set(flat_predicted) | set(flat_gold)) - set(labels))
    if unknown:
        raise ValueError(f"ner: tag {unknown[0]!r} is not in the label list {list(labels)}")
    return 100.0 * float(
        f1_score(flat_gold, flat_predicted, labels=list(labels), average="macro", zero_division=1)
    )


def ner_counts(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]],
               labels: Sequence[str] = NER_LABELS) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per sentence, (true positives, predicted, gold) of each entity type and of each character label:
    (sentences, types, 3) and (sentences, labels, 3). KLUE's two macro F1s are functions of their sums
    (`ner_f1_from_counts`), so a bootstrap sums resampled rows instead of rescoring. Entities are seqeval's
    strict IOB2 entities of the flat sequence (`_entity_runs`), each counted in the sentence it starts in."""
    from seqeval.scheme import IOB2, Entities

    _check_tags("ner", predicted, gold)
    runs_predicted, runs_gold = _entity_runs(predicted, gold)
    # runs and sentences tile the same flat sequence: an entity's flat start finds its sentence
    run_starts = np.cumsum([0] + [len(run) for run in runs_gold])
    sentence_starts = np.cumsum([0] + [len(tags) for tags in gold])[:-1]
    found = [{(int(run_starts[e.sent_id]) + e.start, e.end - e.start, e.tag)
              for run in Entities(runs, IOB2).entities for e in run}
             for runs in (runs_predicted, runs_gold)]  # fmt: skip
    types = sorted({tag for entities in found for _, _, tag in entities})
    entity_counts = np.zeros((len(predicted), len(types), 3))
    for column, entities in ((0, found[0] & found[1]), (1, found[0]), (2, found[1])):
        for start, _, tag in entities:
            sentence = int(np.searchsorted(sentence_starts, start, side="right")) - 1
            entity_counts[sentence, types.index(tag), column] += 1
    char_counts = np.zeros((len(predicted), len(labels), 3))
    index = {label: k for k, label in enumerate(labels)}
    for sentence, (tags_predicted, tags_gold) in enumerate(zip(predicted, gold, strict=True)):
        for p, g in zip(tags_predicted, tags_gold, strict=True):
            if p in index:
                char_counts[sentence, index[p], 1] += 1
                char_counts[sentence, index[p], 0] += p == g
            if g in index:
                char_counts[sentence, index[g], 2] += 1
    return entity_counts, char_counts


def ner_f1_from_counts(totals: np.ndarray, empty: float) -> float:
    """Macro F1 (x 100) from summed (true positives, predicted, gold) per class: 2 tp / (predicted + gold) per
    class; a class with neither counts `empty` (seqeval leaves it out: nan; scikit-learn's zero_division=1: 1)."""
    tp, predicted, gold = totals[:, 0], totals[:, 1], totals[:, 2]
    present = predicted + gold > 0
    scores = np.where(present, 2 * tp / np.maximum(predicted + gold, 1), empty)
    scores = scores[~np.isnan(scores)]
    return 100.0 * float(scores.mean()) if scores.size else float("nan")  # no class at all: as seqeval


def _dp_arrays(heads_predicted, heads_gold, types_predicted=None, types_gold=None):
    """Flatten per-sentence lists, dropping the eojeols whose gold head is -1 (padding, special tokens)."""
    _check_lengths("dp", heads_predicted, heads_gold)
    rows = []
    for i in range(len(heads_gold)):
        columns = [heads_predicted[i], heads_gold[i]]
        if types_gold is not None:
            columns += [types_predicted[i], types_gold[i]]
        if len({len(c) for c in columns}) != 1:
            raise ValueError(f"dp: sentence {i} has heads and labels of different lengths")
        rows += [values for values in zip(*columns, strict=True) if values[1] != -1]
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in range(4)]


def dp_uas_macro_f1(heads_predicted: Sequence[Sequence[int]], heads_gold: Sequence[Sequence[int]]) -> float:
    from sklearn.metrics import f1_score

    predicted, gold = _dp_arrays(heads_predicted, heads_gold)[:2]
    return 100.0 * float(f1_score(gold, predicted, average="macro"))


def dp_las_macro_f1(heads_predicted: Sequence[Sequence[int]], heads_gold: Sequence[Sequence[int]],
                    types_predicted: Sequence[Sequence], types_gold: Sequence[Sequence]) -> float:  # fmt: skip
    """Labels are DEPREL names (or their indices in DP_LABELS); a predicted None (a generation's unreadable
    label) is wrong, like a label at a wrong head."""
    from sklearn.metrics import f1_score

    _check_lengths("dp", types_predicted, types_gold)
    heads_p, heads_g, types_p, types_g = _dp_arrays(heads_predicted, heads_gold, types_predicted, types_gold)
    pooled_gold = [_pooled(t) for t in types_g]
    pooled_predicted = [
        WRONG_HEAD if head != gold_head or t is None else _pooled(t)
        for head, gold_head, t in zip(heads_p, heads_g, types_p, strict=True)
    ]
    return 100.0 * float(f1_score(pooled_gold, pooled_predicted, average="macro"))


def _pooled(label) -> int:
    if isinstance(label, str) and label not in DP_LABELS:
        raise ValueError(f"dp: label {label!r} is not one of KLUE-DP's {len(DP_LABELS)} DEPREL labels")
    index = DP_LABELS.index(label) if isinstance(label, str) else int(label)
    if not 0 <= index < len(DP_LABELS):
        raise ValueError(f"dp: label index {label!r} is outside KLUE-DP's {len(DP_LABELS)} DEPREL labels")
    return OTHERS if index >= DP_OTHERS_FROM else index


def normalize_klue_mrc(answer: str) -> str:
    answer = _KLUE_MRC_PATTERN.sub(" ", answer.lower())
    answer = "".join(c for c in answer if c not in _ASCII_PUNCTUATION)
    return " ".join(answer.split())


def rouge_w(prediction: str, gold: str) -> float:
    """KLUE's character ROUGE-W of two normalised strings: F1 of the longest common substring."""
    if gold == "":
        return float(prediction == gold)
    longest = (
        SequenceMatcher(None, prediction, gold).find_longest_match(0, len(prediction), 0, len(gold)).size
    )
    precision = longest / len(prediction) if prediction else 0.0
    recall = longest / len(gold)
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def mrc_scores(
    predictions: Mapping[str, str], gold: Mapping[str, Sequence[str]], missing: str = "wrong"
) -> dict:
    """{"exact_match", "rouge_w", "questions", "missing"} over the questions of `gold` ({id: answers})."""
    if missing not in ("wrong", "skip"):
        raise ValueError(f"missing={missing!r}: choose wrong or skip")
    exact, rouge, absent = [], [], 0
    for question, answers in gold.items():
        if question not in predictions:
            absent += 1
            if missing == "skip":
                continue
            exact.append(0.0)
            rouge.append(0.0)
            continue
        prediction = normalize_klue_mrc(predictions[question])
        truths = [normalize_klue_mrc(a) for a in answers] or [""]
        exact.append(max(float(prediction == t) for t in truths))
        rouge.append(max(rouge_w(prediction, t) for t in truths))
    count = len(exact)
    return {"exact_match": 100.0 * sum(exact) / count if count else 0.0,
            "rouge_w": 100.0 * sum(rouge) / count if count else 0.0, "questions": count, "missing": absent}  # fmt: skip


def re_micro_f1(predictions: Sequence[int], labels: Sequence[int], label_names: Sequence[str]) -> float:
    from sklearn.metrics import f1_score

    _check_lengths("re", predictions, labels)
    if "no_relation" not in label_names:
        raise ValueError("re: the label list has no 'no_relation'")
    kept = [i for i, name in enumerate(label_names) if name != "no_relation"]
    return 100.0 * float(f1_score(list(labels), list(predictions), average="micro", labels=kept))


def re_auprc(probabilities: Sequence[Sequence[float]], labels: Sequence[int]) -> float:
    from sklearn.metrics import auc, precision_recall_curve

    _check_lengths("re", probabilities, labels)
    probs = np.asarray(probabilities, dtype=float)
    one_hot = np.eye(probs.shape[1])[np.asarray(labels)]
    areas = []
    for c in range(probs.shape[1]):
        precision, recall, _ = precision_recall_curve(one_hot[:, c], probs[:, c])
        areas.append(auc(recall, precision))
    return 100.0 * float(np.mean(areas))
