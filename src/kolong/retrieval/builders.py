"""Korean long-document retrieval tasks built offline from the shared data, each reproducible from a seed.

- `passkey` and `needle` in LongEmbed's sense (Zhu et al., 2024), in Korean: a haystack of real Korean text
  (KorQuAD contexts, or KoNLPy's bills and Constitution) cut to a length in tokens of the model's tokenizer,
  one target sentence inserted at a controlled depth, one query per document; each length is its own pool of
  candidates. passkey: "<name>의 비밀번호는 <number>입니다." asked as "<name>의 비밀번호는 무엇입니까?";
  needle: the sentence of a KorQuAD paragraph that holds a question's answer, asked by that question.
- `paraphrase`: the inserted sentence is one side of a KorSTS pair scored >= 4 (or a KLUE-NLI entailment) and
  the query the other side, so the words differ and lexical matching is no free win.
- `articles`: a KorQuAD question against whole articles, the article holding its answer relevant; the
  evaluation articles are drawn by seed, and `--pool all` adds every other shared article as a distractor,
  `--pool paragraphs` ranks the paragraphs of the evaluation articles instead (same-article distractors).

- `context` (ConTEB's idea, in Korean): the paragraphs of every article are the candidates, and in every paragraph
  but an article's first, each mention of the article's title entity is replaced by the pronoun `그` (`masked_title`:
  the title without its parenthesised disambiguator, underscores as spaces; `그` takes the same particles, so
  `김정남은` reads `그는`); a question of a held-out article keeps the entity, so only a reader that knows which
  article a paragraph belongs to can match them. `mask=False` builds the same task unmasked, its control.

- `multi-needle`: two or three sentence pairs scored >= 4.5 (KorSTS dev and test, KLUE-STS dev) put at different
  depths of one haystack document; the query joins their other sides, so evidence scattered through the document
  decides; each such document has a distractor in its pool that holds all but one of them.

The haystack never contains text of the articles the targets come from.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kolong.data.shared import shared_file
from kolong.errors import ConfigError, DataError
from kolong.retrieval.task import Document, Query, RetrievalTask

TASKS = ("passkey", "needle", "paraphrase", "articles", "context", "multi-needle")
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
LENGTHS = (256, 512, 1024, 2048, 4096, 8192)
KORSTS_TEST = "korsts/sts-test.tsv"
KORSTS_DEV = "korsts/sts-dev.tsv"
KLUE_STS = "klue/klue-sts-v1.1_dev.json"
KLUE_NLI = "klue/klue-nli-v1.1_dev.json"
_SENTENCE_END = re.compile(r"(?<=[.?!다])\s+")
SURNAMES = "김이박최정강조윤장임한오서신권황안송류홍"
GIVEN = "민서지현수영준우도윤하은채예진성재희연태경"


def sentences_with_offsets(text: str) -> list[tuple[int, str]]:
    """(start, sentence) of a paragraph, split after sentence-final punctuation or 다 before a space."""
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if text[start : match.start()].strip():
            spans.append((start, text[start : match.start()]))
        start = match.end()
    if text[start:].strip():
        spans.append((start, text[start:].rstrip()))
    return spans


@dataclass
class Target:
    sentence: str  # inserted into the haystack
    query: str
    source: str  # where it came from (article title, file:line)


@dataclass
class Haystack:
    sentences: list[str]
    tokens: list[int]  # per sentence, without special tokens
    source: str

    @property
    def total(self) -> int:
        return sum(self.tokens)


def korquad_articles(shared_data: str | Path | None = None) -> list[dict]:
    import json

    return json.loads(shared_file("korquad/KorQuAD_v1.0_dev.shared.json", shared_data).read_text("utf-8"))[
        "data"
    ]


def token_counter(tokenizer) -> Callable[[Sequence[str]], list[int]]:
    """Token counts of many texts at once (fast tokenizers batch in Rust), special tokens left out."""

    def count(texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        encoded = tokenizer(list(texts), add_special_tokens=False, truncation=False)["input_ids"]
        return [len(ids) for ids in encoded]

    return count


def haystack(source: str, count, exclude_titles: set[str], shared_data=None) -> Haystack:
    """Korean sentences to fill documents with: KorQuAD contexts of articles not in `exclude_titles`, or
    KoNLPy's National Assembly bills and the Constitution."""
    if source == "korquad":
        sentences = [s.strip() for article in korquad_articles(shared_data) if article["title"] not in exclude_titles
                     for paragraph in article["paragraphs"] for _, s in sentences_with_offsets(paragraph["context"])]  # fmt: skip
    elif source == "konlpy":
        from kolong.data.konlpy_corpus import read_bills, read_constitution

        texts = [read_constitution(), *read_bills().values()]
        sentences = [" ".join(s.split()) for text in texts for _, s in sentences_with_offsets(text)]
    else:
        raise ConfigError(f"--haystack must be korquad or konlpy, got {source!r}")
    sentences = [s for s in sentences if len(s) >= 10]
    return Haystack(sentences, count(sentences), source)


def fill(stack: Haystack, budget: int, rng: random.Random) -> list[str]:
    """Consecutive haystack sentences from a random start holding at most `budget` tokens (at least one)."""
    start = rng.randrange(len(stack.sentences))
    chosen, used = [], 0
    for step in range(len(stack.sentences)):
        index = (start + step) % len(stack.sentences)
        if used + stack.tokens[index] > budget and chosen:
            break
        chosen.append(stack.sentences[index])
        used += stack.tokens[index]
    return chosen


def insert(filler: list[str], target: str, depth: float) -> tuple[str, int]:
    """The document with `target` between the filler's sentences at `depth` (0 first, 1 last) of them, and
    the character offset where it begins."""
    at = round(depth * len(filler))
    before = " ".join(filler[:at])
    start = len(before) + (1 if before else 0)
    return " ".join([*filler[:at], target, *filler[at:]]), start


def passkey_targets(count: int, rng: random.Random) -> list[Target]:
    names = sorted({a + b + c for a in SURNAMES for b in GIVEN for c in GIVEN if b != c})
    chosen = rng.sample(names, count)
    targets = []
    for name in chosen:
        key = rng.randrange(10_000, 100_000)
        sentence = f"{name}의 비밀번호는 {key}입니다. 기억하세요, {key}가 {name}의 비밀번호입니다."
        targets.append(Target(sentence, f"{name}의 비밀번호는 무엇입니까?", "passkey"))
    return targets


def needle_targets(
    count: int, rng: random.Random, shared_data=None, titles: set[str] | None = None
) -> list[Target]:
    """A KorQuAD question with the sentence of its paragraph that holds its answer (10-200 characters), of the
    articles named by `titles` (default: every article)."""
    pairs = []
    for article in korquad_articles(shared_data):
        if titles is not None and article["title"] not in titles:
            continue
        for paragraph in article["paragraphs"]:
            spans = sentences_with_offsets(paragraph["context"])
            for qa in paragraph["qas"]:
                answer = qa["answers"][0]["answer_start"]
                holding = [s for start, s in spans if start <= answer < start + len(s)]
                if holding and 10 <= len(holding[0].strip()) <= 200:
                    pairs.append(Target(holding[0].strip(), qa["question"].strip(), article["title"]))
    return _draw(pairs, count, rng, "KorQuAD questions whose answer sentence is 10-200 characters")


def paraphrase_targets(count: int, rng: random.Random, shared_data=None) -> list[Target]:
    """KorSTS test pairs scored >= 4 with different wording, then KLUE-NLI entailments if more are needed."""
    from kolong.data.klue import read_klue_nli
    from kolong.data.kornlu import read_korsts

    pairs = [Target(e.text.strip(), e.pair.strip(), e.id) for e in read_korsts(shared_file(KORSTS_TEST, shared_data))
             if e.label >= 4.0 and e.text.strip() != e.pair.strip() and len(e.text) >= 15 and len(e.pair) >= 15]  # fmt: skip
    if len(pairs) < count:
        nli = read_klue_nli(shared_file(KLUE_NLI, shared_data))
        pairs += [
            Target(e.text.strip(), e.pair.strip(), e.id) for e in nli if e.label == 0 and len(e.pair) >= 15
        ]
    return _draw(pairs, count, rng, "paraphrase pairs (KorSTS >= 4, KLUE-NLI entailment)")


def _draw(pairs: list[Target], count: int, rng: random.Random, what: str) -> list[Target]:
    unique = list({(t.sentence, t.query): t for t in pairs}.values())
    if len(unique) < count:
        raise DataError(f"asked for {count} targets per length, but the shared data has {len(unique)} {what}")
    return rng.sample(unique, count)


def haystack_task(
    name: str,
    tokenizer,
    *,
    lengths: Sequence[int] = (512, 1024, 2048),
    depths: Sequence[float] = DEPTHS,
    per_length: int = 50,
    source: str = "korquad",
    seed: int = 0,
    eval_articles: int | None = None,
    shared_data=None,
) -> RetrievalTask:
    """passkey / needle / paraphrase: `per_length` documents of each length (tokens of `tokenizer`, [CLS] and
    [SEP] counted), their targets at `depths` in turn; each length a pool of its own. `eval_articles` (needle):
    the targets come from the articles `article_task` holds out with the same `eval_articles` and `seed`, and
    the task records them, so training keeps only those out instead of every article a target came from."""
    if not lengths or min(lengths) < 16:
        raise ConfigError(f"--lengths must be token counts of at least 16, got {list(lengths)}")
    if not depths or not all(0.0 <= d <= 1.0 for d in depths):
        raise ConfigError(f"--depths must lie in [0, 1], got {list(depths)}")
    held_titles = None
    if eval_articles is not None:
        if name != "needle":
            raise ConfigError(
                f"--eval-articles draws needle targets from held-out articles; {name} has no articles"
            )
        held_titles = {
            a["title"] for a in article_split(korquad_articles(shared_data), eval_articles, seed)[1]
        }
    rng = random.Random(seed)
    makers = {"passkey": lambda n: passkey_targets(n, rng),
              "needle": lambda n: needle_targets(n, rng, shared_data, held_titles),
              "paraphrase": lambda n: paraphrase_targets(n, rng, shared_data)}  # fmt: skip
    if name not in makers:
        raise ConfigError(f"unknown haystack task {name!r}; choose one of {', '.join(makers)}")
    count = token_counter(tokenizer)
    targets = makers[name](per_length * len(lengths))
    stack = haystack(source, count, {t.source for t in targets}, shared_data)
    if stack.total < 2 * max(lengths):
        raise DataError(
            f"the {source} haystack holds {stack.total:,} tokens, too few for documents of {max(lengths):,} "
            f"(need at least {2 * max(lengths):,}: lower --lengths or choose another --haystack)"
        )
    target_tokens = count([t.sentence for t in targets])
    documents, queries = {}, []
    for l_index, length in enumerate(lengths):
        for i in range(per_length):
            index = l_index * per_length + i
            target, depth = targets[index], depths[i % len(depths)]
            filler = fill(stack, max(1, length - 2 - target_tokens[index]), rng)
            text, start = insert(filler, target.sentence, depth)
            document_id, pool = f"{name}-{length}-{i}", str(length)
            documents[document_id] = Document(document_id, text, pool)
            queries.append(Query(f"q-{document_id}", target.query, {document_id: 1}, start, pool))
    settings = {"seed": seed, "lengths": list(lengths), "depths": list(depths), "per_length": per_length,
                "haystack": source, "tokenizer": getattr(tokenizer, "name_or_path", "")}  # fmt: skip
    if held_titles is not None:
        settings.update(eval_articles=eval_articles, held_out_titles=sorted(held_titles))
    return RetrievalTask(name, documents, queries, settings)


def article_split(articles: list[dict], eval_articles: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(training, evaluation) articles: `eval_articles` of them drawn by `seed`, none on both sides."""
    if not 1 <= eval_articles < len(articles):
        raise ConfigError(f"--eval-articles must be between 1 and {len(articles) - 1}, got {eval_articles}")
    order = list(range(len(articles)))
    random.Random(seed).shuffle(order)
    held = set(order[:eval_articles])
    return (
        [a for i, a in enumerate(articles) if i not in held],
        [a for i, a in enumerate(articles) if i in held],
    )


def article_task(
    *,
    eval_articles: int = 25,
    questions_per_article: int = 6,
    pool: str = "articles",
    seed: int = 0,
    separator: str = "\n",
    shared_data=None,
) -> RetrievalTask:
    """KorQuAD questions of held-out articles against whole articles (or their paragraphs), each query grouped by
    its article; `questions_per_article` 0 asks every question."""
    if pool not in ("articles", "all", "paragraphs"):
        raise ConfigError(f"--pool must be articles, all or paragraphs, got {pool!r}")
    articles = korquad_articles(shared_data)
    training, held = article_split(articles, eval_articles, seed)
    rng = random.Random(seed)
    held_titles = {a["title"] for a in held}
    documents, queries = {}, []
    for article in held + (training if pool == "all" else []):
        contexts = [p["context"] for p in article["paragraphs"]]
        starts = [sum(len(c) + len(separator) for c in contexts[:i]) for i in range(len(contexts))]
        if pool == "paragraphs":
            for i, context in enumerate(contexts):
                documents[f"{article['title']}#{i}"] = Document(f"{article['title']}#{i}", context)
        else:
            documents[article["title"]] = Document(article["title"], separator.join(contexts))
        if article["title"] not in held_titles:
            continue
        asked = [(i, qa) for i, p in enumerate(article["paragraphs"]) for qa in p["qas"]]
        chosen = (
            asked if questions_per_article == 0 else rng.sample(asked, min(questions_per_article, len(asked)))
        )
        for i, qa in chosen:
            answer, title = qa["answers"][0]["answer_start"], article["title"]
            if pool == "paragraphs":  # grouped by article: its questions are not independent of each other
                queries.append(Query(qa["id"], qa["question"], {f"{title}#{i}": 1}, answer, group=title))
            else:
                queries.append(Query(qa["id"], qa["question"], {title: 1}, starts[i] + answer, group=title))
    settings = {"seed": seed, "pool": pool, "eval_articles": eval_articles,
                "questions_per_article": questions_per_article,
                "held_out_titles": sorted(held_titles)}  # fmt: skip
    return RetrievalTask(f"articles-{pool}", documents, queries, settings)


PRONOUN = "그"  # what a title mention becomes in the context task: it takes the same particles as a name


def title_entity(title: str) -> str:
    """A KorQuAD title as it is mentioned in text: without its parenthesised disambiguator, underscores as spaces
    (`김정남_(조선민주주의인민공화국)` -> `김정남`)."""
    return re.sub(r"[_ ]*\([^)]*\)$", "", title).replace("_", " ").strip()


def masked(text: str, entity: str) -> str:
    """`text` with every mention of `entity` replaced by the pronoun."""
    return text.replace(entity, PRONOUN) if entity else text


def context_task(*, eval_articles: int = 25, questions_per_article: int = 0, mask: bool = True, seed: int = 0,
                 shared_data=None) -> RetrievalTask:  # fmt: skip
    """Questions of held-out articles against the paragraphs of every article, the title entity masked in every
    paragraph but each article's first (`mask`); questions answered in an article's first paragraph are left out
    (nothing is masked there). The held-out articles are those of `article_task` with the same `eval_articles` and
    `seed` that have more than one paragraph, so one training run can keep both tasks out. Each query grouped by
    its article."""
    _, held = article_split(korquad_articles(shared_data), eval_articles, seed)
    held = [a for a in held if len(a["paragraphs"]) > 1]
    if not held:
        raise DataError(f"the context task needs held-out articles of more than one paragraph; none of the "
                        f"{eval_articles} drawn has one (raise --eval-articles)")  # fmt: skip
    rng = random.Random(seed)
    held_titles = {a["title"] for a in held}
    documents, queries, replaced = {}, [], 0
    for article in korquad_articles(shared_data):
        entity = title_entity(article["title"])
        for index, paragraph in enumerate(article["paragraphs"]):
            text = paragraph["context"]
            if mask and index > 0:
                replaced += text.count(entity) if entity else 0
                text = masked(text, entity)
            documents[f"{article['title']}#{index}"] = Document(f"{article['title']}#{index}", text,
                                                                 source=article["title"])  # fmt: skip
        if article["title"] not in held_titles:
            continue
        asked = [(i, qa) for i, p in enumerate(article["paragraphs"]) for qa in p["qas"] if i > 0]
        chosen = (
            asked if questions_per_article == 0 else rng.sample(asked, min(questions_per_article, len(asked)))
        )
        for i, qa in chosen:
            answer = qa["answers"][0]
            start = answer["answer_start"]
            if mask and entity in answer["text"]:
                continue  # the answer itself was masked away
            if mask:  # the answer's offset in the masked paragraph
                start = len(masked(article["paragraphs"][i]["context"][:start], entity))
            queries.append(Query(qa["id"], qa["question"], {f"{article['title']}#{i}": 1}, start,
                                 group=article["title"]))  # fmt: skip
    settings = {"seed": seed, "eval_articles": eval_articles, "questions_per_article": questions_per_article,
                "mask": mask, "pronoun": PRONOUN, "mentions_masked": replaced,
                "held_out_titles": sorted(held_titles)}  # fmt: skip
    return RetrievalTask("context" if mask else "context-unmasked", documents, queries, settings)


def close_pairs(shared_data=None, threshold: float = 4.5) -> list[Target]:
    """Sentence pairs scored >= `threshold` (KorSTS dev and test, KLUE-STS dev), one side the sentence, the other
    the query, distinct texts only."""
    from kolong.data.klue import read_klue_sts
    from kolong.data.kornlu import read_korsts

    examples = [*read_korsts(shared_file(KORSTS_DEV, shared_data)), *read_korsts(shared_file(KORSTS_TEST, shared_data)),
                *read_klue_sts(shared_file(KLUE_STS, shared_data))]  # fmt: skip
    pairs = [Target(e.text.strip(), e.pair.strip(), e.id) for e in examples
             if e.label >= threshold and e.text.strip() != e.pair.strip() and len(e.text) >= 10 and len(e.pair) >= 10]  # fmt: skip
    return list({(t.sentence, t.query): t for t in pairs}.values())


def multi_needle_task(tokenizer, *, lengths: Sequence[int] = (512, 1024, 2048), per_length: int = 30,
                      needles: Sequence[int] = (2, 3), source: str = "korquad", seed: int = 0,
                      shared_data=None) -> RetrievalTask:  # fmt: skip
    """`per_length` documents of each length, each holding 2 or 3 close sentences at spread depths, asked by their
    other sides joined; beside each, a distractor holding all but the last of them (grade 0)."""
    if not lengths or min(lengths) < 64:
        raise ConfigError(
            f"--lengths must be token counts of at least 64 for several needles, got {list(lengths)}"
        )
    rng = random.Random(seed)
    pairs = close_pairs(shared_data)
    wanted = sum(needles[i % len(needles)] for i in range(per_length)) * len(lengths)
    if len(pairs) < wanted:
        raise DataError(
            f"the multi-needle task needs {wanted} pairs scored >= 4.5; the shared data has {len(pairs)}"
        )
    rng.shuffle(pairs)
    count = token_counter(tokenizer)
    stack = haystack(source, count, set(), shared_data)
    documents, queries, used = {}, [], 0
    for length in lengths:
        pool = str(length)
        for i in range(per_length):
            chosen = pairs[used : used + needles[i % len(needles)]]
            used += len(chosen)
            budget = max(1, length - 2 - sum(count([t.sentence for t in chosen])))
            for kind, kept in (("doc", chosen), ("distractor", chosen[:-1])):
                filler = fill(stack, budget, rng)
                text, first = _spread(filler, [t.sentence for t in kept], rng)
                document_id = f"multi-{length}-{i}-{kind}"
                documents[document_id] = Document(document_id, text, pool)
                if kind == "doc":
                    query = " ".join(t.query for t in chosen)
                    queries.append(Query(f"q-multi-{length}-{i}", query, {document_id: 1}, first, pool))
    settings = {"seed": seed, "lengths": list(lengths), "per_length": per_length, "needles": list(needles),
                "haystack": source, "tokenizer": getattr(tokenizer, "name_or_path", "")}  # fmt: skip
    return RetrievalTask("multi-needle", documents, queries, settings)


def _spread(filler: list[str], targets: list[str], rng: random.Random) -> tuple[str, int]:
    """The filler with `targets` at spread depths (one in each equal stretch of it, in order), and the character
    where the first begins."""
    k = len(targets)
    positions = sorted(round((j + rng.random()) / k * len(filler)) for j in range(k))
    pieces, first = [], None
    previous = 0
    for at, target in zip(positions, targets, strict=True):
        pieces += filler[previous:at]
        if first is None:
            first = len(" ".join(pieces)) + (1 if pieces else 0)
        pieces.append(target)
        previous = at
    pieces += filler[previous:]
    return " ".join(pieces), first or 0
