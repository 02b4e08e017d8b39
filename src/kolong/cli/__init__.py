"""The `kolong` command line: thin typer commands over library functions."""

from __future__ import annotations

import sys

import typer

from kolong.cli import (
    bench,
    classification,
    convert,
    data,
    demo,
    experiment,
    extend,
    plot,
    pretrain,
    qa,
    seq2seq,
    tokenizer,
)

app = typer.Typer(
    name="kolong",
    help="Transformer language models for long Korean text.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help and usage errors: rich's help formatter costs about 0.1 s of every start (issue 12's
    # budget is 0.5 s); kolong's own output still goes through rich.
    rich_markup_mode=None,
)
app.command("extend")(extend.extend)
app.command("convert")(convert.convert)
app.command("demo")(demo.demo)
app.add_typer(plot.app, name="plot")
app.add_typer(bench.app, name="bench")
app.add_typer(data.app, name="data")
qa.finetune_app.command("cls")(classification.finetune_cls)
qa.finetune_app.command("seq2seq")(seq2seq.finetune_seq2seq)
app.add_typer(qa.finetune_app, name="finetune")
app.add_typer(qa.predict_app, name="predict")
app.add_typer(qa.evaluate_app, name="evaluate")
app.add_typer(experiment.app, name="experiment")
app.add_typer(pretrain.app, name="pretrain")
app.add_typer(tokenizer.app, name="tokenizer")


def _quiet_transformers() -> None:
    # HF's per-file progress bars and length warnings drown kolong's own output on the terminal.
    logging = sys.modules["transformers.utils.logging"]
    logging.set_verbosity_error()
    logging.disable_progress_bar()


def main() -> None:
    from kolong.integration import after_import
    from kolong.runtime import tune_allocator

    tune_allocator()
    # Only commands that need transformers import it; they find it quiet.
    after_import("transformers.utils.logging", _quiet_transformers)
    app()
