"""SQuAD v1 / KorQuAD 1.0 JSON (and SQuAD v2-style unanswerable questions): reading, validating, writing.

Layout: {"version": ..., "data": [{"title": ..., "paragraphs": [{"context": ..., "qas": [{"id", "question",
"answers": [{"text", "answer_start"}], "is_impossible"?}]}]}]}.

Structural faults (malformed JSON, a missing field, an empty context) are errors that name the file and
the place. Faults of single examples (an answer that is not at its `answer_start`, an answerable question
without answers) follow `on_bad_example`: "error" stops at the first, "skip" drops them and reports their
count and ids.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from kolong.data.sources import dataset_rows, load_json
from kolong.errors import DataError
from kolong.io import atomic_write_json

ON_BAD_EXAMPLE = ("error", "skip")


@dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset into the context

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclass
class QAExample:
    id: str
    question: str
    context: str
    answers: list[Answer]
    is_impossible: bool = False
    title: str = ""
    article: int = 0  # index of the article in the file (for splitting by article)


@dataclass
class SquadDataset:
    path: str
    version: str
    examples: list[QAExample]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (id, reason)
    raw: dict = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.examples)

    def gold(self) -> list[tuple[str, list[str], bool]]:
        return gold_answers(self.examples)


def gold_answers(examples: list[QAExample]) -> list[tuple[str, list[str], bool]]:
    """(id, gold texts, is_impossible) per example: what the metrics score against."""
    return [(e.id, [a.text for a in e.answers], e.is_impossible) for e in examples]


def _require(mapping, key: str, kind, where: str):
    if not isinstance(mapping, dict) or key not in mapping:
        raise DataError(f"{where}: missing field {key!r}")
    value = mapping[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DataError(f"{where}.{key}: expected {names}, got {type(value).__name__}")
    return value


def parse_squad(
    payload, source: str = "<data>", on_bad_example: str = "error", questions_only: bool = False
) -> SquadDataset:
    """Validate SQuAD JSON; `questions_only` (prediction): answers are neither needed nor read."""
    if on_bad_example not in ON_BAD_EXAMPLE:
        raise ValueError(f"on_bad_example must be one of {ON_BAD_EXAMPLE}, got {on_bad_example!r}")
    articles = _require(payload, "data", list, source)
    examples: list[QAExample] = []
    skipped: list[tuple[str, str]] = []
    seen: set[str] = set()
    for a, article in enumerate(articles):
        where_article = f"{source}: data[{a}]"
        paragraphs = _require(article, "paragraphs", list, where_article)
        title = article.get("title", "") if isinstance(article, dict) else ""
        for p, paragraph in enumerate(paragraphs):
            where = f"{where_article}.paragraphs[{p}]"
            context = _require(paragraph, "context", str, where)
            if not context.strip():
                raise DataError(f"{where}: empty context")
            for q, qa in enumerate(_require(paragraph, "qas", list, where)):
                where_qa = f"{where}.qas[{q}]"
                question_id = str(_require(qa, "id", (str, int), where_qa))
                question = _require(qa, "question", str, f"{where_qa} (id {question_id})")
                if question_id in seen:
                    raise DataError(f"{where_qa}: duplicate question id {question_id!r}")
                seen.add(question_id)
                if questions_only:
                    examples.append(QAExample(question_id, question, context, [], False, title, a))
                    continue
                problem, answers, impossible = _read_answers(qa, context, f"{where_qa} (id {question_id})")
                if problem:
                    if on_bad_example == "error":
                        raise DataError(f"{problem} (use --on-bad-example skip to drop such examples)")
                    skipped.append((question_id, problem))
                    continue
                examples.append(QAExample(question_id, question, context, answers, impossible, title, a))
    if not examples:  # nothing to train on, predict or score: said here, not as a traceback further on
        why = f"every one of its {len(skipped)} questions was skipped (first: {skipped[0][1]})" if skipped else (
            "it holds no questions")  # fmt: skip
        raise DataError(f"{source}: {why}")
    version = str(payload.get("version", "")) if isinstance(payload, dict) else ""
    return SquadDataset(source, version, examples, skipped, payload)


def _read_answers(qa: dict, context: str, where: str) -> tuple[str | None, list[Answer], bool]:
    impossible = bool(qa.get("is_impossible", False))
    raw_answers = qa.get("answers", [])
    if not isinstance(raw_answers, list):
        raise DataError(f"{where}.answers: expected list, got {type(raw_answers).__name__}")
    if impossible:
        return None, [], True
    if not raw_answers:
        return f"{where}: answerable question without answers", [], False
    answers = []
    for k, raw in enumerate(raw_answers):
        text = _require(raw, "text", str, f"{where}.answers[{k}]")
        start = _require(raw, "answer_start", int, f"{where}.answers[{k}]")
        if not text:
            return f"{where}.answers[{k}]: empty answer text", [], False
        if start < 0 or context[start : start + len(text)] != text:
            found = context[max(start, 0) : max(start, 0) + len(text)]
            return (
                f"{where}.answers[{k}]: answer {text!r} is not at answer_start {start} (the context has {found!r} there)",
                [],
                False,
            )
        answers.append(Answer(text, start))
    return None, answers, False


def read_squad(
    path: str | Path, on_bad_example: str = "error", split: str = "train", questions_only: bool = False
) -> SquadDataset:
    """Read and validate a SQuAD/KorQuAD JSON file, or `split` of a saved or named `datasets` dataset in
    HF's squad layout (id, title, context, question, answers {text: [...], answer_start: [...]}).
    `questions_only`: the answers are not needed (prediction) and not read."""
    if Path(path).is_file():
        return parse_squad(load_json(path), str(path), on_bad_example, questions_only)
    payload = _squad_payload(dataset_rows(path, split), str(path), questions_only)
    return parse_squad(payload, str(path), on_bad_example, questions_only)


def _squad_payload(rows: list[tuple[int, dict]], source: str, questions_only: bool = False) -> dict:
    """Dataset rows in SQuAD JSON form (one paragraph per row), so parse_squad validates them as a file."""
    articles = []
    for number, row in rows:
        answers = row.get("answers") or {}
        if questions_only and not answers:
            answers = {"text": [], "answer_start": []}
        if not isinstance(answers, dict) or not {"text", "answer_start"} <= set(answers):
            raise DataError(f"{source} row {number}: needs answers {{text: [...], answer_start: [...]}}")
        qa = {"id": str(row.get("id", number)), "question": row.get("question"),
              "answers": [{"text": t, "answer_start": s} for t, s in zip(answers["text"], answers["answer_start"], strict=False)]}  # fmt: skip
        if not qa["answers"]:
            qa["is_impossible"] = True
        articles.append(
            {"title": row.get("title", ""), "paragraphs": [{"context": row.get("context"), "qas": [qa]}]}
        )
    return {"version": source, "data": articles}


def to_squad_json(examples: list[QAExample], version: str = "kolong") -> dict:
    """Group examples back into articles and paragraphs (by article index and context)."""
    articles: dict[int, dict] = {}
    paragraphs: dict[tuple[int, str], dict] = {}
    for example in examples:
        article = articles.setdefault(example.article, {"title": example.title, "paragraphs": []})
        key = (example.article, example.context)
        if key not in paragraphs:
            paragraphs[key] = {"context": example.context, "qas": []}
            article["paragraphs"].append(paragraphs[key])
        qa = {
            "id": example.id,
            "question": example.question,
            "answers": [{"text": a.text, "answer_start": a.start} for a in example.answers],
        }
        if example.is_impossible:
            qa["is_impossible"] = True
        paragraphs[key]["qas"].append(qa)
    return {"version": version, "data": list(articles.values())}


def write_squad(examples: list[QAExample], path: str | Path, version: str = "kolong") -> Path:
    return atomic_write_json(path, to_squad_json(examples, version))


def build_long_documents(dataset: SquadDataset, separator: str = "\n") -> list[QAExample]:
    """Join each article's paragraphs into one context; answer offsets shifted, ids kept.

    Paragraphs are joined in file order with `separator`; a paragraph's answers move by the length of
    everything before it. Every answer is re-checked against the joined context.
    """
    contexts: dict[int, list[str]] = {}
    for example in dataset.examples:
        paragraphs = contexts.setdefault(example.article, [])
        if example.context not in paragraphs:
            paragraphs.append(example.context)
    # Every paragraph of the article counts, including those whose questions were all skipped.
    for a, article in enumerate(dataset.raw.get("data", [])):
        if a in contexts:
            contexts[a] = [p["context"] for p in article["paragraphs"]]

    offsets: dict[tuple[int, str], int] = {}
    joined: dict[int, str] = {}
    for article, paragraphs in contexts.items():
        position = 0
        for paragraph in paragraphs:
            offsets.setdefault((article, paragraph), position)
            position += len(paragraph) + len(separator)
        joined[article] = separator.join(paragraphs)

    long_examples = []
    for example in dataset.examples:
        shift = offsets[(example.article, example.context)]
        context = joined[example.article]
        answers = [Answer(a.text, a.start + shift) for a in example.answers]
        for answer in answers:
            assert context[answer.start : answer.end] == answer.text, example.id
        long_examples.append(
            QAExample(
                example.id,
                example.question,
                context,
                answers,
                example.is_impossible,
                example.title,
                example.article,
            )
        )
    return long_examples


def split_by_article(examples: list[QAExample], eval_fraction: float, seed: int):
    """(train, evaluation) examples with whole articles on each side: a share `eval_fraction` of the articles
    (at least one), drawn with `seed`, goes to evaluation, so no context is seen on both sides."""
    articles = sorted({e.article for e in examples})
    random.Random(seed).shuffle(articles)
    eval_count = max(1, round(len(articles) * eval_fraction))
    eval_articles = set(articles[:eval_count])
    train = [e for e in examples if e.article not in eval_articles]
    evaluation = [e for e in examples if e.article in eval_articles]
    return train, evaluation
