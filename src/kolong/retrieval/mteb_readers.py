"""kolong's readers inside MTEB (mteb 2.x), so extended, chunked and late-chunked models are scored on MTEB's own
retrieval tasks (MLDR-ko: `MultiLongDocRetrieval`, Korean) by MTEB's own evaluation.

- `truncate` (the whole document after in-memory extension past the model's length) goes through MTEB's encoder
  protocol: the sentence-transformers model itself, wrapped by MTEB, reading `length` tokens;
- `chunk-max`, `chunk-mean` and `late-chunk` score a document by its chunks, not one embedding: they go through
  MTEB's search protocol, indexing the corpus and ranking it with kolong's readers (`readers.dense_scores`).

Queries are always read plainly. Each reader carries model metadata naming the model, the reader and the extension
(`kolong/MODEL whole@2048 (copy)`), so MTEB's result files say what ran. `local_task` turns a kolong task file into an
MTEB retrieval task (MTEB's custom-task mechanism: a subclass of its `AbsTaskRetrieval`), which is how kolong's own
Korean tasks, and the tests, run through MTEB offline.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kolong.errors import ConfigError

KOREAN = "kor-Hang"
SEARCHED = ("chunk-max", "chunk-mean", "late-chunk")


def require_mteb():
    try:
        import mteb
    except ImportError:
        raise ConfigError("kolong evaluate mteb needs mteb: pip install 'kolong[retrieval]'") from None
    return mteb


def model_meta(embedder, label: str, length: int):
    """MTEB's metadata of one kolong reader: its name says the model, the reader and the extension."""
    from mteb.models.model_meta import ModelMeta

    return ModelMeta(loader=None, loader_kwargs={}, name=f"kolong/{label}", revision="local", release_date=None,
                     languages=[KOREAN], n_parameters=sum(p.numel() for p in embedder.parameters()),
                     memory_usage_mb=None, max_tokens=length,
                     embed_dim=_dimension(embedder), license=None, open_weights=True,
                     public_training_code=None, public_training_data=None, framework=["Sentence Transformers", "PyTorch"],
                     similarity_fn_name="cosine", use_instructions=False, training_datasets=None)  # fmt: skip


def _dimension(embedder) -> int:
    method = getattr(embedder, "get_embedding_dimension", None) or embedder.get_sentence_embedding_dimension
    return int(method() or 0)


class ChunkSearch:
    """MTEB's search protocol over a kolong reader that scores documents by their chunks."""

    def __init__(self, embedder, reader: str, length: int, label: str, chunk_tokens: int | str = 256,
                 batch_size: int = 8) -> None:  # fmt: skip
        if reader not in SEARCHED:
            raise ConfigError(f"{reader!r} reads through MTEB's encoder protocol, not its search protocol")
        self.embedder, self.reader, self.length, self.label = embedder, reader, length, label
        self.chunk_tokens, self.batch_size = chunk_tokens, batch_size
        self.corpus: dict[str, str] = {}
        self.mteb_model_meta = model_meta(embedder, label, length)

    def index(self, corpus, **kwargs) -> None:
        self.corpus = {str(row["id"]): _text(row) for row in corpus}

    def search(self, queries, *, top_k: int, **kwargs) -> dict[str, dict[str, float]]:
        from kolong.retrieval.readers import dense_scores
        from kolong.retrieval.task import Document, Query, RetrievalTask

        any_document = next(iter(self.corpus))
        task = RetrievalTask("mteb", {d: Document(d, text) for d, text in self.corpus.items()},
                             [Query(str(row["id"]), _text(row), {any_document: 1}) for row in queries])  # fmt: skip
        scores = dense_scores(self.embedder, task, self.reader, self.length, self.batch_size, measure_memory=False,
                              chunk_tokens=self.chunk_tokens).scores  # fmt: skip
        return {query: dict(sorted(ranked.items(), key=lambda item: -item[1])[:top_k])
                for query, ranked in scores.items()}  # fmt: skip


def _text(row) -> str:
    """A corpus or query row's text (MTEB joins a title to its text the same way)."""
    title = (row.get("title") or "").strip() if hasattr(row, "get") else ""
    return f"{title} {row['text']}".strip() if title else row["text"]


def encoder(embedder, label: str, length: int):
    """MTEB's encoder protocol over the sentence-transformers model reading `length` tokens."""
    from mteb import SentenceTransformerEncoderWrapper

    embedder.max_seq_length = length
    wrapped = SentenceTransformerEncoderWrapper(embedder)
    wrapped.mteb_model_meta = model_meta(embedder, label, length)
    return wrapped


def reader_model(
    embedder, reader: str, length: int, label: str, chunk_tokens: int | str = 256, batch_size: int = 8
):
    """The MTEB model of one kolong reader (the embedder already extended in memory where `length` needs it)."""
    if reader == "truncate":
        return encoder(embedder, label, length)
    return ChunkSearch(embedder, reader, length, label, chunk_tokens, batch_size)


def local_task(path: str | Path):
    """A kolong task file as an MTEB retrieval task (one pool: MTEB ranks one corpus a subset)."""
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata

    from kolong.retrieval.task import read_task

    task = read_task(path)
    if len(task.pools()) > 1:
        raise ConfigError(f"{path}: {len(task.pools())} candidate pools; an MTEB task ranks one corpus, so give a task "
                          "of one pool (the articles, context or paragraphs tasks)")  # fmt: skip
    name = f"kolong-{task.name}"
    metadata = TaskMetadata(
        name=name, description=f"kolong's {task.name} task ({Path(path).name}), read by MTEB.",
        reference=None, dataset={"path": f"local/{name}", "revision": "local"}, type="Retrieval", category="t2t",
        modalities=["text"], eval_splits=["test"], eval_langs=[KOREAN], main_score="ndcg_at_10", date=None,
        domains=["Encyclopaedic", "Written"], task_subtypes=["Question answering"], license="not specified",
        annotations_creators="derived", dialect=[], sample_creation="found", bibtex_citation="",
    )  # fmt: skip

    class LocalTask(AbsTaskRetrieval):
        def load_data(self, num_proc=None, **kwargs) -> None:
            if self.data_loaded:
                return
            corpus = Dataset.from_list(
                [{"id": d.id, "text": d.text, "title": ""} for d in task.documents.values()]
            )
            queries = Dataset.from_list([{"id": q.id, "text": q.text} for q in task.queries])
            relevant = {q.id: dict(q.relevant) for q in task.queries}
            self.dataset = {"default": {"test": {"corpus": corpus, "queries": queries, "relevant_docs": relevant,
                                                 "top_ranked": None}}}  # fmt: skip
            self.data_loaded = True

    LocalTask.metadata = metadata
    LocalTask.__name__ = LocalTask.__qualname__ = name.replace("-", "_")
    found = LocalTask()
    found.kolong_task = task
    return found


def hub_tasks(names: list[str], languages: list[str]):
    """MTEB's tasks by name, restricted to `languages` (ISO 639-3, e.g. `kor`); refused in one line when unknown."""
    mteb = require_mteb()
    known = {task.metadata.name for task in mteb.get_tasks()}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ConfigError(f"--tasks: MTEB has no task {unknown[0]!r}; `python -c \"import mteb; print([t.metadata.name "
                          "for t in mteb.get_tasks(task_types=['Retrieval'])])\"` lists them")  # fmt: skip
    import logging
    import warnings

    # MTEB warns and skips a task with no subset in the languages (a log line and a warning): refused below instead
    logger, level = logging.getLogger("mteb"), logging.getLogger("mteb").level
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            logger.setLevel(logging.ERROR)
            found = list(mteb.get_tasks(tasks=names, languages=languages or None))
    except (KeyError, ValueError) as error:
        raise ConfigError(f"--languages {','.join(languages)}: {error}") from None
    finally:
        logger.setLevel(level)
    missing = [name for name in names if name not in {task.metadata.name for task in found}]
    if missing:
        (task,) = mteb.get_tasks(tasks=missing[:1])
        raise ConfigError(f"--languages {','.join(languages)}: MTEB's {missing[0]} has none of them (its languages: "
                          f"{', '.join(sorted(task.metadata.languages))})")  # fmt: skip
    return found


def per_query_ndcg(
    predictions: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]
) -> dict[str, float]:
    """nDCG@10 of each query from a run's rankings, with the same ir-measures `kolong evaluate retrieval` uses."""
    from kolong.retrieval.evaluate import per_query

    values = per_query(qrels, predictions, (10,))["nDCG@10"]
    return {query: float(values[query]) for query in qrels}


def mean(values: dict[str, float]) -> float:
    return float(np.mean(list(values.values()))) if values else float("nan")


def evaluate_mteb(model: str, tasks: list, *, lengths, readers, extensions=(), pooling=None, chunk_tokens=256,
                  batch_size: int = 8, device: str = "cpu", output_dir: str | Path, margin: float = 0.02,
                  compare=(), seed: int = 0, on_row=None) -> list[dict]:  # fmt: skip
    """Every reader of `plan_readers` on each MTEB task, evaluated by MTEB (its result files under
    `output_dir/mteb`, its rankings under `output_dir/predictions`); per task, kolong's rows: MTEB's nDCG@10, each
    query's (from MTEB's rankings, with ir-measures), and the verdicts against the first reader and `compare`."""
    import json
    import warnings

    from kolong.evaluation.verdicts import check_margin
    from kolong.retrieval.evaluate import (
        check_compared,
        check_late_chunking,
        extended_copy,
        plan_readers,
        rows_verdict,
    )
    from kolong.retrieval.readers import load_embedder, positions_of

    mteb = require_mteb()
    check_margin(margin)
    dense = [r for r in readers if r != "bm25"]
    if not dense:
        raise ConfigError(
            "--readers: MTEB scores embedding models; give truncate, chunk-max, chunk-mean or late-chunk"
        )
    base = load_embedder(model, pooling, device)
    plan, skipped = plan_readers([model], lengths, dense, extensions, lambda m: positions_of(base))
    check_late_chunking(plan, lambda m: base, chunk_tokens)
    check_compared(plan, compare)
    output_dir = Path(output_dir)
    cache = mteb.ResultCache(cache_path=str(output_dir / "mteb"))
    for task in tasks:  # a hub task whose files cannot be had is named before any reading
        try:
            task.load_data()
        except Exception as error:  # datasets / hub errors of every kind, offline above all
            name = task.metadata.name
            raise ConfigError(f"MTEB task {name}: its files are not on this machine and could not be downloaded "
                              f"({type(error).__name__}); run it where the Hugging Face hub is reachable, or with "
                              f"HF_HOME pointing at a copy of {task.metadata.dataset['path']}") from None  # fmt: skip
    found = []
    for task in tasks:
        rows = []
        for row in plan:
            if on_row:
                on_row(f"{task.metadata.name}: {row.label}")
            embedder = extended_copy(base, row.length, row.extension) if row.extension else base
            reader = reader_model(embedder, row.reader, row.length, row.label, chunk_tokens, batch_size)
            predictions = output_dir / "predictions" / reader.mteb_model_meta.model_name_as_path()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                result = mteb.evaluate(reader, [task], cache=cache, prediction_folder=str(predictions),
                                       show_progress_bar=False, overwrite_strategy="always")  # fmt: skip
            (task_result,) = result.task_results
            ranked = json.loads(
                (predictions / f"{task.metadata.name}_predictions.json").read_text(encoding="utf-8")
            )
            per_query = {}
            for subset, splits in task.dataset.items():
                for split, data in splits.items():
                    qrels = {
                        q: {d: int(g) for d, g in docs.items()} for q, docs in data["relevant_docs"].items()
                    }
                    scores = per_query_ndcg(ranked[subset][split], qrels)
                    per_query.update(
                        {
                            f"{subset}/{split}/{q}" if len(task.dataset) > 1 else q: v
                            for q, v in scores.items()
                        }
                    )
            rows.append({"reader": row.label, "kind": row.reader, "length": row.length, "extension": row.extension,
                         "mteb_ndcg10": float(task_result.get_score()), "ndcg10": mean(per_query),
                         "per_query_ndcg10": per_query, "mteb_model": reader.mteb_model_meta.name})  # fmt: skip
        groups = _groups(task, rows[0]["per_query_ndcg10"]) if rows else None

        for row in rows[1:]:
            row["ndcg10_minus_first"] = rows_verdict(row, rows[0], groups, margin, seed)
        by_label = {row["reader"]: row for row in rows}
        pairs = [
            {"a": a, "b": b, **rows_verdict(by_label[a], by_label[b], groups, margin, seed)}
            for a, b in compare
        ]
        found.append({"task": task.metadata.name, "rows": rows, "comparisons": pairs, "skipped": skipped,
                      "unit": "article" if groups else "query", "coverage": 0.95, "margin": margin})  # fmt: skip
    return found


def _groups(task, ids) -> dict[str, str] | None:
    """Each query's group where the task is a kolong file that gives them (MTEB's own tasks give none)."""
    local = getattr(task, "kolong_task", None)
    if local is None or local.queries[0].group is None:
        return None
    return {q.id: q.group for q in local.queries if q.id in ids}


def markdown(found: list[dict]) -> str:
    from kolong.evaluation.verdicts import header

    lines = []
    for item in found:
        lines += [f"## {item['task']}", "",
                  f"nDCG@10 as MTEB scores it; `vs first`: each query's nDCG@10 (from MTEB's rankings) minus the first "
                  f"reader's, {header(item['unit'], item['margin'])}.", "",
                  "| reader | MTEB model name | nDCG@10 | vs first |", "|---|---|---:|---|"]  # fmt: skip
        for row in item["rows"]:
            d = row.get("ndcg10_minus_first")
            cell = (f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] {d['verdict']} (detectable "
                    f"{d['minimum_detectable']:.3f})") if d else "—"  # fmt: skip
            lines.append(f"| {row['reader']} | `{row['mteb_model']}` | {row['mteb_ndcg10']:.4f} | {cell} |")
        for c in item["comparisons"]:
            lines.append(
                f"\n{c['a']} - {c['b']}: {c['mean']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}] {c['verdict']}"
            )
        lines += [f"\nSkipped: {s}." for s in item["skipped"]] + [""]
    return "\n".join(lines)
