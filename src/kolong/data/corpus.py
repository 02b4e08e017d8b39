"""Pre-training corpora: text files, NSMC reviews and KorQuAD contexts -> a tokenised, packed dataset.

Documents are tokenised in batches, concatenated with [SEP] between documents, and cut into blocks of
`max_length` tokens ([CLS] block [SEP]), RoBERTa's FULL-SENTENCES packing. Each block stores, next to
`input_ids`, two group ids per token for whole-word masking: `eojeol_ids` (whitespace-separated words of
the original text, found through the tokenizer's character offsets) and `morpheme_ids` (the tokenizer's
pre-tokens, `word_ids()`: morphemes for kolong's morpheme tokenizer, words for WordPiece); -1 marks
special tokens. A held-out share of *documents* (not blocks) goes to the `validation` split, so no
document is on both sides.

The dataset is written with HF `datasets` (Arrow files on disk, memory-mapped when loaded), so corpora
larger than RAM work; `corpus.json` beside it records the tokenizer, its vocabulary size, the block
length and counts, and `kolong pretrain mlm` checks them against the model before training starts.
"""

from __future__ import annotations

import bisect
import json
import random
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from kolong.data.documents import Corpus
from kolong.data.shared import missing, shared_root
from kolong.errors import CorpusError, DataError
from kolong.io import writes_output

SHARED_SOURCES = {
    "nsmc": ("nsmc/reviews.shared.tsv.gz", 4),  # (file under the shared data folder, TSV column)
    "korquad": ("korquad/KorQuAD_v1.0_dev.shared.json", None),
    "klue": ("klue", None),  # the sentences of the KLUE dev sets (a folder)
}
METADATA = "corpus.json"


@dataclass
class CorpusStats:
    sources: list[str] = field(default_factory=list)
    tokenizer: str = ""
    vocab_size: int = 0
    max_length: int = 0
    documents: dict[str, int] = field(default_factory=lambda: {"train": 0, "validation": 0})
    blocks: dict[str, int] = field(default_factory=lambda: {"train": 0, "validation": 0})
    tokens: dict[str, int] = field(default_factory=lambda: {"train": 0, "validation": 0})
    bad_lines: list[str] = field(default_factory=list)


def resolve_source(source: str, shared_data: str | Path | None) -> tuple[Path, int | None]:
    """A file path, or one of the shared-data names (`nsmc`, `korquad`, `klue`)."""
    if source in SHARED_SOURCES:
        relative, column = SHARED_SOURCES[source]
        path = shared_root(shared_data) / relative
        if not path.exists():
            raise missing(path)
        return path, column
    path = Path(source)
    if not path.is_file():
        raise DataError(f"corpus file {path} does not exist or is not a file")
    return path, None


def read_documents(
    sources: list[str],
    shared_data: str | Path | None = None,
    blank_line_documents: bool = False,
    on_bad_line: str = "error",
    report: list[str] | None = None,
    limit: int | None = None,
) -> Iterator[str]:
    """Documents of every source in order: one per line, or paragraphs between blank lines."""
    if not sources:
        raise DataError("no corpus source given")
    shared_data = shared_root(shared_data)
    count = 0
    for source in sources:
        path, column = resolve_source(source, shared_data)
        if path.is_dir():
            from kolong.data.klue import klue_sentences

            documents = iter(klue_sentences(path))
        elif path.suffix == ".json":
            documents = _korquad_contexts(path)
        else:
            corpus = Corpus([path], on_bad_line=on_bad_line, column=column, paragraphs=blank_line_documents)
            documents = _with_report(_skip_first(corpus, skip=column is not None), corpus, report)
        try:
            for document in documents:
                yield document
                count += 1
                if limit is not None and count >= limit:
                    return
        except CorpusError as error:  # the reader names file and line; one error type for kolong's data
            raise DataError(str(error)) from None


def _skip_first(documents: Iterable[str], skip: bool) -> Iterator[str]:
    iterator = iter(documents)
    if skip:
        next(iterator, None)  # the TSV header
    yield from iterator


def _with_report(documents: Iterator[str], corpus, report: list[str] | None) -> Iterator[str]:
    yield from documents
    if report is not None:
        report.extend(corpus.report.describe_bad_lines(limit=len(corpus.report.bad_lines)))


def _korquad_contexts(path: Path) -> Iterator[str]:
    from kolong.data.squad import read_squad

    seen = set()
    for example in read_squad(path).examples:
        if example.context not in seen:
            seen.add(example.context)
            yield example.context


def eojeol_index(text: str) -> np.ndarray:
    """For each character, the index of the whitespace-separated word it belongs to (spaces: the previous)."""
    chars = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    is_space = np.isin(chars, [0x20, 0x09, 0x0A, 0x0D, 0x0B, 0x0C, 0x3000, 0xA0])
    starts = ~is_space & np.concatenate([[True], is_space[:-1]])
    return np.cumsum(starts) - 1


_EOJEOL = re.compile("[^ \t\n\r\x0b\x0c\u3000\xa0]+")  # the spaces `eojeol_index` knows


def eojeol_starts(text: str) -> list[int]:
    """Where each whitespace-separated word starts (the word of character i: the last start <= i)."""
    return [match.start() for match in _EOJEOL.finditer(text)]


class BlockPacker:
    """Concatenates documents ([SEP] between them) and emits [CLS] block [SEP] rows of `max_length`."""

    def __init__(self, cls_id: int, sep_id: int, max_length: int):
        if max_length < 8:
            raise DataError(f"max_length must be at least 8, got {max_length}")
        self.cls_id, self.sep_id, self.body = cls_id, sep_id, max_length - 2
        self.ids: list[int] = []
        self.eojeol: list[int] = []
        self.morpheme: list[int] = []
        self.next_group = 0

    def add(self, ids: list[int], eojeol: list[int], morpheme: list[int]) -> Iterator[dict]:
        base_e, base_m = self.next_group, self.next_group
        self.ids += [*ids, self.sep_id]
        self.eojeol += [base_e + e for e in eojeol] + [-1]
        self.morpheme += [base_m + m for m in morpheme] + [-1]
        self.next_group += max([*eojeol, *morpheme, -1]) + 1
        while len(self.ids) >= self.body:
            yield self._row(self.body)

    def flush(self, minimum: int) -> Iterator[dict]:
        """The last partial block, if it holds at least `minimum` tokens (the collator pads it)."""
        if len(self.ids) >= minimum:
            yield self._row(len(self.ids))

    def _row(self, size: int) -> dict:
        row = {
            "input_ids": [self.cls_id, *self.ids[:size], self.sep_id],
            "eojeol_ids": [-1, *self.eojeol[:size], -1],
            "morpheme_ids": [-1, *self.morpheme[:size], -1],
        }
        del self.ids[:size], self.eojeol[:size], self.morpheme[:size]
        return row


def tokenize_documents(tokenizer, documents: list[str]) -> Iterator[tuple[list[int], list[int], list[int]]]:
    """(ids, eojeol ids, morpheme ids) of each document, group ids counted from 0 within the document."""
    # kolong's morpheme tokenizer knows each token's eojeol and morpheme without offsets; other tokenizers'
    # tokens are placed in eojeol through their character offsets, and their words stand in for morphemes.
    morphemic = hasattr(tokenizer, "rewrite_batch")
    encoded = tokenizer(
        documents, add_special_tokens=False, return_offsets_mapping=not morphemic, truncation=False
    )
    for index, document in enumerate(documents):
        ids = encoded["input_ids"][index]
        if not ids:
            yield [], [], []
            continue
        if morphemic:
            encoding = encoded.encodings[index]
            eojeol, words = encoding.word_ids, encoding.morpheme_ids
        else:
            words = encoded.word_ids(index)
            starts, last = eojeol_starts(document), len(document) - 1
            eojeol = [
                bisect.bisect_right(starts, min(start, last)) - 1
                for start, _ in encoded["offset_mapping"][index]
            ]
        morpheme, previous, current = [], None, -1
        for word in words:
            if word is None or word != previous:
                current += 1
            morpheme.append(current)
            previous = word
        yield ids, eojeol, morpheme


def _batches(documents: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for document in documents:
        batch.append(document)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:  # tokenizers refuse an empty batch
        yield batch


_WORKER_TOKENIZER = None  # the tokenizer a corpus worker process inherited (fork) or loaded


def _one_process_each() -> None:
    import os

    from kolong.tokenizers.parallel import worker_ignores_ctrl_c

    worker_ignores_ctrl_c()
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["KOLONG_TOKENIZER_WORKERS"] = "1"


def _tokenize_in_worker(batch: list[str]) -> list[tuple[list[int], list[int], list[int]]]:
    return list(tokenize_documents(_WORKER_TOKENIZER, batch))


def tokenized_batches(tokenizer, documents: Iterable[str], size: int, workers: int = 1):
    """(batch of documents, their tokenize_documents results) in order; batches tokenised by `workers`
    processes (0: one per available core), a bounded number of batches in flight."""
    global _WORKER_TOKENIZER
    import os

    if workers == 0:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    batches = _batches(documents, size)
    if workers <= 1:
        for batch in batches:
            yield batch, list(tokenize_documents(tokenizer, batch))
        return
    import itertools
    import multiprocessing

    # Fork: the workers share the loaded tokenizer. In them, the morpheme tokenizer's own worker processes stay
    # off (one level of processes) and so does the Rust backend's thread pool; this process keeps its settings.
    _WORKER_TOKENIZER = tokenizer
    try:
        with multiprocessing.get_context("fork").Pool(workers, initializer=_one_process_each) as pool:
            while window := list(itertools.islice(batches, 4 * workers)):
                yield from zip(window, pool.imap(_tokenize_in_worker, window), strict=True)
    finally:
        _WORKER_TOKENIZER = None


@writes_output()
def build_corpus(
    sources: list[str],
    tokenizer,
    output_dir: str | Path,
    max_length: int = 128,
    held_out: float = 0.01,
    seed: int = 0,
    shared_data: str | Path | None = None,
    blank_line_documents: bool = False,
    on_bad_line: str = "error",
    limit: int | None = None,
    overwrite: bool = False,
    batch_documents: int = 1000,
    on_progress: Callable[[int], None] | None = None,
    workers: int = 1,
) -> CorpusStats:
    """Tokenise and pack `sources` with `tokenizer` (loaded: `kolong.checkpoints.load_tokenizer`) into a
    `datasets.DatasetDict` (train / validation) at `output_dir`.

    `workers` > 1 tokenises batches of documents in that many processes (0: one per available core); the
    corpus is the same whatever the count: batches come back in order and splits are drawn in order."""
    import datasets

    from kolong.io import atomic_output_dir, atomic_write_json, check_output_dir

    if not 0 <= held_out < 1:
        raise DataError(f"held_out must be in [0, 1), got {held_out}")
    check_output_dir(output_dir, overwrite)
    name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise DataError(f"tokenizer {name} has no [CLS]/[SEP] tokens to frame blocks with")
    stats = CorpusStats(sources=list(sources), tokenizer=name, vocab_size=len(tokenizer),
                        max_length=max_length)  # fmt: skip
    bad_lines: list[str] = []

    def rows() -> Iterator[dict]:
        choose = random.Random(seed)
        packers = {split: BlockPacker(tokenizer.cls_token_id, tokenizer.sep_token_id, max_length)
                   for split in ("train", "validation")}  # fmt: skip
        documents = read_documents(sources, shared_data, blank_line_documents, on_bad_line, bad_lines, limit)
        done = 0
        for batch, encoded in tokenized_batches(tokenizer, documents, batch_documents, workers):
            yield from _pack(batch, encoded, choose, packers)
            done += len(batch)
            if on_progress is not None:
                on_progress(done)
        for split, packer in packers.items():
            for row in packer.flush(minimum=max_length // 2):
                yield counted(row, split)

    def _pack(batch, encoded_batch, choose, packers):
        splits = ["validation" if choose.random() < held_out else "train" for _ in batch]
        for split, encoded in zip(splits, encoded_batch, strict=True):
            if not encoded[0]:
                continue
            stats.documents[split] += 1
            for row in packers[split].add(*encoded):
                yield counted(row, split)

    def counted(row: dict, split: str) -> dict:
        stats.blocks[split] += 1
        stats.tokens[split] += len(row["input_ids"])
        return {**row, "split": split}

    features = datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "eojeol_ids": datasets.Sequence(datasets.Value("int32")),
            "morpheme_ids": datasets.Sequence(datasets.Value("int32")),
            "split": datasets.Value("string"),
        }
    )
    datasets.disable_progress_bars()
    with atomic_output_dir(output_dir, overwrite=overwrite) as staging:
        cache = staging / ".cache"
        try:
            # A fresh fingerprint: the generator closes over a tokenizer and a progress callback, which
            # datasets would otherwise try to pickle to hash them (and its cache is private here anyway).
            everything = datasets.Dataset.from_generator(
                rows, features=features, cache_dir=str(cache), fingerprint=uuid.uuid4().hex
            )
        except datasets.exceptions.DatasetGenerationError as error:
            # datasets wraps whatever the reader raised; surface kolong's own message (file and line).
            cause = error.__cause__
            if isinstance(cause, ValueError):
                raise cause from None
            raise
        except ValueError:
            if sum(stats.blocks.values()):
                raise
            everything = []  # datasets refuses a generator that yields nothing ("corresponds to no data")
        if len(everything) == 0:
            raise DataError(
                f"the corpus ({', '.join(sources)}) produced no block of at least {max_length // 2} tokens (half "
                f"of --max-length {max_length}): give more text or a shorter --max-length"
            )
        splits = {}
        for split in ("train", "validation"):
            part = everything.filter(lambda names, s=split: [n == s for n in names], input_columns="split",
                                     batched=True).remove_columns("split")  # fmt: skip
            splits[split] = part
        datasets.DatasetDict(splits).save_to_disk(str(staging / "dataset"))
        del everything, splits
        import shutil

        shutil.rmtree(cache, ignore_errors=True)
        stats.bad_lines = bad_lines
        atomic_write_json(staging / METADATA, asdict(stats))
    return stats


def load_corpus(path: str | Path):
    """(DatasetDict, metadata) of a corpus written by `build_corpus`; errors name what is missing."""
    import datasets

    path = Path(path)
    if not (path / METADATA).is_file() or not (path / "dataset").is_dir():
        raise DataError(
            f"{path} is not a kolong corpus (no {METADATA} and dataset/); build one with `kolong data corpus`"
        )
    metadata = json.loads((path / METADATA).read_text(encoding="utf-8"))
    return datasets.load_from_disk(str(path / "dataset")), metadata
