"""`kolong demo`: the README's first command."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from kolong.cli.common import console, user_errors


def demo(
    model: Path = typer.Option(
        None, "--model", help="Local checkpoint to use instead of the bundled all-MiniLM-L6-v2."
    ),
    max_length: int = typer.Option(2048, "--max-length", "-n", help="Target number of positions."),
    qa: bool = typer.Option(
        True, "--qa/--no-qa", help="Also run the long-document QA workflow (about 2 minutes)."
    ),
) -> None:
    """Extend a pretrained encoder 512 -> 2048 with every method on built-in Korean text; print a table."""
    from kolong.demo import run_demo

    methods = ("interpolate", "interpolate+keep-short", "copy", "last", "random")
    with user_errors(), console.status("loading the model") as status:
        description, rows = run_demo(
            model, max_length, methods, on_method=lambda name: status.update(f"extending with {name}")
        )
    table = Table(title=f"kolong extend: {description}\n512 -> {max_length} positions, built-in Korean text")
    table.add_column("method", no_wrap=True)
    for header in ("extend ms", "short Δh", "short cos", "long cos", "long s", "reload"):
        table.add_column(header, justify="right")
    for row in rows:
        table.add_row(
            row.method,
            f"{row.extend_ms:.1f}",
            f"{row.short_max_diff:.3g}",
            f"{row.short_cosine:.4f}",
            f"{row.long_cosine:.4f}",
            f"{row.long_forward_s:.2f}",
            "[green]ok[/]" if row.reload_ok else "[red]FAILED[/]",
        )
    console.print(table)
    console.print(
        "short Δh / short cos: a 256-token input, extended vs original model (max |hidden-state difference|, "
        "cosine of mean-pooled embeddings; 0 and 1.0000 = behaviour kept).\n"
        f"long cos: a {max_length}-token document read at once vs the original model reading it in "
        f"{max_length // 512} chunks of 512 (higher = more coherent long reading).\n"
        "reload: save_pretrained -> AutoModel.from_pretrained gives no missing/unexpected keys and identical outputs; "
        "long s: seconds of one long forward pass. "
        "More in docs/extension.md."
    )
    if not all(row.reload_ok for row in rows):
        raise typer.Exit(1)
    if qa:
        from kolong.demo import run_qa_demo

        with (
            user_errors(),
            console.status("long-document QA: extend -> long-docs -> finetune -> predict -> evaluate"),
        ):
            result = run_qa_demo(model)
        qa_table = Table(title="long-document QA workflow on the built-in Korean articles (smoke test)")
        qa_table.add_column("model", no_wrap=True)
        for header in ("positions", "articles", "questions", "train windows", "EM", "F1", "seconds"):
            qa_table.add_column(header, justify="right")
        qa_table.add_row(
            result.model,
            str(result.max_length),
            str(result.articles),
            str(result.questions),
            str(result.train_windows),
            f"{result.exact_match:.1f}",
            f"{result.f1:.1f}",
            f"{result.seconds:.0f}",
        )
        console.print(qa_table)
        console.print(
            "The model is extended with `copy`, fine-tuned on the article-level documents and scored with the "
            "official KorQuAD metric on the same 14 questions: it shows the pipeline works end to end, not "
            "how well it generalises (see `kolong experiment length` and docs/reproductions.md)."
        )
