"""`kolong convert`: an HF BERT / RoBERTa / ELECTRA checkpoint into kolong's encoder."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kolong.cli.common import console, user_errors


def convert(
    model: str = typer.Argument(..., help="Hub name or local directory of a BERT, RoBERTa or ELECTRA model."),
    output: Path = typer.Option(..., "--output", "-o", help="Directory to write the kolong checkpoint to."),
    head: str = typer.Option(
        "base", help="base | masked-lm | qa | token-classification (the source's head)."
    ),
    position: str = typer.Option(
        None,
        "--position-encoding",
        "--position_encoding",
        help="Swap the position scheme (e.g. shaw); its parameters start fresh.",
    ),
    position_kwargs: str = typer.Option(
        None, "--position-kwargs", help="Options of the new scheme as JSON, e.g. '{\"max_distance\": 32}'."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty output directory."),
    tokenizer: bool = typer.Option(True, "--tokenizer/--no-tokenizer", help="Also save the tokenizer."),
) -> None:
    """Convert MODEL into a kolong checkpoint (identical outputs with learned positions), optionally with a
    new position scheme for continued pre-training; load it with AutoModel* after `import kolong`."""
    from kolong.models.encoder.convert import ConversionError, convert_checkpoint

    try:
        kwargs = json.loads(position_kwargs) if position_kwargs else None
    except json.JSONDecodeError as error:
        raise typer.BadParameter(f"not valid JSON: {error}", param_hint="--position-kwargs") from None
    with user_errors(), console.status(f"converting {model}"):
        try:
            converted = convert_checkpoint(
                model, output, head, position, kwargs, overwrite=overwrite, tokenizer=tokenizer
            )
        except ConversionError as error:
            raise typer.BadParameter(str(error), param_hint="MODEL") from None
        except ValueError as error:  # a bad scheme or scheme option, named by KolongConfig
            raise typer.BadParameter(
                str(error), param_hint="--position-encoding / --position-kwargs"
            ) from None
    config = converted.config
    console.print(
        f"[green]converted[/] {model} -> {type(converted).__name__} ({config.num_hidden_layers} layers, "
        f"hidden {config.hidden_size}, position_encoding={config.position_encoding}) -> {output}"
    )
