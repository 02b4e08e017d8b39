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
) -> None:
    """PCA of the position rows (3 components against position) and cosine-similarity heatmaps, side by side."""
    from kolong.plots.positions import plot_position_tables, position_rows_of

    if len(models) > 2:
        raise typer.BadParameter("give one or two models", param_hint="MODELS")
    with user_errors(), console.status("loading position tables"):
        tables = [position_rows_of(model) for model in models]
        plot_position_tables(tables, output)
    console.print(f"[green]wrote[/] {output}")
