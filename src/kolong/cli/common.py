"""Shared pieces of the CLI: the console, user-facing errors, progress display."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

console = Console()
errors = Console(stderr=True)


def _user_error_types() -> tuple[type[BaseException], ...]:
    from kolong.checkpoints import CheckpointError
    from kolong.data.squad import DataError
    from kolong.extension import ExtensionError
    from kolong.io import OutputExistsError
    from kolong.tokenizers.errors import TokenizerError

    return (CheckpointError, DataError, ExtensionError, OutputExistsError, TokenizerError, FileNotFoundError)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn kolong's refusals into one red line and exit status 2, never a traceback."""
    try:
        yield
    except _user_error_types() as error:
        errors.print(f"[bold red]error:[/] {error}", highlight=False)
        raise typer.Exit(2) from None


def step_progress(total: int) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
