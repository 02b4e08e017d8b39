"""From start/end logits of every window to one answer string per question.

For each question, candidates from *all* of its windows are pooled: the `n_best` highest start and
end logits among the context tokens of each window give spans (start <= end, at most
`max_answer_length` tokens), scored start_logit + end_logit. Only context tokens compete for the
n best (HF's recipe takes the n best over the whole window, then drops what is outside the context):
question, special and padding tokens cannot crowd the answer out, and a window padded to
`max_length` decodes exactly as the same window padded to its batch's longest. The text is cut from the original
context by character offsets, so it is exactly a substring of the context. With
`allow_no_answer`, the empty answer wins when the best [CLS] score (over windows) beats the best span
by more than `null_threshold`.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from kolong.data.qa_features import QAFeatures
from kolong.data.squad import QAExample


def decode_answers(
    examples: list[QAExample],
    features: QAFeatures,
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best: int = 20,
    max_answer_length: int = 30,
    allow_no_answer: bool = False,
    null_threshold: float = 0.0,
) -> tuple[dict[str, str], dict[str, list[dict]]]:
    """Returns ({id: answer text}, {id: n-best list of {text, score, probability, start, end}}): `score` is the
    start + end logit sum that ranks candidates across windows, `probability` HF's pipeline score
    (`window_probabilities`)."""
    windows_of = defaultdict(list)
    for window, example_index in enumerate(features.example_index):
        windows_of[example_index].append(window)

    predictions: dict[str, str] = {}
    nbest: dict[str, list[dict]] = {}
    for example_index, example in enumerate(examples):
        candidates = []
        null_score = None
        for window in windows_of.get(example_index, []):
            starts, ends = start_logits[window], end_logits[window]
            offsets = features.offsets[window]
            cls_index = 0
            score = float(starts[cls_index] + ends[cls_index])
            null_score = score if null_score is None else max(null_score, score)
            context = np.flatnonzero(offsets[:, 0] >= 0)  # (context tokens,)
            start_probability, end_probability = window_probabilities(starts, ends, context)
            top_starts = context[np.argsort(starts[context], kind="stable")[::-1][:n_best]]
            top_ends = context[np.argsort(ends[context], kind="stable")[::-1][:n_best]]
            for s in top_starts:
                for e in top_ends:
                    if e < s or e - s + 1 > max_answer_length:
                        continue
                    start_char, end_char = int(offsets[s, 0]), int(offsets[e, 1])
                    candidates.append(
                        {
                            "text": example.context[start_char:end_char],
                            "score": float(starts[s] + ends[e]),
                            "probability": float(start_probability[s] * end_probability[e]),
                            "start": int(start_char),
                            "end": int(end_char),
                        }
                    )
        candidates.sort(key=lambda c: c["score"], reverse=True)
        candidates = _unique_spans(candidates)[:n_best]
        best = candidates[0] if candidates else None
        if best is None or (
            allow_no_answer and null_score is not None and null_score > best["score"] + null_threshold
        ):
            predictions[example.id] = ""
        else:
            predictions[example.id] = best["text"]
        nbest[example.id] = candidates
    return predictions, nbest


def window_probabilities(starts: np.ndarray, ends: np.ndarray, context: np.ndarray) -> tuple[np.ndarray, ...]:
    """Start and end probabilities of one window's tokens as HF's question-answering pipeline gives them: a
    softmax over the context tokens and [CLS] (index 0), zero for the question, special and padding tokens.
    (tokens,) each."""
    keep = np.union1d(context, [0])
    probabilities = []
    for logits in (starts, ends):
        chosen = logits[keep].astype(np.float64)
        weights = np.exp(chosen - chosen.max())
        full = np.zeros(len(logits))
        full[keep] = weights / weights.sum()
        probabilities.append(full)
    return tuple(probabilities)


def null_answers(features: QAFeatures, start_logits: np.ndarray, end_logits: np.ndarray) -> dict[int, dict]:
    """{example index: {"score", "logit_score"}} of the empty answer: HF's score, the smallest [CLS] start x
    end probability over the example's windows, and the largest [CLS] logit sum (what `decode_answers`
    compares with the best span)."""
    null: dict[int, dict] = {}
    for window, example_index in enumerate(features.example_index):
        starts, ends = start_logits[window], end_logits[window]
        context = np.flatnonzero(features.offsets[window][:, 0] >= 0)
        start_probability, end_probability = window_probabilities(starts, ends, context)
        score, logits = float(start_probability[0] * end_probability[0]), float(starts[0] + ends[0])
        seen = null.setdefault(example_index, {"score": score, "logit_score": logits})
        seen["score"], seen["logit_score"] = min(seen["score"], score), max(seen["logit_score"], logits)
    return null


def _unique_spans(candidates: list[dict]) -> list[dict]:
    seen = set()
    unique = []
    for candidate in candidates:
        key = (candidate["start"], candidate["end"])
        if key not in seen:
            seen.add(key)
            unique.append(candidate)
    return unique
