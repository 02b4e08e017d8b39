"""`kolong evaluate retrieval`: readers of one task compared on the same queries, in one run.

Per reader: nDCG@10 (MTEB's main retrieval score), MRR@10 and recall@k from ir-measures (pytrec_eval
underneath), each the mean over queries with a bootstrap interval; the same by the relevant document's length
(its pool for the haystack tasks) and by the target's depth (its first token between the `depth_split`
tokens); the paired difference of nDCG@10 against the first reader, with its interval by the
queries' group (their article) where the task gives one, and the verdict of kolong's rule
(`evaluation.verdicts`); encoding throughput (documents/s, tokens/s) with peak memory; and each dense reader
fused with BM25 by reciprocal rank fusion (the hybrid a RAG pipeline runs).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kolong.errors import ConfigError
from kolong.evaluation.bootstrap import interval
from kolong.evaluation.verdicts import check_margin, default_margin, header, paired_verdict, plural
from kolong.retrieval.readers import DENSE, Encoded, bm25_scores, dense_scores, load_embedder, positions_of

LENGTH_EDGES = (512, 1024, 2048, 4096, 8192)
MARGIN = default_margin("ndcg@10")


@dataclass
class Reader:
    """One row of the comparison: a model (or BM25), how it reads, and at what length."""

    label: str
    model: str | None  # None: BM25
    reader: str = "bm25"
    length: int = 0
    extension: str | None = None  # a training-free extension applied in memory ("copy", "interpolate", ...)


@dataclass
class RetrievalEvaluation:
    task: str
    queries: int
    documents: int
    rows: list[dict] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    query_groups: dict[str, str] | None = None  # query id -> its group (article), where the task gives one
    comparisons: list[dict] = field(default_factory=list)  # the pairs of --compare, by the verdict rule


def measures(k: Sequence[int]):
    import ir_measures
    from ir_measures import RR, R, nDCG

    return ir_measures, [nDCG @ 10, RR @ 10, *(R @ n for n in k)]


def per_query(qrels: dict, run: dict, k: Sequence[int]) -> dict[str, dict[str, float]]:
    """measure name -> {query id: value}; a query the run ranks nothing for scores 0."""
    library, chosen = measures(k)
    values = {str(m): dict.fromkeys(qrels, 0.0) for m in chosen}
    for metric in library.iter_calc(chosen, qrels, run):
        values[str(metric.measure)][metric.query_id] = float(metric.value)
    return values


def plan_readers(models: Sequence[str], lengths: Sequence[int], readers: Sequence[str],
                 extensions: Sequence[str], positions: Callable[[str], int]) -> tuple[list[Reader], list[str]]:  # fmt: skip
    """(rows, skipped): every model at each length within its positions by each dense reader; past them, read whole
    by each training-free extension. Without extensions, a model that cannot read a length is skipped there (said
    in `skipped`) while another model reads it, and refused when none does, naming the way to extend."""
    from kolong.extension.rope import ROPE_METHODS
    from kolong.extension.tables import METHODS

    known = (*METHODS, "interpolate+keep-short", *ROPE_METHODS)
    unknown_methods = [m for m in extensions if m not in known]
    if unknown_methods:  # before any reading: a typo found after the shorter lengths ran would waste them
        raise ConfigError(f"--extend: unknown {unknown_methods[0]!r}; choose from {', '.join(known)}")
    rows, skipped = [], []
    dense = [r for r in readers if r != "bm25"]
    unknown = [r for r in dense if r not in DENSE]
    if unknown:
        raise ConfigError(
            f"--readers: unknown {', '.join(unknown)}; choose from {', '.join((*DENSE, 'bm25'))}"
        )
    for length in lengths:
        short = []
        for model in models:
            name, most = Path(model).name or model, positions(model)
            if length <= most:
                rows += [Reader(f"{name} {r}@{length}", model, r, length) for r in dense]
            elif extensions:  # read whole past the positions, named for what it does: `whole@2048 (copy)`
                whole = [r for r in dense if r in ("truncate", "late-chunk")]
                rows += [Reader(f"{name} {'whole' if r == 'truncate' else r}@{length} ({m})", model, r, length, m)
                         for m in extensions for r in whole]  # fmt: skip
            else:
                short.append((model, most))
        if short and len(short) == len(models):
            model, most = short[0]
            raise ConfigError(
                f"--max-length {length} is past the {most} positions {model} reads; pass --extend copy (or another "
                f"method) to extend it in memory, or extend it first with `kolong extend {model} -n {length}`"
            )
        skipped += [f"{model} at {length} tokens (it reads {most}; no --extend)" for model, most in short]
    rows += [Reader("bm25", None)] if "bm25" in readers else []  # last: the first row is the reference
    if not rows:
        raise ConfigError("nothing to evaluate: give a model, or --readers bm25")
    return rows, skipped


def extended_copy(embedder, length: int, method: str):
    """A copy of `embedder` extended in memory to `length` tokens by `method` (without training)."""
    from kolong.extension import extend_position_embeddings
    from kolong.extension.embedding_model import set_max_seq_length, transformer_of

    extended = copy.deepcopy(embedder)
    keep_short = method == "interpolate+keep-short"
    extend_position_embeddings(transformer_of(extended), length, "interpolate" if keep_short else method,
                               keep_short_behaviour=keep_short)  # fmt: skip
    set_max_seq_length(extended, length)
    return extended


def token_lengths_and_depths(tokenizer, task) -> tuple[dict[str, int], dict[str, int | None]]:
    """Each document's length and each query's target depth in tokens of `tokenizer` (specials left out)."""
    # each document tokenized once: its length, and the offsets its queries' depths are read from
    offsets = {document_id: tokenizer(document.text, add_special_tokens=False, truncation=False,
                                      return_offsets_mapping=True)["offset_mapping"]
               for document_id, document in task.documents.items()}  # fmt: skip
    lengths = {document_id: len(spans) for document_id, spans in offsets.items()}
    depths = {}
    for query in task.queries:
        spans = offsets[next(iter(query.relevant))]
        start = query.target_start
        depths[query.id] = None if start is None else sum(1 for begin, _ in spans if begin < start)
    return lengths, depths


def length_bucket(tokens: int) -> str:
    for edge in LENGTH_EDGES:
        if tokens <= edge:
            return f"<={edge}"
    return f">{LENGTH_EDGES[-1]}"


def bucket_order(label: str) -> tuple[int, int]:
    """A sort key that puts bucket labels in the order of their tokens: "<512", "512-1023", ">=2048"; "<=512",
    "<=1024", ">8192"; "512", "1024" (a bucket's order of first appearance follows the queries, not the tokens)."""
    import re

    found = re.search(r"\d+", label)
    number = int(found.group()) if found else 0
    return number, 0 if label.startswith("<") else 2 if label.startswith(">") else 1


def depth_bucket(depth: int, splits: Sequence[int]) -> str:
    """The bucket of a target's first token between the ascending `splits`: "<512", "512-2047", ">=2048"."""
    if depth < splits[0]:
        return f"<{splits[0]}"
    for low, high in itertools.pairwise(splits):
        if depth < high:
            return f"{low}-{high - 1}"
    return f">={splits[-1]}"


def buckets(
    task, lengths: dict[str, int], depths: dict, depth_split: int | Sequence[int]
) -> dict[str, dict[str, str]]:
    """kind -> {query id: bucket}: "length" (the pool, or the relevant document's token count) and "depth" (the
    target's first token between the `depth_split` tokens)."""
    splits = sorted({depth_split} if isinstance(depth_split, int) else set(depth_split))
    if not splits or splits[0] < 1:
        raise ConfigError(f"--depth-split must be token counts of at least 1, got {depth_split}")
    by_length, by_depth = {}, {}
    for query in task.queries:
        relevant = next(iter(query.relevant))
        by_length[query.id] = query.pool if query.pool else length_bucket(lengths[relevant])
        if depths[query.id] is not None:
            by_depth[query.id] = depth_bucket(depths[query.id], splits)
    return {"length": by_length, "depth": by_depth}


def summarise(reader: Reader, encoded: Encoded, values: dict, groups: dict, reference: dict | None,
              documents: int, seed: int, margin: float = MARGIN, query_groups: dict | None = None) -> dict:  # fmt: skip
    ids = sorted(values["nDCG@10"])
    row = {"reader": reader.label, "model": reader.model, "kind": reader.reader, "length": reader.length,
           "extension": reader.extension,
           "metrics": {name: interval([v[q] for q in ids], seed=seed) for name, v in values.items()},
           "per_query_ndcg10": {q: values["nDCG@10"][q] for q in ids},
           "documents_per_second": documents / encoded.seconds if encoded.seconds else None,
           "tokens_per_second": encoded.tokens / encoded.seconds if encoded.seconds else None,
           "encode_seconds": encoded.seconds, "peak_memory_mb": encoded.peak_mb}  # fmt: skip
    for kind, assigned in groups.items():
        row[f"by_{kind}"] = {
            bucket: interval([values["nDCG@10"][q] for q in ids if assigned.get(q) == bucket], seed=seed)
            for bucket in sorted(set(assigned.values()), key=_bucket_order)
        }
    if reference is not None:
        row["ndcg10_minus_first"] = rows_verdict(row, reference, query_groups, margin, seed)
    return row


def rows_verdict(first: dict, second: dict, query_groups: dict | None, margin: float, seed: int) -> dict:
    """The verdict rule on two readers' per-query nDCG@10 (first - second over the same queries), resampled by the
    queries' groups where there are any."""
    ids = sorted(first["per_query_ndcg10"])
    return paired_verdict([first["per_query_ndcg10"][q] for q in ids], [second["per_query_ndcg10"][q] for q in ids],
                          margin=margin, seed=seed, groups=[query_groups[q] for q in ids] if query_groups else None)  # fmt: skip


def _bucket_order(bucket: str):
    digits = "".join(c for c in bucket if c.isdigit())
    return (int(digits) if digits else 0, bucket)


def evaluate_retrieval(
    task,
    models: Sequence[str],
    *,
    lengths: Sequence[int] = (512,),
    readers: Sequence[str] = ("truncate", "chunk-max", "chunk-mean", "bm25"),
    extensions: Sequence[str] = (),
    pooling: str | None = None,
    k: Sequence[int] = (1, 10),
    depth_split: int | Sequence[int] = 512,
    batch_size: int = 8,
    device: str = "cpu",
    seed: int = 0,
    hybrid: bool = True,
    margin: float = MARGIN,
    chunk_tokens: int | str = 256,
    compare: Sequence[tuple[str, str]] = (),
    on_row: Callable[[str], None] | None = None,
) -> RetrievalEvaluation:
    """Every reader of `plan_readers` on `task`; rows in order, the first the reference of the differences. With
    BM25 among the readers and `hybrid`, each dense reader is also fused with BM25 (reciprocal rank fusion): does a
    reader that sees the whole document add to the lexical one?"""
    task.require_candidates(max(k))
    check_margin(margin)
    query_groups = {q.id: q.group for q in task.queries} if task.queries[0].group is not None else None
    if query_groups is not None and len(set(query_groups.values())) < 2:
        raise ConfigError(
            f"task {task.name!r}: every query is in one group; differences need at least two groups"
        )
    comparison = {"unit": "article" if query_groups else "query", "coverage": 0.95, "margin": margin,
                  "groups": len(set(query_groups.values())) if query_groups else len(task.queries)}  # fmt: skip
    loaded: dict[str, object] = {}

    def embedder(model: str):
        if model not in loaded:
            loaded[model] = load_embedder(model, pooling, device)
        return loaded[model]

    plan, skipped = plan_readers(models, lengths, readers, extensions, lambda m: positions_of(embedder(m)))
    check_late_chunking(plan, embedder, chunk_tokens)
    check_compared(plan, compare, "bm25" in readers and hybrid)
    encodings: dict[
        tuple, dict
    ] = {}  # one per model, length and extension: chunk-max and chunk-mean share it
    tokenizer = embedder(models[0])[0].tokenizer if models else None
    if tokenizer is not None:
        token_lengths, depths = token_lengths_and_depths(tokenizer, task)
    else:
        token_lengths = {d: len(t.text) for d, t in task.documents.items()}
        depths = {q.id: q.target_start for q in task.queries}
    groups = buckets(task, token_lengths, depths, depth_split)
    qrels = {q.id: q.relevant for q in task.queries}
    result = RetrievalEvaluation(task.name, len(task.queries), len(task.documents),
                                 settings={"k": list(k), "depth_split": depth_split, "seed": seed,
                                           "depth_tokens_of": models[0] if models else "characters",
                                           "task": task.settings, "skipped": skipped,
                                           "comparison": comparison}, query_groups=query_groups)  # fmt: skip
    dense_runs: list[tuple[Reader, Encoded]] = []
    for reader in plan:
        if on_row:
            on_row(reader.label)
        if reader.model is None:
            encoded = bm25_scores(task)
        else:
            model = embedder(reader.model)
            if reader.extension:
                model = extended_copy(model, reader.length, reader.extension)
            cache = encodings.setdefault((reader.model, reader.length, reader.extension), {})
            encoded = dense_scores(model, task, reader.reader, reader.length, batch_size, chunk_tokens=chunk_tokens,
                                   cache=cache)  # fmt: skip
            dense_runs.append((reader, encoded))
        values = per_query(qrels, encoded.scores, k)
        reference = result.rows[0] if result.rows else None
        result.rows.append(summarise(reader, encoded, values, groups, reference, len(task.documents), seed, margin,
                                     query_groups))  # fmt: skip
        if reader.model is None and hybrid:  # BM25 comes last: every dense run is there to fuse with it
            for dense, dense_encoded in dense_runs:
                fused = Encoded(fused_scores(encoded.scores, dense_encoded.scores), dense_encoded.seconds + encoded.seconds,
                                dense_encoded.tokens, dense_encoded.peak_mb)  # fmt: skip
                label = Reader(
                    f"bm25 + {dense.label}",
                    dense.model,
                    f"hybrid {dense.reader}",
                    dense.length,
                    dense.extension,
                )
                result.rows.append(summarise(label, fused, per_query(qrels, fused.scores, k), groups, result.rows[0],
                                             len(task.documents), seed, margin, query_groups))  # fmt: skip
    result.comparisons = compared(result, compare, margin, seed)
    return result


def check_late_chunking(plan: list[Reader], embedder, chunk_tokens) -> None:
    """Refuse, before any reading, a late-chunk reader the model cannot pool or the chunk size cannot fit."""
    from kolong.retrieval.late_chunking import check_chunk_tokens, check_mean_pooling

    for reader in plan:
        if reader.reader == "late-chunk":
            check_chunk_tokens(chunk_tokens, reader.length)
            check_mean_pooling(embedder(reader.model), reader.model)


def check_compared(plan: list[Reader], compare: Sequence[tuple[str, str]], hybrids: bool = False) -> None:
    """Refuse, before any reading, a --compare pair naming a reader this run does not have."""
    labels = {reader.label for reader in plan}
    if hybrids:
        labels |= {f"bm25 + {reader.label}" for reader in plan if reader.model is not None}
    for pair in compare:
        missing = [name for name in pair if name not in labels]
        if missing:
            raise ConfigError(
                f"--compare: no reader {missing[0]!r} in this run; readers: {', '.join(sorted(labels))}"
            )


def compared(
    result: RetrievalEvaluation, pairs: Sequence[tuple[str, str]], margin: float, seed: int
) -> list[dict]:
    """Each chosen pair's paired difference of nDCG@10, A - B over the same queries, by the verdict rule."""
    rows = {row["reader"]: row for row in result.rows}
    return [{"a": first, "b": second, "a_mean": float(np.mean(list(rows[first]["per_query_ndcg10"].values()))),
             "b_mean": float(np.mean(list(rows[second]["per_query_ndcg10"].values()))),
             **rows_verdict(rows[first], rows[second], result.query_groups, margin, seed)}
            for first, second in pairs]  # fmt: skip


# Reciprocal rank fusion's constant (Cormack et al., 2009): ranks past the first few count little.
RRF_K = 60


def fused_scores(first: dict, second: dict) -> dict:
    """Reciprocal rank fusion of two runs over the same queries and candidates: sum of 1 / (RRF_K + rank)."""
    fused = {}
    for query, scores in first.items():
        total = dict.fromkeys(scores, 0.0)
        for run in (scores, second[query]):
            for rank, document in enumerate(sorted(run, key=run.get, reverse=True), 1):
                total[document] += 1.0 / (RRF_K + rank)
        fused[query] = total
    return fused


def markdown(result: RetrievalEvaluation) -> str:
    """The comparison as a markdown table: nDCG@10 [interval], MRR@10, recall@k, by bucket, speed, memory."""
    first = result.rows[0]
    recall = [name for name in first["metrics"] if name.startswith("R@")]
    length_buckets = sorted(first.get("by_length", {}), key=bucket_order)
    depth_buckets = sorted(first.get("by_depth", {}), key=bucket_order)
    head = ["reader", "nDCG@10 [95% CI]", "MRR@10", *recall, *(f"nDCG@10 len {b}" for b in length_buckets),
            *(f"nDCG@10 depth {b}" for b in depth_buckets), "vs first", "docs/s", "peak MB"]  # fmt: skip
    counts = {**{f"nDCG@10 len {b}": first["by_length"][b]["n"] for b in length_buckets},
              **{f"nDCG@10 depth {b}": first["by_depth"][b]["n"] for b in depth_buckets}}  # fmt: skip
    head = [f"{name} (n={counts[name]})" if name in counts else name for name in head]
    skipped = "".join(f" Skipped: {s}." for s in result.settings.get("skipped", []))
    comparison = result.settings.get(
        "comparison", {"unit": "query", "margin": MARGIN, "groups": result.queries}
    )
    rule = (f"`vs first`: nDCG@10 minus the first row's on the same queries, {header(comparison['unit'], comparison['margin'])} "
            f"({comparison['groups']} {plural(comparison['groups'], comparison['unit'])}); beside it the smallest difference these queries detect "
            "with 80% power (kolong.evaluation.verdicts).")  # fmt: skip
    lines = [f"Task `{result.task}`: {result.queries} queries, {result.documents} documents.{skipped}", "", rule, "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]  # fmt: skip
    for row in result.rows:
        m = row["metrics"]
        cells = [row["reader"], f"{m['nDCG@10']['mean']:.3f} [{m['nDCG@10']['low']:.3f}, {m['nDCG@10']['high']:.3f}]",
                 f"{m['RR@10']['mean']:.3f}", *(f"{m[name]['mean']:.3f}" for name in recall),
                 *(f"{row['by_length'][b]['mean']:.3f}" for b in length_buckets),
                 *(f"{row['by_depth'][b]['mean']:.3f}" for b in depth_buckets)]  # fmt: skip
        difference = row.get("ndcg10_minus_first")
        cells.append(f"{difference['mean']:+.3f} [{difference['low']:+.3f}, {difference['high']:+.3f}] "
                     f"{difference['verdict']} (detectable {difference['minimum_detectable']:.3f})"
                     if difference else "—")  # fmt: skip
        cells.append(f"{row['documents_per_second']:.1f}" if row["documents_per_second"] else "—")
        cells.append(f"{row['peak_memory_mb']:.0f}" if row["model"] else "—")
        lines.append("| " + " | ".join(cells) + " |")
    if result.comparisons:
        unit = result.comparisons[0]["unit"]
        lines += ["", f"Chosen comparisons (`--compare`), nDCG@10 A - B, {header(unit, result.comparisons[0]['margin'])}:",
                  "", "| A | B | A | B | A - B [95% interval] | verdict | detectable |", "|---|---|---:|---:|---|---|---:|"]  # fmt: skip
        for c in result.comparisons:
            lines.append(f"| {c['a']} | {c['b']} | {c['a_mean']:.3f} | {c['b_mean']:.3f} | {c['mean']:+.3f} "
                         f"[{c['low']:+.3f}, {c['high']:+.3f}] | {c['verdict']} | {c['minimum_detectable']:.3f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def as_json(result: RetrievalEvaluation) -> dict:
    from dataclasses import asdict

    payload = asdict(result)
    payload["mean_ndcg10"] = {
        row["reader"]: float(np.round(row["metrics"]["nDCG@10"]["mean"], 4)) for row in result.rows
    }
    return payload
