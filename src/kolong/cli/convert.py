"""`kolong convert`: an HF BERT / RoBERTa / ELECTRA checkpoint into kolong's encoder."""

from __future__ import annotations

from pathlib import Path

import typer

from kolong.cli.common import console, json_object, one_of, user_errors


def convert(
    model: str = typer.Argument(
        ..., metavar="MODEL", help="Hub name or local directory of a BERT, RoBERTa or ELECTRA model."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Directory to write the kolong checkpoint to."),
    head: str = typer.Option(
        "base",
        callback=one_of("base", "masked-lm", "qa", "token-classification"),
        help="base | masked-lm | qa | token-classification (the source's head).",
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
    attention: str = typer.Option(
        None,
        "--attention",
        help="Attention pattern: full | local:W | local:W+global, W tokens each side (Longformer's window is "
        "2W); global = [CLS], and the question for QA. E.g. local:256+global.",
    ),
    full_attention_every: int = typer.Option(
        0,
        "--full-attention-every",
        min=0,
        help="With a local pattern, layers 0, K, 2K, ... stay full (ModernBERT: 3).",
    ),
    max_length: int = typer.Option(
        None,
        "--max-length",
        "-n",
        min=2,
        help="Extend to this many positions (as `kolong extend`), e.g. 16384.",
    ),
    method: str = typer.Option(
        "interpolate",
        "--method",
        callback=one_of("interpolate", "copy", "last", "random"),
        help="How new position rows start, with --max-length (see docs/extension.md).",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty output directory."),
    tokenizer: bool = typer.Option(True, "--tokenizer/--no-tokenizer", help="Also save the tokenizer."),
) -> None:
    """Convert MODEL into a kolong checkpoint (identical outputs with learned positions), optionally with a
    new position scheme for continued pre-training, a sparse attention pattern and a longer table (a kolong
    MODEL is only made long); load it with AutoModel* after `import kolong`, no remote code."""
    from kolong.errors import KolongError
    from kolong.models.encoder.convert import convert_checkpoint

    kwargs = json_object(position_kwargs, "--position-kwargs")
    with user_errors(), console.status(f"converting {model}"):
        try:
            converted = convert_checkpoint(
                model, output, head, position, kwargs, overwrite=overwrite, tokenizer=tokenizer,
                attention=attention, full_attention_every=full_attention_every, max_length=max_length,
                method=method,
            )  # fmt: skip
        except ValueError as error:
            if isinstance(error, KolongError):  # model and path errors name the path
                raise
            # not kolong's: a bad scheme or scheme option, named by KolongConfig
            hint = "--position-encoding / --position-kwargs" if position or kwargs else "MODEL"
            raise typer.BadParameter(str(error), param_hint=hint) from None
    config = converted.config
    from kolong.extension.position_table import find_position_table

    learned = config.position_encoding == "learned"
    pattern = config.attention_pattern
    if pattern != "full":
        pattern += f" (window {config.attention_window} each side"
        pattern += (
            f", full every {config.full_attention_every} layers)" if config.full_attention_every else ")"
        )
    console.print(
        f"[green]converted[/] {model} -> {type(converted).__name__} ({config.num_hidden_layers} layers, "
        f"hidden {config.hidden_size}, position_encoding={config.position_encoding}, attention {pattern}, "
        f"{find_position_table(converted).max_length if learned else 'any'} positions) -> {output}"
    )
