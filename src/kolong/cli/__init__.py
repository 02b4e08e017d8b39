"""The `kolong` command line: thin typer commands over library functions."""

from __future__ import annotations

import typer

from kolong.cli import bench, demo, extend, plot

app = typer.Typer(
    name="kolong",
    help="Transformer language models for long Korean text.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("extend")(extend.extend)
app.command("demo")(demo.demo)
app.add_typer(plot.app, name="plot")
app.add_typer(bench.app, name="bench")


def main() -> None:
    from transformers.utils import logging

    # HF's per-file progress bars and length warnings drown kolong's own output on the terminal.
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    app()
