"""`kolong data ...`: dataset preparation."""

from __future__ import annotations

from pathlib import Path

import typer

from kolong.cli.common import console, user_errors

app = typer.Typer(help="Prepare datasets.", no_args_is_help=True)


@app.command("long-docs")
def long_docs(
    source: Path = typer.Argument(..., help="SQuAD v1 / KorQuAD 1.0 JSON (paragraph-level)."),
    output: Path = typer.Option(..., "--output", "-o", help="JSON file to write (article-level)."),
    separator: str = typer.Option(
        "\\n", help="Text put between joined paragraphs (escape sequences allowed)."
    ),
    on_bad_example: str = typer.Option("error", help="error | skip: what to do with an invalid example."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output file."),
) -> None:
    """Join each article's paragraphs into one long context (answer offsets shifted, ids kept)."""
    from kolong.data.squad import build_long_documents, read_squad, write_squad
    from kolong.io import OutputExistsError

    with user_errors():
        if output.exists() and not overwrite:
            raise OutputExistsError(f"{output} exists; pass --overwrite to replace it")
        dataset = read_squad(source, on_bad_example)
        joiner = separator.encode("utf-8").decode("unicode_escape")
        examples = build_long_documents(dataset, joiner)
        write_squad(examples, output, version=f"{dataset.version} (kolong long-docs)")
    lengths = sorted({e.article: len(e.context) for e in examples}.values())
    median = lengths[len(lengths) // 2] if lengths else 0
    console.print(
        f"[green]wrote[/] {output}: {len(lengths)} articles, {len(examples)} questions, "
        f"context characters median {median}, max {max(lengths, default=0)}"
    )
    report_skipped(dataset.skipped)


def report_skipped(skipped: list[tuple[str, str]]) -> None:
    if skipped:
        console.print(
            f"[yellow]skipped {len(skipped)} bad examples[/]: " + ", ".join(i for i, _ in skipped[:20])
        )
        for _, reason in skipped[:5]:
            console.print(f"  {reason}", highlight=False)
