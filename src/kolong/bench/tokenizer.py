"""`kolong bench tokenizer`: the MeCab morpheme tokenizer against raw MeCab and HF BertTokenizerFast.

On NSMC reviews (`../shared/data/nsmc/reviews.shared.tsv.gz`), one run:

1. trains a MeCab + WordPiece vocabulary on the first `train_documents` reviews;
2. times, on the next `documents` reviews (median of `repeats` after a warm-up):
   - raw MeCab segmentation: `Tagger("-Owakati").parse(text).split()` per review (the fastest way to get
     the morphemes from mecab-ko; one core, MeCab holds the GIL);
   - kolong's `MorphemeTokenizer` batch call (`tokenizer(texts)`), with its worker processes, then with
     them turned off (`KOLONG_TOKENIZER_WORKERS=1`), and with `return_offsets_mapping=True`;
   - HF `BertTokenizerFast` built on the same vocabulary (no morpheme analysis: BERT's whitespace and
     punctuation pre-tokenizer, no lower-casing);
   - kolong's `ByteTokenizer` for scale.
The cost ratio is kolong's time over raw MeCab's (goal: at most 1.5x); tokens per character and [UNK] shares
show what the analysis buys over plain WordPiece on the same vocabulary.
"""

from __future__ import annotations

import gzip
import os
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from kolong.bench.machine import describe_machine
from kolong.errors import TokenizerError
from kolong.io import atomic_write_json, atomic_write_text

DEFAULT_DATA = Path("../shared/data/nsmc/reviews.shared.tsv.gz")


def nsmc_reviews(path: Path, limit: int) -> list[str]:
    """The non-empty `document` fields of NSMC's review TSV, in file order."""
    if not path.is_file():
        raise TokenizerError(f"NSMC reviews not found at {path} (pass --data)")
    reviews = []
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
        header = next(handle).rstrip("\n").split("\t")
        column = header.index("document") if "document" in header else len(header) - 1
        for line in handle:
            fields = line.rstrip("\n").split("\t")
            if len(fields) > column and fields[column].strip():
                reviews.append(fields[column])
                if len(reviews) >= limit:
                    break
    return reviews


def _median(function: Callable[[], object], repeats: int) -> float:
    function()  # warm-up (and worker processes started)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _counts(tokenizer, texts: list[str]) -> dict:
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    tokens = sum(len(row) for row in ids)
    unk = sum(1 for row in ids for i in row if i == tokenizer.unk_token_id)
    characters = sum(len(t) for t in texts)
    return {"tokens_per_character": tokens / characters, "unk_share": unk / tokens if tokens else 0.0}


def run_tokenizer_benchmark(
    data: Path | None = None,
    train_documents: int = 50000,
    documents: int = 20000,
    vocab_size: int = 32000,
    repeats: int = 3,
    on_step: Callable[[str], None] | None = None,
) -> dict:
    import mecab_ko
    from transformers import BertTokenizerFast

    from kolong.tokenizers import ByteTokenizer, train_tokenizer

    step = on_step or (lambda message: None)
    path = data or DEFAULT_DATA
    reviews = nsmc_reviews(path, train_documents + documents)
    if len(reviews) <= train_documents:
        raise TokenizerError(f"{path} has only {len(reviews)} reviews; lower --train-documents")
    train, texts = reviews[:train_documents], reviews[train_documents:]

    step(f"training MeCab + WordPiece ({vocab_size}) on {len(train)} reviews")
    started = time.perf_counter()
    tokenizer = train_tokenizer(train, "mecab", vocab_size, "wordpiece")
    train_seconds = time.perf_counter() - started
    bert = BertTokenizerFast(vocab=tokenizer.get_vocab(), do_lower_case=False, strip_accents=False)
    tagger = mecab_ko.Tagger("-Owakati")
    byte = ByteTokenizer()

    seconds = {}
    step("raw MeCab segmentation")
    seconds["mecab"] = _median(lambda: [tagger.parse(t).split() for t in texts], repeats)
    step("kolong MorphemeTokenizer")
    seconds["kolong"] = _median(lambda: tokenizer(texts), repeats)
    step("kolong MorphemeTokenizer with offsets")
    seconds["kolong_offsets"] = _median(lambda: tokenizer(texts, return_offsets_mapping=True), repeats)
    step("kolong MorphemeTokenizer, one process")
    previous = os.environ.get("KOLONG_TOKENIZER_WORKERS")
    os.environ["KOLONG_TOKENIZER_WORKERS"] = "1"
    try:
        seconds["kolong_one_process"] = _median(lambda: tokenizer(texts), repeats)
    finally:
        if previous is None:
            os.environ.pop("KOLONG_TOKENIZER_WORKERS", None)
        else:
            os.environ["KOLONG_TOKENIZER_WORKERS"] = previous
    step("HF BertTokenizerFast, same vocabulary")
    seconds["bert"] = _median(lambda: bert(texts), repeats)
    step("kolong ByteTokenizer")
    seconds["byte"] = _median(lambda: byte(texts), repeats)

    characters = sum(len(t) for t in texts)
    return {
        "benchmark": "tokenizer",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": describe_machine(),
        "data": f"{path.name}: reviews {train_documents + 1}-{train_documents + len(texts)} "
        f"(vocabulary trained on the first {train_documents})",
        "documents": len(texts),
        "characters": characters,
        "vocab_size": len(tokenizer),
        "train_seconds": train_seconds,
        "repeats": repeats,
        "seconds": seconds,
        "characters_per_second": {k: characters / v for k, v in seconds.items()},
        "cost_vs_mecab": {k: v / seconds["mecab"] for k, v in seconds.items()},
        "kolong_vs_bert": seconds["kolong"] / seconds["bert"],
        "goal_met": seconds["kolong"] / seconds["mecab"] <= 1.5,
        "tokens": {"kolong": _counts(tokenizer, texts), "bert": _counts(bert, texts)},
    }


LABELS = {
    "mecab": "raw MeCab segmentation (wakati + split)",
    "kolong": "kolong MorphemeTokenizer (MeCab + WordPiece), batch",
    "kolong_offsets": "kolong, batch with offsets into the original text",
    "kolong_one_process": "kolong, batch, worker processes off",
    "bert": "HF BertTokenizerFast, same vocabulary (no analysis)",
    "byte": "kolong ByteTokenizer (UTF-8 bytes)",
}


def to_markdown(result: dict) -> str:
    machine = result["machine"]
    lines = [
        f"# kolong bench tokenizer ({result['date']})",
        "",
        f"Machine: {machine['cpu']}, {machine['cores_available']} cores, transformers {machine['transformers']}. "
        f"Data: {result['data']}; {result['documents']} reviews, {result['characters']} characters; "
        f"vocabulary {result['vocab_size']} (trained in {result['train_seconds']:.1f} s); "
        f"median of {result['repeats']} runs.",
        "",
        "| what | seconds | characters/s | cost vs raw MeCab |",
        "|---|---|---|---|",
    ]
    for key, label in LABELS.items():
        lines.append(
            f"| {label} | {result['seconds'][key]:.3f} | {result['characters_per_second'][key]:,.0f} | "
            f"{result['cost_vs_mecab'][key]:.2f}x |"
        )
    kolong, bert = result["tokens"]["kolong"], result["tokens"]["bert"]
    verdict = "met" if result["goal_met"] else "not met"
    lines += [
        "",
        f"Goal (kolong at most 1.5x raw MeCab): **{verdict}** ({result['cost_vs_mecab']['kolong']:.2f}x). "
        f"kolong / BertTokenizerFast time: {result['kolong_vs_bert']:.2f}x.",
        "",
        f"Tokens per character: kolong {kolong['tokens_per_character']:.3f}, BertTokenizerFast "
        f"{bert['tokens_per_character']:.3f}; [UNK] share: kolong {kolong['unk_share']:.2%}, "
        f"BertTokenizerFast {bert['unk_share']:.2%}.",
        "",
    ]
    return "\n".join(lines)


def write_results(result: dict, output_dir: str | Path) -> tuple[Path, Path]:
    output_dir = Path(output_dir)
    return (
        atomic_write_json(output_dir / "tokenizer.json", result),
        atomic_write_text(output_dir / "tokenizer.md", to_markdown(result)),
    )
