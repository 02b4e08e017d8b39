"""Analysing large batches on every core: forked worker processes run the analyser and the rewriting.

MeCab holds Python's GIL, so threads cannot share its work; processes forked from the caller (no
re-import, the analyser already loaded) rewrite part of a large batch while the caller rewrites the rest,
then the Rust backend encodes the whole batch on all cores. On two cores one forked process analyses most
chunks of a large batch while the caller analyses the others and encodes every chunk done
(`rewrite_chunks`). Small
batches, single-core machines and platforms without `fork` stay in the calling process.
`KOLONG_TOKENIZER_WORKERS=1` turns the processes off; another number sets the pool's size.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import multiprocessing
import os
import re

from kolong.tokenizers.analysers import get_analyser
from kolong.tokenizers.segment import Alignment, rewrite

MIN_CHARACTERS = 100_000  # below this, forking and pickling cost more than they save
# With two cores, this process rewrites this share of a large batch and encodes it while the worker rewrites
# the rest: encoding is this process's extra work, so its share of the analysis is smaller than half.
OWN_SHARE = 0.35
# With two cores and chunks streamed (`rewrite_chunks`), the caller analyses this many of every CHUNK_CYCLE
# chunks itself: besides its share it encodes every chunk and unpickles the worker's, so it takes less.
CALLER_CHUNKS, CHUNK_CYCLE = 1, 4
_pool = None
_pool_size = 0


@contextlib.contextmanager
def one_encoding_thread():
    """The Rust backend encodes on one thread meanwhile (it reads TOKENIZERS_PARALLELISM at every call).

    While a worker process analyses on the other core, the backend's second thread only takes that core from
    it.
    """
    previous = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = previous


def _setting() -> str:
    return os.environ.get("KOLONG_TOKENIZER_WORKERS", "").strip()


def _cores() -> int:
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def available_workers() -> int:
    """Processes (this one included) that share the analysis of a large batch."""
    setting = _setting()
    if setting:
        try:
            return max(1, int(setting))
        except ValueError:
            return 1
    # On two cores the analysis is not split: one process analyses while this one encodes (rewrite_chunks).
    cores = _cores()
    return 1 if cores <= 2 else cores


def streams(lists: list[list] | None = None) -> bool:
    """Whether `rewrite_chunks` analyses these item lists in a worker process (two cores, no setting, a
    batch of at least MIN_CHARACTERS)."""
    if _setting() or _cores() != 2:
        return False
    return lists is None or sum(len(t) for t, _ in lists[0]) >= MIN_CHARACTERS


@functools.lru_cache(maxsize=8)
def _compile(pattern: str | None) -> re.Pattern | None:
    return None if pattern is None else re.compile(pattern)


def _rewrite_one(item, analyser: str, forms: str, normalization: str, pattern: str | None):
    text, word_starts = item
    return rewrite(text, get_analyser(analyser), forms, normalization, _compile(pattern), word_starts)


def _work(job):
    items, analyser, forms, normalization, pattern = job
    return [_rewrite_one(item, analyser, forms, normalization, pattern) for item in items]


def _pack(results: list) -> tuple:
    """Rewritten items in columns: far cheaper to pickle than one object per text. Spans not derived yet
    travel as the analysed text (its marked string is in `marked`)."""
    marked, starts, ends, lengths, layouts, extras = [], [], [], [], [], {}
    for i, (text, alignment) in enumerate(results):
        marked.append(text)
        source = alignment.source
        starts.append(source[0] if source is not None else alignment.start)
        ends.append(None if source is not None else alignment.end)
        lengths.append(alignment.length)
        layouts.append(alignment.layout)
        if (
            alignment.forms
            or alignment.added
            or alignment.nfc is not None
            or alignment.word_starts is not None
        ):
            extras[i] = (alignment.forms, alignment.added, alignment.nfc, alignment.word_starts)
    return marked, starts, ends, lengths, layouts, extras


def _unpack(packed: tuple) -> list:
    marked, starts, ends, lengths, layouts, extras = packed
    results = []
    for i, text in enumerate(marked):
        if ends[i] is None:  # starts[i] is the analysed text
            alignment = Alignment.surfaces(starts[i], text, lengths[i])
        else:
            alignment = Alignment(starts[i], ends[i], lengths[i])
        if i in extras:
            alignment.forms, alignment.added, alignment.nfc, alignment.word_starts = extras[i]
        alignment.layout = layouts[i]
        results.append((text, alignment))
    return results


def _work_packed(job):
    return _pack(_work(job))


def _shutdown() -> None:
    global _pool
    if _pool is not None:
        _pool.terminate()
        _pool = None


def _get_pool(size: int):
    global _pool, _pool_size
    if _pool is None or _pool_size != size:
        _shutdown()
        _pool = multiprocessing.get_context("fork").Pool(size, initializer=worker_ignores_ctrl_c)
        _pool_size = size
        atexit.register(_shutdown)
    return _pool


def distinct(items: list) -> tuple[list, list[int]]:
    """The distinct (text, word_starts) items in first-seen order, and the index of each item among them."""
    index: dict = {}
    unique, order = [], []
    for item in items:
        text, starts = item
        key = (text, None if starts is None else tuple(starts))
        if key not in index:
            index[key] = len(unique)
            unique.append(item)
        order.append(index[key])
    return unique, order


def repetitive(items: list) -> bool:
    """Whether at most half the items are distinct: QA pairs repeat each context for every question (an
    article-level KorQuAD article 43 times on average)."""
    return len(items) >= 4 and 2 * len(distinct(items)[0]) <= len(items)


def rewrite_many(items, analyser: str, forms: str, normalization: str, pattern: str | None) -> list:
    """`rewrite` of every (text, word_starts) item, in order; on several processes for large batches.

    Each distinct item is analysed once (repeated items share the result, whose alignment is read-only).
    With n cores, n - 1 forked workers take (n - 1) / n of the batch while this process does the rest.
    """
    unique, order = distinct(items)
    if len(unique) < len(items):
        done = rewrite_many(unique, analyser, forms, normalization, pattern)
        return [done[k] for k in order]
    cores = available_workers()
    if cores > 1 and len(items) >= 2 * cores and sum(len(t) for t, _ in items) >= MIN_CHARACTERS:
        get_analyser(analyser)  # load it once here: the workers inherit it
        own = len(items) // cores
        rest = items[own:]
        size = max(1, len(rest) // ((cores - 1) * 4))
        jobs = [
            (rest[i : i + size], analyser, forms, normalization, pattern) for i in range(0, len(rest), size)
        ]
        try:
            pending = _get_pool(cores - 1).map_async(_work_packed, jobs, chunksize=1)
        except (OSError, RuntimeError, ValueError):
            _shutdown()
        else:
            mine = _work((items[:own], analyser, forms, normalization, pattern))
            try:
                results = pending.get()
            except (OSError, RuntimeError, ValueError):
                _shutdown()  # a broken pool: do its share here
                return mine + _work((rest, analyser, forms, normalization, pattern))
            return mine + [r for chunk in results for r in _unpack(chunk)]
    return _work((items, analyser, forms, normalization, pattern))


def rewrite_chunks(lists: list[list], chunk: int, analyser: str, forms: str, normalization: str,
                   pattern: str | None, spans: bool = False):  # fmt: skip
    """Per chunk of `chunk` items, the rewritten items of each of the parallel item lists, in order.

    With `streams()`, one forked process analyses most chunks ahead while the caller analyses the others
    (CALLER_CHUNKS of every CHUNK_CYCLE) and consumes (encodes) every chunk done: MeCab holds the GIL, so a
    thread could not overlap it. `spans`: the worker also finds the morphemes' spans (the caller will ask
    for offsets).
    """
    config = (analyser, forms, normalization, pattern)
    jobs = [([items[i : i + chunk] for items in lists], *config) for i in range(0, len(lists[0]), chunk)]
    done = 0
    if streams(lists):
        get_analyser(analyser)  # load it once here: the worker inherits it
        mine = [i % CHUNK_CYCLE < CALLER_CHUNKS for i in range(len(jobs))]
        try:
            worker_jobs = [job for job, caller in zip(jobs, mine, strict=True) if not caller]
            theirs = _get_pool(1).imap(_work_lists_with_spans if spans else _work_lists, worker_jobs)
            for job, caller in zip(jobs, mine, strict=True):
                if caller:
                    yield [_work((items, *config)) for items in job[0]]
                else:
                    yield [_unpack(part) for part in next(theirs)]
                done += 1
        except (OSError, RuntimeError, ValueError):
            _shutdown()  # a broken pool: the remaining chunks are done here
    for chunks, *_ in jobs[done:]:
        yield [_work((items, *config)) for items in chunks]


def _work_lists(job, spans: bool = False):
    lists, analyser, forms, normalization, pattern = job
    packed = []
    for items in lists:
        results = _work((items, analyser, forms, normalization, pattern))
        if spans:
            for _, alignment in results:
                alignment.derive()  # here, in the worker
        packed.append(_pack(results))
    return packed


def _work_lists_with_spans(job):
    return _work_lists(job, spans=True)


class Background:
    """Rewriting of the tail of one or two parallel item lists on the worker processes."""

    def __init__(self, lists: list[list], own: int, config: tuple, pending) -> None:
        self.lists, self.own, self.config, self.pending = lists, own, config, pending

    def result(self) -> list[list]:
        """Per list, the rewritten items from `own` on (done here if the pool broke)."""
        try:
            chunks = self.pending.get()
        except (OSError, RuntimeError, ValueError):
            _shutdown()
            return [_work((items[self.own :], *self.config)) for items in self.lists]
        return [[r for chunk in chunks for r in _unpack(chunk[k])] for k in range(len(self.lists))]


def start_background(lists: list[list], analyser: str, forms: str, normalization: str, pattern: str | None):
    """For a large batch: send the tail of each list to the workers and return a `Background`, else None.

    The caller rewrites the head (`Background.own` items) itself and can encode it while the workers run.
    """
    items = lists[0]
    cores = available_workers()
    characters = sum(len(t) for items_ in lists for t, _ in items_)
    if cores <= 1 or len(items) < 4 * cores or characters < MIN_CHARACTERS:
        return None
    get_analyser(analyser)
    own = int(len(items) * (OWN_SHARE if cores == 2 else 1 / cores))
    rest = len(items) - own
    size = max(1, rest // ((cores - 1) * 4))
    config = (analyser, forms, normalization, pattern)
    jobs = [([lst[i : i + size] for lst in lists], *config) for i in range(own, len(items), size)]
    try:
        pending = _get_pool(cores - 1).map_async(_work_lists, jobs, chunksize=1)
    except (OSError, RuntimeError, ValueError):
        _shutdown()
        return None
    return Background(lists, own, config, pending)


def worker_ignores_ctrl_c() -> None:
    """A pool worker's initializer: Ctrl-C reaches the whole process group, and the command that started the pool
    stops it; a worker that raised too would print its own traceback beside the command's one line."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
