"""The `kolong` command line: thin typer commands over library functions."""

from __future__ import annotations

import signal
import sys

import typer

from kolong.cli import (
    attention,
    bench,
    compress,
    convert,
    data,
    demo,
    experiment,
    extend,
    finetune,
    plot,
    pretrain,
    qa,
    retrieval,
    tokenizer,
)

app = typer.Typer(
    name="kolong",
    help="Transformer language models for long Korean text.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help and usage errors: rich's help formatter is a large share of the start-up budget that
    # `kolong bench startup` checks; kolong's own output still goes through rich.
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"kolong {version('kolong')}")
        except PackageNotFoundError:  # running from a source tree that was never installed
            from kolong import __version__

            typer.echo(f"kolong {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print kolong's version and exit."
    ),
) -> None:
    """Transformer language models for long Korean text."""
    from kolong.cli.common import show_kolong_warnings

    show_kolong_warnings()


app.command("extend")(extend.extend)
app.command("convert")(convert.convert)
app.command("demo")(demo.demo)
app.command("quantize")(compress.quantize)
app.add_typer(compress.export_app, name="export")
app.add_typer(compress.distill_app, name="distill")
app.add_typer(plot.app, name="plot")
app.add_typer(attention.app, name="attention")
app.add_typer(bench.app, name="bench")
app.add_typer(data.app, name="data")
app.add_typer(finetune.app, name="finetune")
app.add_typer(finetune.predict_app, name="predict")
qa.evaluate_app.command("retrieval")(retrieval.evaluate)
qa.evaluate_app.command("mteb")(retrieval.evaluate_mteb)
data.app.command("retrieval")(retrieval.build_task)
app.command("embed")(retrieval.embed)
app.add_typer(qa.evaluate_app, name="evaluate")
app.add_typer(experiment.app, name="experiment")
app.add_typer(pretrain.app, name="pretrain")
app.add_typer(tokenizer.app, name="tokenizer")


def _quiet_transformers() -> None:
    # HF's per-file progress bars and length warnings drown kolong's own output on the terminal.
    logging = sys.modules["transformers.utils.logging"]
    logging.set_verbosity_error()
    logging.disable_progress_bar()


def _quiet_torchao() -> None:
    import warnings

    from kolong.integration import quiet_torchao_import

    quiet_torchao_import()
    # torch >= 2.15 compiling a quantized model (`predict qa --compile`) asks torchao 0.18's int8 tensors for a
    # cache key they lack: the model compiles and runs, only torch's compile cache cannot keep it.
    warnings.filterwarnings(
        "ignore", message=r".* does not implement _stable_hash_for_caching", category=UserWarning
    )


def main() -> None:
    from kolong.integration import after_import
    from kolong.runtime import flush_denormals, tune_allocator

    tune_allocator()
    flush_denormals()
    _quiet_torchao()
    # Only commands that need transformers import it; they find it quiet.
    after_import("transformers.utils.logging", _quiet_transformers)
    from kolong.cli.arguments import bare_yes, only_the_named_command

    argv = sys.argv[1:]
    signal.signal(signal.SIGINT, _stop)
    try:
        only_the_named_command(app, argv)(args=bare_yes(app, argv), prog_name="kolong")
    except Stopped:
        command = " ".join(word for word in argv[:2] if not word.startswith("-"))
        sys.stderr.write(
            f"stopped by Ctrl-C: `kolong {command}` left no partial output (kolong writes its files whole or not at "
            "all); training and benchmarks resume from where they stopped when run again\n"
        )
        sys.exit(130)


class Stopped(BaseException):
    """Ctrl-C outside a training loop (which stops at its next checkpoint instead): not a KeyboardInterrupt, so
    that no layer in between turns it into its own message or exit status."""


def _stop(signum, frame) -> None:
    raise Stopped
