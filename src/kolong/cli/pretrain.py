"""`kolong pretrain ...`: pre-training recipes over the HF Trainer (torchrun / accelerate scale them)."""

from __future__ import annotations

import json

import typer

from kolong.cli.arguments import SectionedHelp, command_from
from kolong.cli.common import console, user_errors
from kolong.errors import ConfigError, KolongError
from kolong.training.pretraining_arguments import PretrainArguments, SpanPretrainArguments

app = typer.Typer(help="Pre-training recipes.", no_args_is_help=True, rich_markup_mode=None)


@app.command("mlm", cls=SectionedHelp)
@command_from(PretrainArguments)
def mlm(args: PretrainArguments) -> None:
    """Pre-train kolong's encoder with masked language modelling; started again, it resumes exactly.

    Many processes: torchrun --nproc_per_node N -m kolong pretrain mlm ... (or accelerate launch -m kolong ...).
    Python: kolong.training.pretrain.pretrain_mlm(PretrainArguments(...)).
    """
    from kolong.training.pretrain import pretrain_mlm

    with user_errors():
        try:
            metrics = pretrain_mlm(args)
        except ValueError as error:
            if isinstance(error, KolongError):
                raise
            raise ConfigError(str(error)) from None  # preset, override, scheme: named in the message
    summary = ", ".join(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
                        for key, value in metrics.items())  # fmt: skip
    console.print(f"[green]pre-trained[/] -> {args.output_dir}: {summary}")


@app.command("span", cls=SectionedHelp)
@command_from(SpanPretrainArguments)
def span(args: SpanPretrainArguments) -> None:
    """Pre-train a byte-level encoder-decoder with T5 span corruption aligned to UTF-8 characters.

    Uptraining as the Korean token-free paper: --model google/byt5-small --add-gbst. Resumes in OUTPUT.
    Python: kolong.training.span.pretrain_span(SpanPretrainArguments(...)).
    """
    from kolong.training.span import pretrain_span

    with user_errors():
        metrics = pretrain_span(args)
    console.print_json(json.dumps(metrics, ensure_ascii=False))
