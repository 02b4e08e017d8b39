"""A retrieval task: documents, queries and relevance judgements, in one JSON-lines file.

Every line is one object with one key:

    {"task": {"name": "needle", "seed": 0, ...}}                       (optional, first: how it was built)
    {"document": {"id": "d1", "text": "...", "pool": "2048", "source": "article-7"}}
    {"query": {"id": "q1", "text": "...", "relevant": {"d1": 1}, "target_start": 1234, "pool": "2048",
               "group": "article-7"}}

`relevant` maps document ids to grades (a list of ids means grade 1 each). `target_start` (optional) is the
character offset in the relevant document where the answer or the inserted sentence begins: the evaluator
turns it into a token depth. `pool` (optional) splits the task into independent candidate pools, as LongEmbed
ranks each length separately: a query is ranked against the documents of its own pool only. `group` (optional)
names what makes queries dependent, such as the article they were asked of: comparisons of readers then resample
whole groups (`kolong.evaluation.verdicts`); give it to every query or to none. `source` (optional) names the
longer text a document is a passage of, its passages in file order: the `late-chunk` reader reads a source's
passages joined, one per line, and embeds each passage from the states of the whole (ConTEB's setting), where the
other readers see each passage alone. Errors name the file and line.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kolong.errors import DataError
from kolong.io import atomic_output_file

DEFAULT_POOL = ""


@dataclass
class Query:
    id: str
    text: str
    relevant: dict[str, int]
    target_start: int | None = None
    pool: str = DEFAULT_POOL
    group: str | None = None  # what makes queries dependent (their article): comparisons resample by it


@dataclass
class Document:
    id: str
    text: str
    pool: str = DEFAULT_POOL
    source: str | None = None  # the longer text this document is a passage of (late chunking reads it whole)


@dataclass
class RetrievalTask:
    name: str
    documents: dict[str, Document]
    queries: list[Query]
    settings: dict = field(default_factory=dict)

    def pools(self) -> dict[str, list[str]]:
        """pool -> its document ids, in file order."""
        pools: dict[str, list[str]] = {}
        for document in self.documents.values():
            pools.setdefault(document.pool, []).append(document.id)
        return pools

    def check(self, source: str = "the task") -> None:
        """Refuse judgements that point at a missing document or outside the query's pool."""
        if not self.queries:
            raise DataError(f"{source} has no queries")
        for query in self.queries:
            for document_id in query.relevant:
                document = self.documents.get(document_id)
                if document is None:
                    raise DataError(
                        f"{source}: query {query.id!r} judges document {document_id!r}, which it does not hold"
                    )
                if document.pool != query.pool:
                    raise DataError(
                        f"{source}: query {query.id!r} (pool {query.pool!r}) judges document {document_id!r} of "
                        f"pool {document.pool!r}; a query is ranked against its own pool only"
                    )

    def require_candidates(self, k: int) -> None:
        """Refuse a pool with fewer documents than the cut-off k of the measures (recall@k would be trivial)."""
        sizes = Counter(document.pool for document in self.documents.values())
        short = {pool or "(one pool)": size for pool, size in sizes.items() if size < k}
        if short:
            pool, size = next(iter(short.items()))
            raise DataError(
                f"task {self.name!r}: pool {pool} has {size} candidate documents, fewer than k={k}; "
                "add documents or lower --k"
            )


def _object(line: str, where: str) -> dict:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        raise DataError(f"{where}: not valid JSON ({error.msg})") from None
    if (
        not isinstance(value, dict)
        or len(value) != 1
        or next(iter(value)) not in ("task", "document", "query")
    ):
        raise DataError(f'{where}: each line is one object with one key, "task", "document" or "query"')
    return value


def _text(record: dict, key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: {key!r} must be a non-empty string")
    return value


def _relevant(record: dict, where: str) -> dict[str, int]:
    value = record.get("relevant")
    if isinstance(value, list):
        value = dict.fromkeys(value, 1)
    if not isinstance(value, dict) or not value:
        raise DataError(
            f"{where}: 'relevant' must be a non-empty list of document ids or an object id -> grade"
        )
    if not all(
        isinstance(k, str) and isinstance(g, int) and not isinstance(g, bool) for k, g in value.items()
    ):
        raise DataError(f"{where}: 'relevant' maps document ids (strings) to integer grades")
    if not any(grade > 0 for grade in value.values()):
        raise DataError(f"{where}: 'relevant' has no document with a positive grade")
    return {str(k): int(g) for k, g in value.items()}


def read_task(path: str | Path) -> RetrievalTask:
    """A task from its JSON-lines file; every malformed line refused with file and line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such task file (make one with `kolong data retrieval`)")
    settings: dict = {}
    documents: dict[str, Document] = {}
    queries: list[Query] = []
    seen_queries: set[str] = set()
    with path.open(encoding="utf-8") as handle:
        try:
            lines = list(enumerate(handle, 1))
        except UnicodeDecodeError as error:
            raise DataError(f"{path}: not UTF-8 text ({error.reason})") from None
    for number, line in lines:
        where = f"{path}:{number}"
        if not line.strip():
            raise DataError(f"{where}: empty line (each line is one task, document or query)")
        ((kind, record),) = _object(line, where).items()
        if not isinstance(record, dict):
            raise DataError(f"{where}: {kind!r} must be an object")
        if kind == "task":
            settings = record
            continue
        identifier = record.get("id")
        if not isinstance(identifier, str) or not identifier:
            raise DataError(f"{where}: the {kind} needs a non-empty string 'id'")
        pool = str(record.get("pool", DEFAULT_POOL))
        if kind == "document":
            if identifier in documents:
                raise DataError(f"{where}: document id {identifier!r} appears twice")
            source = record.get("source")
            if source is not None and (not isinstance(source, str) or not source):
                raise DataError(
                    f"{where}: 'source' must be a non-empty string (the text the document is a passage of)"
                )
            documents[identifier] = Document(identifier, _text(record, "text", where), pool, source)
            continue
        if identifier in seen_queries:
            raise DataError(f"{where}: query id {identifier!r} appears twice")
        seen_queries.add(identifier)
        start = record.get("target_start")
        if start is not None and (not isinstance(start, int) or start < 0):
            raise DataError(f"{where}: 'target_start' must be a character offset (an integer >= 0)")
        group = record.get("group")
        if group is not None and (not isinstance(group, str) or not group):
            raise DataError(f"{where}: 'group' must be a non-empty string (what the query belongs to)")
        queries.append(
            Query(identifier, _text(record, "text", where), _relevant(record, where), start, pool, group)
        )
    task = RetrievalTask(str(settings.get("name", path.stem)), documents, queries, settings)
    task.check(str(path))
    grouped = sum(query.group is not None for query in queries)
    if 0 < grouped < len(queries):
        raise DataError(
            f"{path}: {grouped} of {len(queries)} queries have a 'group': give every query one, or none"
        )
    return task


def write_task(task: RetrievalTask, path: str | Path, overwrite: bool = False) -> Path:
    """Write `task` as JSON lines, atomically."""
    with atomic_output_file(path, overwrite) as staging, Path(staging).open("w", encoding="utf-8") as handle:
        handle.write(json.dumps({"task": {"name": task.name, **task.settings}}, ensure_ascii=False) + "\n")
        for document in task.documents.values():
            record = {"id": document.id, "text": document.text, "pool": document.pool}
            if document.source is not None:
                record["source"] = document.source
            handle.write(json.dumps({"document": record}, ensure_ascii=False) + "\n")
        for query in task.queries:
            record = {"id": query.id, "text": query.text, "relevant": query.relevant, "pool": query.pool}
            if query.target_start is not None:
                record["target_start"] = query.target_start
            if query.group is not None:
                record["group"] = query.group
            handle.write(json.dumps({"query": record}, ensure_ascii=False) + "\n")
    return Path(path)
