"""Tokenizer statistics on a corpus: tokens per character, [UNK] share, words split, throughput.

Works for kolong's tokenizers and any tokenizer directory `AutoTokenizer` can load (the name `byte`
stands for kolong's `ByteTokenizer`). A *word* is a whitespace-delimited run of the original text (an
eojeol, for Korean); it is *split* when more than one token covers it. Throughput is characters per
second of plain batch encoding (no offsets), timed separately from the counting pass.

`answer_alignment` checks an extractive-QA dataset: an answer is aligned when its start is the start of a
token and its end the end of a token in the context's encoding; the others are listed.
"""

from __future__ import annotations

import bisect
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from kolong.errors import TokenizerError

_WORDS = re.compile(r"\S+")
BATCH = 1000


@dataclass
class TokenizerStats:
    name: str
    kind: str
    documents: int
    characters: int
    tokens: int
    tokens_per_character: float
    unk_share: float
    words: int
    words_split_share: float
    seconds: float
    characters_per_second: float
    answers: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def _batches(items: list, size: int = BATCH):
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _word_spans(text: str) -> tuple[list[int], list[int]]:
    starts, ends = [], []
    for match in _WORDS.finditer(text):
        starts.append(match.start())
        ends.append(match.end())
    return starts, ends


def measure(
    tokenizer, documents: list[str], name: str = "", on_step: Callable[[int], None] | None = None
) -> TokenizerStats:
    """Statistics of `tokenizer` over `documents` (a list: it is read twice)."""
    if not documents:
        raise TokenizerError("no documents to measure on")
    characters = sum(len(d) for d in documents)
    started = time.perf_counter()
    for batch in _batches(documents):
        tokenizer(batch, add_special_tokens=False)
    seconds = time.perf_counter() - started

    unk_id = tokenizer.unk_token_id
    tokens = unk = words = split = 0
    fast = getattr(tokenizer, "is_fast", False)
    done = 0
    for batch in _batches(documents):
        encoded = tokenizer(batch, add_special_tokens=False, return_offsets_mapping=fast)
        for i, text in enumerate(batch):
            ids = encoded["input_ids"][i]
            tokens += len(ids)
            if unk_id is not None:
                unk += sum(1 for t in ids if t == unk_id)
            starts, ends = _word_spans(text)
            words += len(starts)
            if fast:
                per_word = [0] * len(starts)
                for a, b in encoded["offset_mapping"][i]:
                    w = bisect.bisect_right(starts, a) - 1
                    if w >= 0 and a < ends[w] and b > a:
                        per_word[w] += 1
                split += sum(1 for n in per_word if n > 1)
            else:
                split += sum(
                    1 for s, e in zip(starts, ends, strict=True) if len(tokenizer.tokenize(text[s:e])) > 1
                )
        done += len(batch)
        if on_step is not None:
            on_step(done)
    return TokenizerStats(
        name=name or getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__,
        kind=_kind(tokenizer),
        documents=len(documents),
        characters=characters,
        tokens=tokens,
        tokens_per_character=tokens / characters if characters else 0.0,
        unk_share=unk / tokens if tokens else 0.0,
        words=words,
        words_split_share=split / words if words else 0.0,
        seconds=seconds,
        characters_per_second=characters / seconds if seconds > 0 else float("inf"),
    )


def _kind(tokenizer) -> str:
    analyser = getattr(tokenizer, "analyser", None)
    if analyser is not None:
        model = type(tokenizer.backend_tokenizer.model).__name__
        return f"{type(tokenizer).__name__} ({analyser}, {tokenizer.forms}, {model})"
    return type(tokenizer).__name__


def answer_alignment(tokenizer, examples) -> dict:
    """How many answers start and end on token boundaries of their context (kolong.data.squad examples)."""
    if not getattr(tokenizer, "is_fast", False):
        raise TokenizerError("answer alignment needs offsets: a fast tokenizer")
    aligned = total = 0
    misaligned: list[dict] = []
    contexts = sorted({e.context for e in examples})
    offsets = {}
    for batch in _batches(contexts, 200):
        encoded = tokenizer(batch, add_special_tokens=False, return_offsets_mapping=True)
        for context, spans in zip(batch, encoded["offset_mapping"], strict=True):
            offsets[context] = (
                {a for a, b in spans if b > a},
                {b for a, b in spans if b > a},
            )
    for example in examples:
        starts, ends = offsets[example.context]
        for answer in example.answers:
            total += 1
            if answer.start in starts and answer.end in ends:
                aligned += 1
            else:
                misaligned.append({"id": example.id, "answer": answer.text, "start": answer.start})
    return {"answers": total, "aligned": aligned, "misaligned": misaligned}
