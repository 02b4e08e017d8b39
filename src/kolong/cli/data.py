"""`kolong data ...`: dataset preparation."""

from __future__ import annotations

from pathlib import Path

import typer

from kolong.cli.common import console, one_of, share, user_errors
from kolong.data.shared import HELP as SHARED_HELP

app = typer.Typer(help="Prepare datasets.", no_args_is_help=True, rich_markup_mode=None)


@app.command("long-docs")
def long_docs(
    source: str = typer.Argument(
        ...,
        metavar="SOURCE",
        help="SQuAD v1 / KorQuAD 1.0 JSON (paragraph-level), or korquad: the shared dev set.",
    ),
    output: Path = typer.Option(..., "--output", "-o", help="JSON file to write (article-level)."),
    separator: str = typer.Option(
        "\\n", help="Text put between joined paragraphs (escape sequences allowed)."
    ),
    on_bad_example: str = typer.Option(
        "error", callback=one_of("error", "skip"), help="error | skip: what to do with an invalid example."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output file."),
) -> None:
    """Join each article's paragraphs into one long context (answer offsets shifted, ids kept)."""
    from kolong.data.shared import data_file
    from kolong.data.squad import build_long_documents, read_squad, write_squad
    from kolong.io import atomic_output_file

    try:
        joiner = separator.encode("utf-8").decode("unicode_escape")
    except UnicodeDecodeError as error:
        raise typer.BadParameter(
            f"bad escape sequence in {separator!r}: {error.reason}", param_hint="--separator"
        ) from None
    with user_errors(), atomic_output_file(output, overwrite) as staging:
        dataset = read_squad(data_file(source, "SOURCE", names=("korquad",)), on_bad_example)
        examples = build_long_documents(dataset, joiner)
        write_squad(examples, staging, version=f"{dataset.version} (kolong long-docs)")
    lengths = sorted({e.article: len(e.context) for e in examples}.values())
    median = lengths[len(lengths) // 2] if lengths else 0
    console.print(
        f"[green]wrote[/] {output}: {len(lengths)} articles, {len(examples)} questions, "
        f"context characters median {median}, max {max(lengths, default=0)}"
    )
    report_skipped(dataset.skipped)


@app.command("split")
def split(
    source: Path = typer.Argument(
        ..., metavar="SOURCE", help="SQuAD v1 / KorQuAD 1.0 JSON (paragraph- or article-level)."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Directory to write train.json and dev.json to."),
    eval_share: float = typer.Option(
        0.2, "--eval-share", callback=share, help="Share of articles for dev.json (at least one article)."
    ),
    seed: int = typer.Option(0, min=0, max=2**32 - 1, help="Seed of the draw of dev articles."),
    on_bad_example: str = typer.Option(
        "error", callback=one_of("error", "skip"), help="error | skip: what to do with an invalid example."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty output directory."),
) -> None:
    """Split questions into train.json and dev.json by article: no context is on both sides (the questions
    of one article share facts and wording, so a split by question would leak answers)."""
    from kolong.data.squad import read_squad, split_by_article, write_squad
    from kolong.errors import DataError
    from kolong.io import atomic_output_dir

    names = ("train.json", "dev.json")
    with user_errors(), atomic_output_dir(output, overwrite) as staging:
        dataset = read_squad(source, on_bad_example)
        articles = {e.article for e in dataset.examples}
        if len(articles) < 2:
            raise DataError(
                f"{source} has {len(articles)} article(s) with questions; a split needs two or more"
            )
        parts = split_by_article(dataset.examples, eval_share, seed)
        for name, examples in zip(names, parts, strict=True):
            write_squad(examples, staging / name, version=f"{dataset.version} (kolong split, seed {seed})")
    for name, examples in zip(names, parts, strict=True):
        console.print(f"[green]wrote[/] {output / name}: {len({e.article for e in examples})} articles, "
                      f"{len(examples)} questions")  # fmt: skip
    report_skipped(dataset.skipped)


def report_skipped(skipped: list[tuple[str, str]]) -> None:
    if skipped:
        console.print(
            f"[yellow]skipped {len(skipped)} bad examples[/]: " + ", ".join(i for i, _ in skipped[:20])
        )
        for _, reason in skipped[:5]:
            console.print(f"  {reason}", highlight=False)


@app.command("corpus")
def corpus(
    sources: list[str] = typer.Argument(
        ...,
        metavar="SOURCES",
        help="Text files (plain or gzip; one document per line) and/or the shared-data names nsmc, korquad, klue.",
    ),
    tokenizer: str = typer.Option(..., "--tokenizer", "-t", help="Tokenizer directory or hub name."),
    output: Path = typer.Option(..., "--output", "-o", help="Directory to write the packed dataset to."),
    max_length: int = typer.Option(
        128, "--max-length", min=4, help="Tokens per block, [CLS] and [SEP] included."
    ),
    held_out: float = typer.Option(
        0.01, "--held-out", callback=share, help="Share of documents for the validation split."
    ),
    blank_line_documents: bool = typer.Option(
        False, "--blank-line-documents", help="Documents are paragraphs separated by blank lines."
    ),
    on_bad_line: str = typer.Option(
        "error", callback=one_of("error", "skip"), help="error | skip: a line that is not UTF-8."
    ),
    shared_data: Path = typer.Option(None, "--shared-data", help=SHARED_HELP),
    limit: int = typer.Option(None, min=1, help="Stop after this many documents."),
    seed: int = typer.Option(0, min=0, max=2**32 - 1, help="Seed of the held-out split."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty output directory."),
    workers: int = typer.Option(0, min=0, help="Tokenising processes (0: one per available core)."),
) -> None:
    """Tokenise and pack a corpus into [CLS] ... [SEP] blocks with whole-word groups (HF datasets on disk)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from kolong.checkpoints import load_tokenizer
    from kolong.data.corpus import build_corpus

    with user_errors(), Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=console) as progress:  # fmt: skip
        task = progress.add_task("tokenising and packing", total=None)
        stats = build_corpus(
            sources, load_tokenizer(tokenizer, role="tokenizer"), output, max_length=max_length, held_out=held_out, seed=seed,
            shared_data=shared_data, blank_line_documents=blank_line_documents, on_bad_line=on_bad_line,
            limit=limit, overwrite=overwrite, workers=workers,
            on_progress=lambda done: progress.update(task, description=f"tokenising and packing: {done:,} documents"),
        )  # fmt: skip
    for split in ("train", "validation"):
        console.print(
            f"{split}: {stats.documents[split]:,} documents -> {stats.blocks[split]:,} blocks, "
            f"{stats.tokens[split]:,} tokens"
        )
    if stats.bad_lines:
        console.print(
            f"[yellow]skipped {len(stats.bad_lines)} bad lines[/]: " + "; ".join(stats.bad_lines[:5])
        )
    console.print(f"[green]wrote[/] {output}")
