"""`kolong plot ...`: figures."""

from __future__ import annotations

from pathlib import Path

import typer

from kolong.cli.common import console, user_errors

app = typer.Typer(help="Draw figures (position tables, ...).", no_args_is_help=True)


@app.command("positions")
def positions(
    models: list[str] = typer.Argument(
        ..., help="One or two checkpoints, e.g. the original and the extended."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Image file to write (.png, .pdf, .svg)."),
    labels: list[str] = typer.Option(
        None, "--label", help="Panel title per model (repeat; default: folder names)."
    ),
) -> None:
    """PCA of the position rows (3 components against position) and cosine-similarity heatmaps, side by side."""
    from kolong.plots.positions import plot_position_tables, position_rows_of

    if len(models) > 2:
        raise typer.BadParameter("give one or two models", param_hint="MODELS")
    if labels and len(labels) != len(models):
        raise typer.BadParameter(f"give one --label per model ({len(models)})", param_hint="--label")
    with user_errors(), console.status("loading position tables"):
        tables = [position_rows_of(model) for model in models]
        if labels:
            tables = [(label, rows) for label, (_, rows) in zip(labels, tables, strict=True)]
        plot_position_tables(tables, output)
    console.print(f"[green]wrote[/] {output}")
