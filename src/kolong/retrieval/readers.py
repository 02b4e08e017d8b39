"""How a document is read into one score per query: the readers `kolong evaluate retrieval` compares.

- `truncate`: the embedding model reads the document's first `length` tokens (the whole document when the
  model was extended to hold it);
- `chunk-max` / `chunk-mean`: the document is cut into consecutive chunks of `length` tokens (cut at token
  boundaries of the model's own tokenizer, then encoded as text, as RAG pipelines do), and scored by its best
  chunk or by the mean of its chunks' scores;
- `late-chunk`: the document read whole at `length` (overlapping windows past it), each chunk of
  `chunk_tokens` tokens (or each paragraph) pooled from the token states (`late_chunking`), the document scored
  by its best chunk; documents that are passages of one `source` are read joined, each embedded from the whole;
- `bm25`: Okapi BM25 (bm25s) over MeCab-ko morphemes, the lexical baseline a Korean team tries first.

Dense scores are cosine similarities of normalised embeddings.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kolong.errors import CheckpointError, ConfigError

DENSE = ("truncate", "chunk-max", "chunk-mean", "late-chunk")
CHUNKED = ("chunk-max", "chunk-mean")  # one encoding of the chunks serves both
POOLINGS = ("mean", "cls")


def load_embedder(model_or_path: str, pooling: str | None = None, device: str = "cpu"):
    """A `SentenceTransformer`: a sentence-transformers directory as it is, or a plain Hugging Face encoder
    with the `pooling` given (never guessed: a CLS-trained model read by its mean embeds wrong)."""
    from pathlib import Path

    from kolong.extension.embedding_model import (
        is_embedding_model,
        load_sentence_transformer,
        sentence_transformers,
    )

    path = Path(model_or_path)
    if not path.exists() and not _on_the_hub(str(model_or_path)):
        raise CheckpointError(
            f"{model_or_path}: no such model directory (nor a hub model in the local cache)"
        )
    if is_embedding_model(model_or_path):
        return load_sentence_transformer(model_or_path, device)
    if pooling not in POOLINGS:
        raise CheckpointError(
            f"{model_or_path} is not a sentence-transformers model (no modules.json), so its pooling is unknown: "
            "pass --pooling mean or --pooling cls (what it was trained with)"
        )
    if not (Path(model_or_path) / "config.json").is_file():
        raise CheckpointError(f"{model_or_path} is not a model directory: it has no config.json")
    module = sentence_transformers()
    transformer = module.models.Transformer(str(model_or_path))
    pool = module.models.Pooling(transformer.auto_model.config.hidden_size, pooling_mode=pooling)
    return module.SentenceTransformer(modules=[transformer, pool, module.models.Normalize()], device=device)


def _on_the_hub(name: str) -> bool:
    """Whether `name` can be a hub model here: an org/name id, in the local cache or with the hub reachable."""
    from huggingface_hub import constants, try_to_load_from_cache

    if name.startswith((".", "/")) or name.count("/") != 1:
        return False
    return not constants.HF_HUB_OFFLINE or isinstance(try_to_load_from_cache(name, "config.json"), str)


def positions_of(embedder) -> int:
    """How many tokens the embedding model's transformer can read (its position table or RoPE length)."""
    from kolong.extension.embedding_model import transformer_of
    from kolong.extension.position_table import find_position_table
    from kolong.extension.rope import rope_extender

    model = transformer_of(embedder)
    if rope_extender(model.config) is not None:
        return int(model.config.max_position_embeddings)
    return find_position_table(model).max_length


def chunk_texts(tokenizer, text: str, length: int) -> list[str]:
    """The document cut into consecutive pieces of at most `length` tokens ([CLS] and [SEP] counted), at the
    tokens' character boundaries."""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False)
    offsets = encoded["offset_mapping"]
    step = max(1, length - 2)
    if not offsets:
        return [text]
    pieces = []
    for begin in range(0, len(offsets), step):
        end = min(begin + step, len(offsets)) - 1
        pieces.append(text[offsets[begin][0] : offsets[end][1]])
    return pieces


@dataclass
class Encoded:
    scores: dict[str, dict[str, float]]  # query id -> {document id: score}
    seconds: float  # encoding the documents
    tokens: int  # document tokens read
    peak_mb: float


def _encode(embedder, texts: list[str], batch_size: int) -> np.ndarray:
    return embedder.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                           show_progress_bar=False)  # fmt: skip


def dense_scores(embedder, task, reader: str, length: int, batch_size: int = 8, measure_memory: bool = True,
                 chunk_tokens: int | str = 256, cache: dict | None = None) -> Encoded:  # fmt: skip
    """Scores of every query against every document of its pool, read by `reader` at `length` tokens. `cache`
    (one dict per model and length) keeps the chunks' encoding, so `chunk-max` and `chunk-mean` encode them
    once."""
    from kolong.measure import peak_growth_mb

    if reader not in DENSE:
        raise ConfigError(f"unknown reader {reader!r}; choose from {', '.join(DENSE)} or bm25")
    ids = list(task.documents)
    texts = [task.documents[i].text for i in ids]
    key = "chunks" if reader in CHUNKED else reader
    if cache is not None and key in cache:
        encoded = cache[key]
    else:
        embedder.max_seq_length = length
        result: dict = {}

        def encode() -> None:
            sources = [task.documents[i].source for i in ids]
            result["pieces"], result["owner"], result["tokens"] = _pieces(embedder, texts, reader, length,
                                                                          batch_size, chunk_tokens, sources)  # fmt: skip

        started = time.perf_counter()
        cuda = str(embedder.device).startswith("cuda")
        peak = peak_growth_mb(encode, cuda=cuda) if measure_memory else (encode() or 0.0)
        encoded = {**result, "seconds": time.perf_counter() - started, "peak": float(peak)}
        if cache is not None:
            cache[key] = encoded
    queries = _encode(embedder, [q.text for q in task.queries], batch_size)
    piece_scores = queries @ encoded["pieces"].T  # (queries, pieces)
    owner = np.asarray(encoded["owner"])
    pieces_of = [
        np.flatnonzero(owner == d_index) for d_index in range(len(ids))
    ]  # each document's pieces, once
    reduce = np.mean if reader == "chunk-mean" else np.max
    scores = {}
    for q_index, query in enumerate(task.queries):
        row = piece_scores[q_index]
        scores[query.id] = {document_id: float(reduce(row[pieces_of[d_index]]))
                            for d_index, document_id in enumerate(ids)
                            if task.documents[document_id].pool == query.pool}  # fmt: skip
    return Encoded(scores, encoded["seconds"], encoded["tokens"], encoded["peak"])


def _pieces(embedder, texts: list[str], reader: str, length: int, batch_size: int, chunk_tokens,
            sources: list[str | None] | None = None):  # fmt: skip
    """(embeddings of the pieces a reader scores, the document each belongs to, tokens read). `late-chunk` reads
    the documents of one source (`sources`, one per text) as one text, each document one piece."""
    tokenizer = embedder[0].tokenizer
    if reader == "late-chunk":
        from kolong.retrieval.late_chunking import late_chunks, late_passages

        pieces, owner = [], []
        grouped: dict[str, list[int]] = {}
        for index, source in enumerate(sources or [None] * len(texts)):
            if source is not None:
                grouped.setdefault(source, []).append(index)
                continue
            chunks = late_chunks(embedder, texts[index], length, chunk_tokens)
            pieces += [chunk.embedding for chunk in chunks]
            owner += [index] * len(chunks)
        for members in grouped.values():
            pieces += list(late_passages(embedder, [texts[i] for i in members], length))
            owner += members
        tokens = sum(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts)
        return np.stack(pieces), owner, tokens
    if reader == "truncate":
        pieces, owner = texts, list(range(len(texts)))
    else:
        pieces, owner = [], []
        for index, text in enumerate(texts):
            chunks = chunk_texts(tokenizer, text, length)
            pieces += chunks
            owner += [index] * len(chunks)
    tokens = sum(min(n, length) for n in map(len, tokenizer(pieces, truncation=False)["input_ids"]))
    return _encode(embedder, pieces, batch_size), owner, tokens


def morphemes() -> Callable[[str], list[str]]:
    """MeCab-ko's surface morphemes of a text (kolong's analyser)."""
    from kolong.tokenizers.analysers import get_analyser

    analyser = get_analyser("mecab")
    return lambda text: [text[start:end] for _, start, end in analyser.analyse(text)]


def bm25_scores(task) -> Encoded:
    """BM25 (bm25s, Lucene's variant, k1 1.5, b 0.75) over MeCab-ko morphemes, each pool indexed alone."""
    try:
        import bm25s
    except ImportError:
        raise ConfigError("the bm25 reader needs bm25s: pip install 'kolong[retrieval]'") from None
    split = morphemes()
    started = time.perf_counter()
    scores: dict[str, dict[str, float]] = {q.id: {} for q in task.queries}
    tokens = 0
    for pool, document_ids in task.pools().items():
        corpus = [split(task.documents[i].text) for i in document_ids]
        tokens += sum(map(len, corpus))
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)
        for query in (q for q in task.queries if q.pool == pool):
            values = retriever.get_scores(split(query.text))
            scores[query.id] = {d: float(v) for d, v in zip(document_ids, values, strict=True)}
    return Encoded(scores, time.perf_counter() - started, tokens, 0.0)
