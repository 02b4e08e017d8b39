"""`kolong tokenizer ...`: train Korean morpheme-aware tokenizers and compare tokenizers on a corpus."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kolong.cli.common import console, one_of, user_errors

app = typer.Typer(
    help="Korean tokenizers: train, and measure on a corpus.", no_args_is_help=True, rich_markup_mode=None
)


def column_number_or_name(value: str | None) -> int | str | None:
    """Option callback: a number (1 or more) or a header name (`kolong.data.documents.column_field`)."""
    from kolong.data.documents import column_field
    from kolong.errors import CorpusError

    try:
        return column_field(value)
    except CorpusError as error:
        raise typer.BadParameter(str(error)) from None


COLUMN_OPTION = typer.Option(
    None,
    "--column",
    callback=column_number_or_name,
    help="Take this tab-separated field of each line: a 1-based number, or a name in the file's first (header) "
    "line, which is then skipped.",
)


def _byte_progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[documents]} documents"),
        TimeElapsedColumn(),
        console=console,
    )


def _report_bad_lines(report) -> None:
    if report.bad_lines:
        console.print(
            f"[yellow]skipped {len(report.bad_lines)} lines that are not valid UTF-8 or lack the column:[/]"
        )
        for line in report.describe_bad_lines():
            console.print(f"  {line}", highlight=False)


@app.command("train")
def train(
    corpus: list[str] = typer.Option(
        ...,
        "--corpus",
        help="Text file, plain or gzip, one document per line (repeat for several files), or nsmc: the shared "
        "reviews (their document column).",
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Directory to write the tokenizer to."),
    morph: str = typer.Option(
        "mecab",
        "--morph",
        callback=one_of("mecab", "kiwi", "none"),
        help="Morphological analyser: mecab | kiwi | none.",
    ),
    vocab_size: int = typer.Option(
        32000, "--vocab-size", min=8, help="Vocabulary size, special tokens included."
    ),
    model: str = typer.Option(
        "wordpiece",
        "--model",
        callback=one_of("wordpiece", "bpe", "morpheme-list"),
        help="wordpiece | bpe | morpheme-list (the N most frequent morphemes).",
    ),
    forms: str = typer.Option(
        "surface",
        "--forms",
        callback=one_of("surface", "lemma"),
        help="surface: morphemes as written | lemma: the analyser's forms (위한 -> 위하 ##ᆫ).",
    ),
    normalization: str = typer.Option(
        "nfc", "--normalization", callback=one_of("nfc", "none"), help="nfc | none: Unicode normalisation."
    ),
    min_frequency: int = typer.Option(
        2, "--min-frequency", min=1, help="Minimum count of a vocabulary entry."
    ),
    column: str = COLUMN_OPTION,
    limit: int = typer.Option(None, "--limit", min=1, help="Read at most this many documents."),
    on_bad_line: str = typer.Option(
        "error",
        "--on-bad-line",
        callback=one_of("error", "skip"),
        help="error | skip: what to do with a line that is not valid UTF-8.",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output directory."),
) -> None:
    """Segment a corpus into morphemes (MeCab-ko, Kiwi or none) and train WordPiece, BPE or a morpheme list."""
    from kolong.data.shared import data_file
    from kolong.io import atomic_output_dir, check_output_dir, output_lock
    from kolong.tokenizers import Corpus, train_tokenizer

    with user_errors(), output_lock(check_output_dir(output, overwrite)):  # before the slow training
        files = [data_file(path, "--corpus", names=("nsmc",)) for path in corpus]
        if column is None and corpus == ["nsmc"]:
            column = "document"
        with _byte_progress() as progress:
            task = progress.add_task("reading and analysing", total=None, documents=0)
            documents = Corpus(files, on_bad_line, column, limit=limit)
            progress.update(task, total=documents.total_bytes)
            documents.on_progress = lambda done: progress.update(
                task, completed=done, documents=documents.report.documents
            )
            tokenizer = train_tokenizer(
                documents, morph, vocab_size, model, forms, normalization, min_frequency=min_frequency
            )
            progress.update(task, completed=documents.total_bytes, documents=documents.report.documents)
        with atomic_output_dir(output, overwrite) as staging:
            tokenizer.save_pretrained(str(staging))
    report = documents.report
    console.print(
        f"[green]wrote[/] {output}: {len(tokenizer)} tokens ({model}, {morph}, {forms} forms) from "
        f"{report.documents} documents ({report.characters} characters, {report.empty_lines} empty lines)"
    )
    _report_bad_lines(report)
    sample = "국가의 발전을 위한 노력"
    console.print(f"{sample} -> {' '.join(tokenizer.tokenize(sample))}", highlight=False)


@app.command("stats")
def stats(
    tokenizers: list[str] = typer.Option(
        ..., "--tokenizer", help="Tokenizer directory (kolong's or any HF one), or `byte`; repeatable."
    ),
    corpus: list[Path] = typer.Option(
        ..., "--corpus", help="Text file, plain or gzip, one document per line."
    ),
    column: str = COLUMN_OPTION,
    limit: int = typer.Option(10000, "--limit", min=1, help="Documents to read."),
    on_bad_line: str = typer.Option(
        "error",
        "--on-bad-line",
        callback=one_of("error", "skip"),
        help="error | skip (lines that are not UTF-8).",
    ),
    qa: Path = typer.Option(
        None, "--qa", help="SQuAD/KorQuAD JSON: also count answers that start and end on token boundaries."
    ),
    output: Path = typer.Option(None, "--output", help="Also write the numbers as JSON to this file."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --output file."),
) -> None:
    """Tokens per character, share of [UNK], share of words split, throughput: one row per tokenizer."""
    from kolong.checkpoints import load_tokenizer
    from kolong.io import atomic_output_file, atomic_write_json, check_output_file, output_lock
    from kolong.tokenizers import Corpus
    from kolong.tokenizers.stats import answer_alignment, measure

    with user_errors(), contextlib.ExitStack() as held:
        if output is not None:  # checked and locked before the slow measuring
            held.enter_context(output_lock(check_output_file(output, overwrite)))
        reader = Corpus(corpus, on_bad_line, column, limit=limit)
        documents = list(reader)
        examples = None
        if qa is not None:
            from kolong.data.squad import read_squad

            examples = read_squad(qa, "skip").examples
        loaded = [(name, load_tokenizer(name, role="tokenizer")) for name in tokenizers]
        rows = []
        with Progress(
            TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console
        ) as progress:
            for name, tokenizer in loaded:
                task = progress.add_task(f"measuring {name}", total=len(documents))
                row = measure(
                    tokenizer, documents, name, on_step=lambda n, t=task: progress.update(t, completed=n)
                )
                if examples is not None:
                    row.answers = answer_alignment(tokenizer, examples)
                rows.append(row)
        if output is not None:
            with atomic_output_file(output, overwrite) as staging:
                atomic_write_json(staging, [r.as_dict() for r in rows])
    table = Table(title=f"{len(documents)} documents, {rows[0].characters} characters")
    for heading in ("tokenizer", "kind", "tokens/char", "[UNK]", "words split", "chars/s"):
        table.add_column(heading)
    if examples is not None:
        table.add_column("answers aligned")
    for row in rows:
        cells = [
            row.name,
            row.kind,
            f"{row.tokens_per_character:.3f}",
            f"{row.unk_share:.2%}",
            f"{row.words_split_share:.1%}",
            f"{row.characters_per_second:,.0f}",
        ]
        if examples is not None:
            cells.append(f"{row.answers['aligned']}/{row.answers['answers']}")
        table.add_row(*cells)
    console.print(table)
    _report_bad_lines(reader.report)
    if output is not None:
        console.print(f"[green]wrote[/] {output}")
    for row in rows:
        for item in row.answers.get("misaligned", [])[:5]:
            console.print(
                f"  {row.name}: answer not on token boundaries: {json.dumps(item, ensure_ascii=False)}"
            )
