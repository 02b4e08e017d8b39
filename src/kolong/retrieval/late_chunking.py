"""Late chunking (Günther et al. 2024): read a whole document once, then pool each chunk's token states, so every
chunk's embedding has seen its document's context.

A document of `n` tokens is read at the reading length `L` (its specials counted): in one pass when it fits, else
in overlapping windows of `L - 2` tokens whose overlap gives each window context but is pooled once, each token's
state taken from the window where it sits furthest from an edge. Chunks are `chunk_tokens` consecutive tokens, or
the document's paragraphs (`"paragraphs"`: its lines). A chunk's embedding is the mean of its tokens' states, as
a mean-pooling sentence-transformers model pools (the document's [CLS] belongs to its first chunk and its [SEP]
to its last, so a document that fits one chunk gets exactly the model's own embedding), then the model's modules
after pooling (Dense, Normalize). Only mean pooling has chunk states to average: a CLS-pooled model is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kolong.errors import ConfigError

PARAGRAPHS = "paragraphs"
DEFAULT_OVERLAP_SHARE = 0.25  # of a window's tokens, read by both neighbours


@dataclass
class Chunk:
    start: int  # character span in the document
    end: int
    embedding: np.ndarray  # (dim,)


def check_mean_pooling(embedder, name: str = "the model") -> None:
    pooling = embedder[1] if len(embedder) > 1 else None
    mode = (
        pooling.get_config_dict().get("pooling_mode") if hasattr(pooling, "get_config_dict") else None
    ) or ""
    if "mean" not in str(mode):
        raise ConfigError(f"late chunking averages each chunk's token states; {name} pools by {mode or 'nothing'!r}, "
                          "so its chunks have no embedding of their own: use a mean-pooling model")  # fmt: skip


def check_chunk_tokens(chunk_tokens: int | str, length: int) -> int | str:
    """`chunk_tokens` as given, refused when it is neither a positive count within the reading length nor
    "paragraphs"."""
    if chunk_tokens == PARAGRAPHS:
        return chunk_tokens
    if not isinstance(chunk_tokens, int) or chunk_tokens < 1:
        raise ConfigError(f"--chunk-tokens must be a token count or 'paragraphs', got {chunk_tokens!r}")
    if chunk_tokens > length - 2:
        raise ConfigError(f"--chunk-tokens {chunk_tokens} is above the reading length {length} (less its 2 specials): "
                          "a chunk must fit one read")  # fmt: skip
    return chunk_tokens


def windows(tokens: int, length: int, overlap: int | None = None) -> list[tuple[int, int, int, int]]:
    """(start, end, keep_from, keep_to) of each window over `tokens` content tokens read `length` at a time (specials
    counted): the window's tokens [start, end), of which [keep_from, keep_to) are pooled from it; every token is
    pooled from exactly one window."""
    width = length - 2
    if width < 1:
        raise ConfigError(f"a reading length of {length} leaves no room past its 2 special tokens")
    if tokens <= width:
        return [(0, tokens, 0, tokens)]
    overlap = int(width * DEFAULT_OVERLAP_SHARE) if overlap is None else overlap
    if not 0 <= overlap < width:
        raise ConfigError(f"the windows' overlap must be below their {width} tokens, got {overlap}")
    stride = width - overlap
    starts = [*range(0, tokens - width, stride), tokens - width]
    spans = []
    for index, start in enumerate(starts):
        end = start + width
        keep_from = (
            0 if index == 0 else (start + spans[-1][1]) // 2
        )  # the middle of the overlap with the last
        spans.append((start, end, keep_from, end))
        if index:
            previous = spans[index - 1]
            spans[index - 1] = (previous[0], previous[1], previous[2], keep_from)
    return spans


def chunk_spans(
    offsets: Sequence[tuple[int, int]], text: str, chunk_tokens: int | str
) -> list[tuple[int, int]]:
    """Token ranges [first, last) of each chunk: consecutive `chunk_tokens`, or the tokens of each paragraph
    (each non-empty line)."""
    if chunk_tokens != PARAGRAPHS:
        return [(i, min(i + chunk_tokens, len(offsets))) for i in range(0, len(offsets), chunk_tokens)]
    spans, line_start = [], 0
    for line in text.split("\n"):
        line_end = line_start + len(line)
        inside = [
            i
            for i, (begin, end) in enumerate(offsets)
            if line_start <= begin and end <= line_end and end > begin
        ]
        if line.strip() and inside:
            spans.append((inside[0], inside[-1] + 1))
        line_start = line_end + 1
    return spans or [(0, len(offsets))]


def token_states(embedder, ids: list[int], length: int, overlap: int | None = None):
    """(n + 2, hidden) states of [CLS] + the document's `ids` + [SEP], read in windows of `length`."""
    import torch

    transformer = embedder[0]
    model, tokenizer = transformer.auto_model, transformer.tokenizer
    first, last = tokenizer.cls_token_id, tokenizer.sep_token_id
    if first is None or last is None:  # RoBERTa-style names
        first, last = tokenizer.bos_token_id, tokenizer.eos_token_id
    device = next(model.parameters()).device
    states = []
    spans = windows(len(ids), length, overlap)
    with torch.inference_mode():
        for index, (start, end, keep_from, keep_to) in enumerate(spans):
            window = torch.tensor([[first, *ids[start:end], last]], device=device)
            hidden = model(input_ids=window, attention_mask=torch.ones_like(window)).last_hidden_state[0]
            if index == 0:
                states.append(hidden[:1])  # the document's [CLS]
            states.append(hidden[1 + keep_from - start : 1 + keep_to - start])
            if index == len(spans) - 1:
                states.append(hidden[-1:])  # the document's [SEP]
    return torch.cat(states).float()


def late_chunks(embedder, text: str, length: int, chunk_tokens: int | str = 256,
                overlap: int | None = None) -> list[Chunk]:  # fmt: skip
    """The document's chunks, each with its character span and its late-chunked embedding."""
    check_chunk_tokens(chunk_tokens, length)
    ids, offsets = _tokens(embedder, text)
    spans = chunk_spans(offsets, text, chunk_tokens)
    embeddings = _pooled(embedder, token_states(embedder, ids, length, overlap), spans)
    return [Chunk(offsets[first][0], offsets[last - 1][1], embedding)
            for (first, last), embedding in zip(spans, embeddings, strict=True)]  # fmt: skip


def late_passages(embedder, passages: Sequence[str], length: int, overlap: int | None = None) -> np.ndarray:
    """(passages, dim): each passage embedded from the states of all of them read as one text, joined by newlines
    in the order given (the passages of one source document: each embedding has seen the others)."""
    starts, cursor = [], 0
    for passage in passages:
        starts.append(cursor)
        cursor += len(passage) + 1  # the newline that joins it to the next
    text = "\n".join(passages)
    ids, offsets = _tokens(embedder, text)
    owner = np.searchsorted(np.asarray(starts), [begin for begin, _ in offsets], side="right") - 1
    spans = []
    for index in range(len(passages)):
        inside = np.flatnonzero(owner == index)
        if not len(inside):
            raise ConfigError(
                f"late chunking: passage {index} of a source has no tokens; every passage needs text"
            )
        spans.append((int(inside[0]), int(inside[-1]) + 1))
    return _pooled(embedder, token_states(embedder, ids, length, overlap), spans)


def _tokens(embedder, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    encoded = embedder[0].tokenizer(
        text, add_special_tokens=False, return_offsets_mapping=True, truncation=False
    )
    if not encoded["input_ids"]:
        raise ConfigError("late chunking got an empty document")
    return encoded["input_ids"], encoded["offset_mapping"]


def _pooled(embedder, states, spans: list[tuple[int, int]]) -> np.ndarray:
    """(chunks, dim): each token range's mean state (row 0 of `states` is [CLS], rows 1..n the tokens, the last
    [SEP]) passed through the model's modules after pooling (Dense, Normalize)."""
    import torch

    tokens = len(states) - 2
    pooled = []
    for index, (first, last) in enumerate(spans):
        begin = 0 if index == 0 else first + 1  # the document's [CLS] pooled with its first chunk
        end = tokens + 2 if index == len(spans) - 1 else last + 1  # and its [SEP] with its last
        pooled.append(states[begin:end].mean(dim=0))
    features = {"sentence_embedding": torch.stack(pooled)}
    for module in list(embedder)[2:]:
        features = module(features)
    return features["sentence_embedding"].cpu().numpy()


def embed_documents(embedder, documents: dict[str, str], length: int, chunk_tokens: int | str = 256,
                    overlap: int | None = None, on_document=None) -> list[dict]:  # fmt: skip
    """Late-chunked chunk embeddings of every document: one record per chunk, {"document", "chunk", "start", "end",
    "text", "embedding"}, the span slicing the document back to the chunk's text."""
    check_mean_pooling(embedder)
    records = []
    for document_id, text in documents.items():
        for index, chunk in enumerate(late_chunks(embedder, text, length, chunk_tokens, overlap)):
            records.append({"document": document_id, "chunk": index, "start": chunk.start, "end": chunk.end,
                            "text": text[chunk.start : chunk.end], "embedding": chunk.embedding.tolist()})  # fmt: skip
        if on_document is not None:
            on_document(document_id)
    return records
