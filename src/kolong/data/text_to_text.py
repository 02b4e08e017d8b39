"""Tasks cast to text for byte models: NSMC and KLUE-NLI labels as words, KLUE-NER as the sentence with
``<entity:TAG>`` markup, KLUE-DP as (index/characters, head, label) tuples (below), KorQuAD as the answer text
generated from question and paragraph (scored by the official metric), and FILEs (or datasets) of input / target pairs; and scoring of generated text
(a generation that is not a valid answer is counted as malformed, never an error).

KLUE-DP cast to text for byte models, as the GBST paper casts it (its section 4.3).

    source: the sentence, a newline, then per eojeol "(index, eojeol, characters, morphemes, POS)"
    target: per eojeol "(index/characters, head, DEPREL)", joined by ", "

Predicting each eojeol's character count with its index is the paper's remedy for under- and
over-generation. Scoring follows the paper: generations are read tuple by tuple in order, with no
realignment, so a parse failure or a missing tuple makes that eojeol (and the ones a shift displaces)
wrong; extra tuples are ignored and counted. Scores are KLUE's UAS / LAS macro F1 and plain UAS / LAS
(a wrong head makes the label wrong), with the counts of parse failures, under- and over-generation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kolong.data import klue
from kolong.data.examples import NLI_LABELS as NLI_CLASSES
from kolong.data.examples import hold_out
from kolong.data.klue import read_klue_nli
from kolong.data.shared import shared_root
from kolong.data.sources import table_rows
from kolong.errors import DataError

TASKS = ("nsmc", "klue-ner", "klue-nli", "klue-dp", "korquad")
NSMC_LABELS = ("부정", "긍정")  # label 0 negative, 1 positive
NLI_LABELS = {"entailment": "함의", "neutral": "중립", "contradiction": "모순"}


@dataclass
class TextPair:
    id: str
    source: str
    target: str
    gold_tags: list[str] | None = None  # KLUE-NER: IOB2 tags of the source's characters
    gold_arcs: tuple[list[int], list[str]] | None = None  # KLUE-DP: each eojeol's head and label
    gold_answers: list[str] | None = None  # KorQuAD: every gold answer text


@dataclass
class Seq2SeqTask:
    name: str
    kind: str  # classification | ner | dp | qa | text
    train: list[TextPair]
    eval: list[TextPair]
    labels: list[str] | None = None  # classification: the label words

    @property
    def main_metric(self) -> str:
        metrics = {
            "classification": "accuracy",
            "ner": "entity_f1",
            "dp": "las",
            "qa": "f1",
            "text": "exact_match",
        }
        return metrics[self.kind]


def _klue_ner_pairs(path: str | None) -> list[TextPair]:
    from kolong.data.klue_ner import read_klue_ner

    return [TextPair(s.id, s.text, s.markup, s.tags) for s in read_klue_ner(path)]


def _klue_dp_pairs(path: str | None) -> list[TextPair]:
    from kolong.data.klue_dp import read_klue_dp

    sentences = read_klue_dp(path or shared_root() / klue.DP_DEV)
    return [TextPair(s.id, dp_source(s), dp_target(s), gold_arcs=(s.heads, s.labels)) for s in sentences]


def _korquad_pairs(path: str | None) -> list[TextPair]:
    """Generative extractive QA: the question and its paragraph in, the answer text out (KorQuAD 1.0 JSON)."""
    from kolong.data.squad import read_squad

    examples = read_squad(path or shared_root() / "korquad" / "KorQuAD_v1.0_dev.shared.json").examples
    return [TextPair(e.id, f"질문: {e.question}\n문맥: {e.context}", e.answers[0].text,
                     gold_answers=[a.text for a in e.answers]) for e in examples if e.answers]  # fmt: skip


def _klue_nli_pairs(path: str | None) -> list[TextPair]:
    examples = read_klue_nli(path or shared_root() / klue.NLI_DEV)
    return [
        TextPair(e.id, f"전제: {e.text}\n가설: {e.pair}", NLI_LABELS[NLI_CLASSES[e.label]]) for e in examples
    ]


def read_text_pairs(path: str | Path, split: str = "train", targets: bool = True) -> list[TextPair]:
    """A .jsonl file of {"input": ..., "target": ...} (or source / target), a .tsv with input and target
    columns, or `split` of a saved or named `datasets` dataset with those columns. Without `targets` (inputs
    to predict for), a row needs its input only, and a missing target reads as ""."""
    path = Path(path)
    rows = table_rows(path, split, (".jsonl", ".tsv"), "input / target pairs", quote_tsv=False)
    pairs = []
    for number, row in rows:
        source = row.get("input", row.get("source")) if isinstance(row, dict) else None
        target = row.get("target", None if targets else "") if isinstance(row, dict) else None
        if not isinstance(source, str) or not isinstance(target, str):
            needed = (
                "input (or source) and target" if targets else "input (or source), and a text target if any"
            )
            raise DataError(f"{path}:{number}: needs text fields {needed}")
        if not source.strip() or (targets and not target.strip()):
            raise DataError(f"{path}:{number}: empty {'input' if not source.strip() else 'target'}")
        pairs.append(TextPair(str(row.get("id", f"{path.name}:{number}")), source, target))
    if not pairs:
        raise DataError(f"{path} holds no input / target pairs")
    return pairs


def load_task(
    task: str, train: str | None = None, eval: str | None = None, seed: int = 42, eval_fraction: float = 0.1,
    limit: int | None = None,
) -> Seq2SeqTask:  # fmt: skip
    """Training and evaluation pairs of a named task or a FILE of input / target pairs."""
    if task == "nsmc":
        from kolong.data.nsmc import read_nsmc

        split = read_nsmc(train, seed=seed, limit=limit)

        def pairs(reviews):
            return [TextPair(r.review_id, r.text, NSMC_LABELS[r.label]) for r in reviews]

        if eval:
            raise DataError("--task nsmc makes its own movie-disjoint evaluation side; drop --eval")
        result = Seq2SeqTask(
            "nsmc", "classification", pairs(split.train), pairs(split.test), list(NSMC_LABELS)
        )
        return result
    if task == "klue-ner":
        reader, kind, labels = _klue_ner_pairs, "ner", None
    elif task == "klue-dp":
        reader, kind, labels = _klue_dp_pairs, "dp", None
    elif task == "korquad":
        reader, kind, labels = _korquad_pairs, "qa", None
    elif task == "klue-nli":
        reader, kind, labels = _klue_nli_pairs, "classification", list(NLI_LABELS.values())
    else:
        reader, kind, labels = read_text_pairs, "text", None
        train = train or task
    training = reader(train)
    evaluation = reader(eval) if eval else None
    if evaluation is None:
        training, evaluation = hold_out(training, eval_fraction, seed)
    if limit is not None:
        training, evaluation = training[:limit], evaluation[: max(1, limit // 4)]
    name = task if task in TASKS else Path(task).stem
    return Seq2SeqTask(name, kind, training, evaluation, labels)


def score_generations(task: Seq2SeqTask, pairs: list[TextPair], generations: list[str]) -> dict:
    """Task metrics (percentages) and the number of malformed generations; never raises on a generation."""
    from kolong.evaluation.korquad import character_f1, exact_match

    if len(pairs) != len(generations):
        raise ValueError(f"{len(pairs)} examples but {len(generations)} generations")
    if task.kind == "ner":
        from kolong.data.klue_ner import parse_prediction
        from kolong.evaluation.ner import ner_scores

        parsed = [parse_prediction(text, pair.source) for pair, text in zip(pairs, generations, strict=True)]
        scores = ner_scores([p.gold_tags for p in pairs], [p.tags for p in parsed])
        scores["malformed"] = sum(not p.well_formed for p in parsed)
        return scores
    if task.kind == "dp":
        return score_dp_generations([p.gold_arcs for p in pairs], generations)
    if task.kind == "qa":  # the official KorQuAD metric over every gold answer
        from kolong.evaluation.korquad import score_questions

        answers = {p.id: text.strip() for p, text in zip(pairs, generations, strict=True)}
        scores = score_questions([(p.id, p.gold_answers, False) for p in pairs], answers)
        return {"exact_match": scores["exact_match"], "f1": scores["f1"], "malformed": 0}
    predictions = [text.strip() for text in generations]
    if task.kind == "classification":
        correct = sum(p == pair.target for p, pair in zip(predictions, pairs, strict=True))
        return {
            "accuracy": 100.0 * correct / max(1, len(pairs)),
            "malformed": sum(p not in task.labels for p in predictions),
        }
    return {
        "exact_match": 100.0
        * sum(exact_match(p, x.target) for p, x in zip(predictions, pairs, strict=True))
        / max(1, len(pairs)),
        "char_f1": 100.0
        * sum(character_f1(p, x.target) for p, x in zip(predictions, pairs, strict=True))
        / max(1, len(pairs)),
        "malformed": 0,
    }


TUPLE = re.compile(r"\((\d+)/(\d+), (\d+), ([A-Z_]+)\)")
MISSING_HEAD, MISSING_LABEL = -1, "?"  # what a missing or unreadable tuple predicts: never right


def dp_source(sentence) -> str:
    parts = [f"({i}, {w}, {len(w)}, {lemma}, {pos})"
             for i, (w, lemma, pos) in enumerate(zip(sentence.words, sentence.lemmas, sentence.pos, strict=True), 1)]  # fmt: skip
    return sentence.text + "\n" + " ".join(parts)


def dp_target(sentence) -> str:
    return ", ".join(f"({i}/{len(w)}, {h}, {label})"
                     for i, (w, h, label) in enumerate(zip(sentence.words, sentence.heads, sentence.labels, strict=True), 1))  # fmt: skip


def parse_dp_generation(text: str, eojeols: int) -> tuple[list[int], list[str], str]:
    """(heads, labels, status) of one generation for a sentence of `eojeols` eojeols.

    status: "ok", "parse-failure" (no tuple read), "under" (fewer tuples), "over" (more: the extra ignored).
    """
    found = [(int(head), label) for _, _, head, label in TUPLE.findall(text)]
    status = "ok"
    if not found:
        status = "parse-failure"
    elif len(found) < eojeols:
        status = "under"
    elif len(found) > eojeols:
        status = "over"
    found = found[:eojeols] + [(MISSING_HEAD, MISSING_LABEL)] * max(0, eojeols - len(found))
    return [h for h, _ in found], [label for _, label in found], status


def score_dp_generations(gold: list[tuple[list[int], list[str]]], generations: list[str]) -> dict:
    """KLUE's macro F1s, plain UAS / LAS and the generation problems, over every gold eojeol."""
    from kolong.data.klue_dp import DP_LABEL_SET
    from kolong.evaluation import klue

    heads, labels, statuses = [], [], []
    for (gold_heads, _), text in zip(gold, generations, strict=True):
        predicted_heads, predicted_labels, status = parse_dp_generation(text, len(gold_heads))
        heads.append(predicted_heads)
        # an unknown label cannot be scored by KLUE's pooled LAS: it is wrong, like a missing one
        labels.append([label if label in DP_LABEL_SET else None for label in predicted_labels])
        statuses.append(status)
    gold_heads = [h for h, _ in gold]
    gold_labels = [labels_ for _, labels_ in gold]
    arcs = [(h, g, lp, lg) for row in zip(heads, gold_heads, labels, gold_labels, strict=True)
            for h, g, lp, lg in zip(*row, strict=True)]  # fmt: skip
    return {
        "uas_macro_f1": klue.dp_uas_macro_f1(heads, gold_heads),
        "las_macro_f1": klue.dp_las_macro_f1(heads, gold_heads, labels, gold_labels),
        "uas": 100.0 * sum(h == g for h, g, _, _ in arcs) / max(1, len(arcs)),
        "las": 100.0 * sum(h == g and lp == lg for h, g, lp, lg in arcs) / max(1, len(arcs)),
        "parse_failures": statuses.count("parse-failure"),
        "under_generation": statuses.count("under"),
        "over_generation": statuses.count("over"),
        "malformed": len(statuses) - statuses.count("ok"),
    }
