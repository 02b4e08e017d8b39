"""`kolong extend`: length extension of a pretrained checkpoint."""

from __future__ import annotations

from pathlib import Path

import typer

from kolong.cli.common import console, one_of, step_progress, user_errors


def extend(
    model: str = typer.Argument(
        ...,
        metavar="MODEL",
        help="Hub name or local directory of a model with a learned absolute table or RoPE; a "
        "sentence-transformers directory (modules.json) is extended with every module kept.",
    ),
    max_length: int = typer.Option(
        ..., "--max-length", "-n", min=1, help="New number of token positions, e.g. 2048."
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Directory to write the extended model and tokenizer."
    ),
    method: str = typer.Option(
        "interpolate",
        "--method",
        callback=one_of("interpolate", "copy", "last", "random", "linear", "ntk", "yarn"),
        help="Learned tables: interpolate | copy | last | random. RoPE models (ModernBERT, mmBERT): linear "
        "(interpolate means it there too) | ntk | yarn, on the global layers (see docs/extension.md).",
    ),
    keep_short_behaviour: bool = typer.Option(
        False,
        "--keep-short-behaviour",
        help="With interpolate to a multiple of the old length: scale position ids so inputs up to the old "
        "length reproduce the original model (stored in config.json; loading needs `import kolong`).",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty output directory."),
    tokenizer: bool = typer.Option(True, "--tokenizer/--no-tokenizer", help="Also save the tokenizer."),
    seed: int = typer.Option(0, min=0, max=2**32 - 1, help="Seed of the `random` method."),
) -> None:
    """Extend the position table of MODEL to --max-length tokens and save model + tokenizer to -o."""
    from kolong.extension.checkpoint import extend_checkpoint

    with user_errors(), step_progress(4) as progress:
        task = progress.add_task("starting", total=4 if tokenizer else 3)

        def on_step(message: str) -> None:
            if progress.tasks[task].description != "starting":
                progress.advance(task)
            progress.update(task, description=message)

        report = extend_checkpoint(
            model,
            output,
            max_length,
            method,
            keep_short_behaviour=keep_short_behaviour,
            overwrite=overwrite,
            tokenizer=tokenizer,
            seed=seed,
            on_step=on_step,
        )
        progress.update(task, completed=progress.tasks[task].total, description="done")
    what = f"{report.rows} table rows" if report.rows else "rotary positions, no table"
    embedding = (
        f"; embedding model, {report.pooling} pooling, max_seq_length {report.new_length}"
        if report.pooling
        else ""
    )
    console.print(
        f"[green]extended[/] {report.model_class} {report.old_length} -> {report.new_length} positions "
        f"({report.method}, {what}, {report.seconds * 1000:.0f} ms{embedding}) -> {report.output}"
        + ("" if report.tokenizer_saved else " [yellow](no tokenizer saved)[/]"),
        soft_wrap=True,
    )
