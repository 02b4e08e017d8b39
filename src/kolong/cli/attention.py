"""`kolong attention plans`: the attention engine's plan table, in the order it is read."""

from __future__ import annotations

import typer

from kolong.cli.common import one_of

app = typer.Typer(help="The attention engine.", no_args_is_help=True, rich_markup_mode=None)


@app.command("plans")
def plans(
    output_format: str = typer.Option(
        "text",
        "--format",
        callback=one_of("text", "markdown"),
        help="text | markdown (a table, as in the docs).",
    ),
) -> None:
    """Print the plan table: the first row whose condition holds for a call is its plan."""
    import dataclasses

    from kolong.attention.dispatch import PLAN_FORMS, PLAN_TABLE
    from kolong.attention.options import AttentionOptions

    if output_format == "markdown":
        typer.echo("| # | plan | taken when | why |\n|---:|---|---|---|")
        for number, row in enumerate(PLAN_TABLE, 1):
            typer.echo(f"| {number} | `{row.kernel}` | {row.condition} | {row.why} |")
        return
    width = max(len(row.kernel) for row in PLAN_TABLE)
    for number, row in enumerate(PLAN_TABLE, 1):
        typer.echo(f"{number:2d}. {row.kernel:<{width}}  when {row.condition}")
        typer.echo(f"    {'':<{width}}  {row.why}")
    typer.echo("\nForms of a chosen plan (its label says which):")
    for form in PLAN_FORMS:
        typer.echo(f"  {' / '.join(form.kernels)} {form.name.replace('_', ' ')}: {form.condition}")
    typer.echo("\nRun-time options (--attention-option NAME=VALUE, model.set_attention_options):")
    for spec in dataclasses.fields(AttentionOptions):
        typer.echo(f"  {spec.name} (default {spec.default}): {spec.metadata['help']}")
