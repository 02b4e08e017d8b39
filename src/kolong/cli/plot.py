"""`kolong plot ...`: figures."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kolong.cli.common import console, user_errors

app = typer.Typer(help="Draw figures (position tables, ...).", no_args_is_help=True, rich_markup_mode=None)


@app.command("positions")
def positions(
    models: list[str] = typer.Argument(
        None, help="One or two checkpoints with learned tables, e.g. the original and the extended."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Image file to write (.png, .pdf, .svg)."),
    labels: list[str] = typer.Option(
        None, "--label", help="Panel title per model (repeat; default: folder names)."
    ),
    scheme: str = typer.Option(
        None, "--scheme", help="Draw a scheme by name instead: sinusoidal, memn2n, rope, alibi, shaw, t5."
    ),
    length: int = typer.Option(512, "--length", help="Positions to draw (with --scheme)."),
    dim: int = typer.Option(128, "--dim", help="Encoding dimension (head size for rope) (with --scheme)."),
    heads: int = typer.Option(12, "--heads", help="Attention heads (ALiBi slopes) (with --scheme)."),
    position_kwargs: str = typer.Option(
        None,
        "--position-kwargs",
        help="Scheme options as JSON, e.g. '{\"max_distance\": 8}' (with --scheme).",
    ),
) -> None:
    """Draw position encodings: a checkpoint's learned table (PCA curves, cosine similarity, the table), or a
    scheme by name (--scheme: the encoding matrix and position-to-position similarity)."""
    if scheme is not None:
        if models:
            raise typer.BadParameter("give either MODELS or --scheme, not both", param_hint="--scheme")
        from kolong.plots.schemes import plot_scheme

        try:
            kwargs = json.loads(position_kwargs) if position_kwargs else None
        except json.JSONDecodeError as error:
            raise typer.BadParameter(f"not valid JSON: {error}", param_hint="--position-kwargs") from None
        if length < 2 or dim < 2:
            raise typer.BadParameter("--length and --dim must be at least 2")
        try:
            plot_scheme(scheme, length, dim, output, heads=heads, position_kwargs=kwargs)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--scheme") from None
        console.print(f"[green]wrote[/] {output}")
        return

    from kolong.plots.positions import plot_position_tables, position_rows_of

    if not models:
        raise typer.BadParameter("give one or two MODELS, or --scheme NAME", param_hint="MODELS")
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
