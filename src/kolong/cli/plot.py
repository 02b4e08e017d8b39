"""`kolong plot ...`: figures."""

from __future__ import annotations

from pathlib import Path

import typer

from kolong.cli.common import console, json_object, user_errors
from kolong.errors import KolongError

IMAGE_FORMATS = ("png", "pdf", "svg", "jpg", "jpeg", "eps", "ps", "tif", "tiff", "webp")


def _image_path(path: Path) -> Path:
    suffix = path.suffix.lstrip(".").lower()
    if suffix and suffix not in IMAGE_FORMATS:
        raise typer.BadParameter(f"{path}: .{suffix} is not an image format ({', '.join(IMAGE_FORMATS)})")
    return path


app = typer.Typer(help="Draw figures (position tables, ...).", no_args_is_help=True, rich_markup_mode=None)


@app.command("positions")
def positions(
    models: list[str] = typer.Argument(
        None,
        metavar="MODELS",
        help="One or two checkpoints with learned tables, e.g. the original and the extended.",
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", callback=_image_path, help="Image file to write (.png, .pdf, .svg)."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing image."),
    labels: list[str] = typer.Option(
        None, "--label", help="Panel title per model (repeat; default: folder names)."
    ),
    scheme: str = typer.Option(
        None, "--scheme", help="Draw a scheme by name instead: sinusoidal, memn2n, rope, alibi, shaw, t5."
    ),
    length: int = typer.Option(512, "--length", min=2, max=4096, help="Positions to draw (with --scheme)."),
    dim: int = typer.Option(
        128, "--dim", min=2, max=4096, help="Encoding dimension (head size for rope) (with --scheme)."
    ),
    heads: int = typer.Option(
        12, "--heads", min=1, max=128, help="Attention heads (ALiBi slopes) (with --scheme)."
    ),
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
        from kolong.io import atomic_output_file
        from kolong.plots.schemes import plot_scheme

        kwargs = json_object(position_kwargs, "--position-kwargs")
        with user_errors(), atomic_output_file(output, overwrite) as staging:
            try:
                plot_scheme(scheme, length, dim, staging, heads=heads, position_kwargs=kwargs)
            except ValueError as error:
                if isinstance(error, KolongError):
                    raise
                hint = "--scheme / --position-kwargs" if kwargs else "--scheme"
                raise typer.BadParameter(str(error), param_hint=hint) from None
        console.print(f"[green]wrote[/] {output}")
        return

    from kolong.io import atomic_output_file
    from kolong.plots.positions import plot_position_tables, position_rows_of

    if not models:
        raise typer.BadParameter("give one or two MODELS, or --scheme NAME", param_hint="MODELS")
    if len(models) > 2:
        raise typer.BadParameter("give one or two models", param_hint="MODELS")
    if labels and len(labels) != len(models):
        raise typer.BadParameter(f"give one --label per model ({len(models)})", param_hint="--label")
    with user_errors(), atomic_output_file(output, overwrite) as staging:
        with console.status("loading position tables"):
            tables = [position_rows_of(model) for model in models]
        if labels:
            tables = [(label, rows) for label, (_, rows) in zip(labels, tables, strict=True)]
        plot_position_tables(tables, staging)
    console.print(f"[green]wrote[/] {output}")


@app.command("retrieval")
def retrieval(
    results: list[Path] = typer.Argument(
        ...,
        metavar="RESULTS",
        help="retrieval.json files (or their folders) of `kolong evaluate retrieval`; one panel each, runs of the "
        "same task over the same queries sharing one.",
    ),
    output: Path = typer.Option(..., "--output", "-o", callback=_image_path, help="Image file to write."),
    readers: list[str] = typer.Option(None, "--reader", help="Only these readers (repeat; default: all)."),
    dpi: int = typer.Option(100, "--dpi", min=50, max=600, help="Resolution of a raster image."),
    by: str = typer.Option(
        "length",
        "--by",
        help="length: buckets of the relevant document's length | depth: of the target's depth.",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing image."),
) -> None:
    """Draw nDCG@10 against document length (or the target's depth), one line per reader, with 95% intervals."""
    from kolong.io import atomic_output_file
    from kolong.plots.retrieval import plot_by_length, read_results

    with user_errors(), atomic_output_file(output, overwrite) as staging:
        plot_by_length([read_results(path) for path in results], staging, readers, dpi, by)
    console.print(f"[green]wrote[/] {output}", soft_wrap=True)
