"""`kolong bench tokenizer`: the MeCab morpheme tokenizer against raw MeCab and HF BertTokenizerFast.

On NSMC reviews (`nsmc/reviews.shared.tsv.gz` in the shared data folder), one run:

1. trains a MeCab + WordPiece vocabulary on the first `train_documents` reviews;
2. times, on the next `documents` reviews (median of `repeats` interleaved rounds after a warm-up), each side
   of a ratio on the same share of the machine:
   - on one pinned core (this thread's CPU affinity set to one core, torch on one thread, the Rust backend
     serial, kolong's worker processes off; both sides alike): raw MeCab segmentation
     (`Tagger("-Owakati").parse(text).split()` per review, the fastest way to get mecab-ko's morphemes),
     kolong's `MorphemeTokenizer` batch call with and without `return_offsets_mapping=True`, HF
     `BertTokenizerFast` on the same vocabulary (no morpheme analysis), kolong's `ByteTokenizer`, and what
     `kolong data corpus` does per batch of 1,000 documents (ids with offsets, eojeol and morpheme groups);
   - on every core: kolong's batch call with its worker processes and `data corpus --workers 0`, against raw
     MeCab in a forked pool of one process per core.
The cost ratio is kolong's time over raw MeCab's on the same cores (goal: at most 1.5x in one process);
tokens per character and [UNK] shares show what the analysis buys over plain WordPiece on the same vocabulary.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from kolong.data.nsmc import default_nsmc_path
from kolong.errors import TokenizerError
from kolong.lab.bench.arguments import TokenizerBenchArguments
from kolong.lab.bench.harness import Benchmark, Case, run


def nsmc_reviews(path: Path, limit: int) -> list[str]:
    """The non-empty `document` fields of NSMC's review TSV (plain or gzip), in file order."""
    from kolong.data.nsmc import tsv_fields

    if not path.is_file():
        raise TokenizerError(f"NSMC reviews not found at {path} (pass --data)")
    reviews, column = [], None
    for _, fields in tsv_fields(path):
        if column is None:  # the header names the column; without one, the text is the last field
            column = fields.index("document") if "document" in fields else len(fields) - 1
            if "document" in fields:
                continue
        if len(fields) > column and fields[column].strip():
            reviews.append(fields[column])
            if len(reviews) >= limit:
                break
    if not reviews:
        raise TokenizerError(f"{path} holds no review text (expected NSMC's TSV with a document column)")
    return reviews


def _counts(tokenizer, texts: list[str]) -> dict:
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    tokens = sum(len(row) for row in ids)
    unk = sum(1 for row in ids for i in row if i == tokenizer.unk_token_id)
    characters = sum(len(t) for t in texts)
    return {"tokens_per_character": tokens / characters, "unk_share": unk / tokens if tokens else 0.0}


class TokenizerBenchmark(Benchmark):
    name = "tokenizer"
    arguments = TokenizerBenchArguments

    def setup(self, args: TokenizerBenchArguments, size: dict) -> Case:
        import mecab_ko
        from transformers import BertTokenizerFast

        from kolong.tokenizers import ByteTokenizer, train_tokenizer

        self.path = Path(args.data) if args.data else default_nsmc_path()
        reviews = nsmc_reviews(self.path, args.train_documents + args.documents)
        if len(reviews) <= args.train_documents:
            raise TokenizerError(f"{self.path} has only {len(reviews)} reviews; lower --train-documents")
        train, self.texts = reviews[: args.train_documents], reviews[args.train_documents :]
        texts = self.texts
        started = time.perf_counter()
        self.tokenizer = tokenizer = train_tokenizer(train, "mecab", args.vocab_size, "wordpiece")
        self.train_seconds = time.perf_counter() - started
        self.bert = bert = BertTokenizerFast(
            vocab=tokenizer.get_vocab(), do_lower_case=False, strip_accents=False
        )
        tagger, byte = mecab_ko.Tagger("-Owakati"), ByteTokenizer()
        self.cores = cores = _cores()
        self.pool = _mecab_pool(cores)
        chunks = [texts[i::cores] for i in range(cores)]

        def corpus(workers: int):
            from kolong.data.corpus import tokenized_batches

            return lambda: sum(1 for _ in tokenized_batches(tokenizer, texts, 1000, workers))

        steps = {"kolong": lambda: tokenizer(texts), "kolong_offsets": lambda: tokenizer(texts, return_offsets_mapping=True),
                 "byte": lambda: byte(texts), "corpus_one_process": corpus(1)}  # fmt: skip
        references = {"mecab": lambda: [tagger.parse(t).split() for t in texts], "bert": lambda: bert(texts)}
        # every step above, and its reference, pinned to one core
        steps, references = (
            {name: _on_one_core(step) for name, step in group.items()} for group in (steps, references)
        )
        steps.update(kolong_all_cores=lambda: tokenizer(texts), corpus_all_cores=corpus(0))
        references.update(mecab_all_cores=lambda: self.pool.map(_segment, chunks))
        return Case(steps, references, repeats=args.repeats)

    def teardown(self) -> None:
        if getattr(self, "pool", None) is not None:
            self.pool.terminate()
            self.pool = None

    def summarise(self, args: TokenizerBenchArguments, rows: list[dict]) -> dict:
        seconds = {name: rows[0]["timings"][name].median for name in LABELS}
        characters = sum(len(t) for t in self.texts)
        one_core = seconds["kolong"] / seconds["mecab"]
        return {
            "data": f"{self.path.name}: reviews {args.train_documents + 1}-{args.train_documents + len(self.texts)} "
            f"(vocabulary trained on the first {args.train_documents})",
            "documents": len(self.texts),
            "characters": characters,
            "vocab_size": len(self.tokenizer),
            "train_seconds": self.train_seconds,
            "repeats": args.repeats,
            "cores": self.cores,
            "seconds": seconds,
            "characters_per_second": {k: characters / v for k, v in seconds.items()},
            "cost_vs_mecab": {k: v / seconds[_MECAB_OF.get(k, "mecab")] for k, v in seconds.items()},
            "kolong_vs_bert": seconds["kolong"] / seconds["bert"],
            "goal_met": one_core <= 1.5,
            "tokens": {"kolong": _counts(self.tokenizer, self.texts), "bert": _counts(self.bert, self.texts)},
        }

    def to_markdown(self, result: dict) -> str:
        return to_markdown(result)


def run_tokenizer_benchmark(
    data: Path | None = None, train_documents: int = 50000, documents: int = 20000, vocab_size: int = 32000,
    repeats: int = 3, on_step: Callable[[str], None] | None = None,
) -> dict:  # fmt: skip
    args = TokenizerBenchArguments(data=str(data) if data else None, train_documents=train_documents,
                                   documents=documents, vocab_size=vocab_size, repeats=repeats)  # fmt: skip
    return run(TokenizerBenchmark(), args, on_step)


LABELS = {
    "mecab": "raw MeCab segmentation (wakati + split), one pinned core",
    "kolong": "kolong MorphemeTokenizer (MeCab + WordPiece), batch, one pinned core",
    "kolong_offsets": "kolong, batch with offsets into the original text, one pinned core",
    "bert": "HF BertTokenizerFast, same vocabulary (no analysis), one pinned core",
    "byte": "kolong ByteTokenizer (UTF-8 bytes), one pinned core",
    "corpus_one_process": "`data corpus` tokenisation (ids, eojeol and morpheme groups), --workers 1, one pinned core",
    "mecab_all_cores": "raw MeCab segmentation, one process per core (a forked pool)",
    "kolong_all_cores": "kolong, batch, its worker processes (every core)",
    "corpus_all_cores": "`data corpus` tokenisation, --workers 0 (every core)",
}
# each timing's ratio is against raw MeCab on the same cores
_MECAB_OF = {"kolong_all_cores": "mecab_all_cores", "corpus_all_cores": "mecab_all_cores",
             "mecab_all_cores": "mecab_all_cores"}  # fmt: skip


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _segment(texts: list[str]) -> list[list[str]]:
    """Raw MeCab in a pool's worker: the fastest way to get mecab-ko's morphemes (as the one-process step)."""
    global _TAGGER
    if _TAGGER is None:
        import mecab_ko

        _TAGGER = mecab_ko.Tagger("-Owakati")
    return [_TAGGER.parse(t).split() for t in texts]


_TAGGER = None


def _mecab_pool(cores: int):
    """Forked processes, one per core, that segment a share of the reviews each (pickled back, as kolong's
    workers pickle theirs)."""
    import multiprocessing

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    return multiprocessing.get_context(method).Pool(cores)


def _on_one_core(step: Callable[[], object]) -> Callable[[], object]:
    """`step` pinned to one core: this thread's affinity (threads it starts, such as the encoding thread of the
    morpheme tokenizer's pipeline, inherit it), torch on one thread, kolong's worker processes off and the Rust
    backend serial (TOKENIZERS_PARALLELISM, read at every call); MeCab runs on the calling thread."""

    def call():
        import torch

        saved = {
            name: os.environ.get(name) for name in ("KOLONG_TOKENIZER_WORKERS", "TOKENIZERS_PARALLELISM")
        }
        os.environ.update(KOLONG_TOKENIZER_WORKERS="1", TOKENIZERS_PARALLELISM="false")
        cores = os.sched_getaffinity(0) if hasattr(os, "sched_setaffinity") else None
        threads = torch.get_num_threads()
        if cores:
            os.sched_setaffinity(0, {min(cores)})
        torch.set_num_threads(1)
        try:
            return step()
        finally:
            torch.set_num_threads(threads)
            if cores:
                os.sched_setaffinity(0, cores)
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    return call


def to_markdown(result: dict) -> str:
    lines = [
        f"# kolong bench tokenizer ({result['date']})",
        "",
        f"Data: {result['data']}; {result['documents']} reviews, {result['characters']} characters; "
        f"vocabulary {result['vocab_size']} (trained in {result['train_seconds']:.1f} s); "
        f"median of {result['repeats']} runs. Each ratio compares like with like: one process against raw MeCab "
        f"in one process, every core ({result.get('cores', '?')}) against raw MeCab in as many processes.",
        "",
        "| what | seconds | characters/s | cost vs raw MeCab on the same cores |",
        "|---|---|---|---|",
    ]
    for key, label in LABELS.items():
        if key not in result["seconds"]:
            continue
        lines.append(
            f"| {label} | {result['seconds'][key]:.3f} | {result['characters_per_second'][key]:,.0f} | "
            f"{result['cost_vs_mecab'][key]:.2f}x |"
        )
    kolong, bert = result["tokens"]["kolong"], result["tokens"]["bert"]
    verdict = "met" if result["goal_met"] else "not met"
    lines += [
        "",
        f"Goal (kolong at most 1.5x raw MeCab, one process each): **{verdict}** "
        f"({result['cost_vs_mecab']['kolong']:.2f}x; with offsets {result['cost_vs_mecab']['kolong_offsets']:.2f}x). "
        f"kolong / BertTokenizerFast time, one core each: {result['kolong_vs_bert']:.2f}x.",
        "",
        f"Tokens per character: kolong {kolong['tokens_per_character']:.3f}, BertTokenizerFast "
        f"{bert['tokens_per_character']:.3f}; [UNK] share: kolong {kolong['unk_share']:.2%}, "
        f"BertTokenizerFast {bert['unk_share']:.2%}.",
        "",
    ]
    return "\n".join(lines)
