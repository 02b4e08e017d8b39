"""KLUE-DP cast to text for byte models, as the GBST paper casts it (its section 4.3).

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
