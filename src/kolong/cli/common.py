"""Shared pieces of the CLI: the console, user-facing errors, progress display."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from kolong.errors import KolongError

console = Console()
errors = Console(stderr=True)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn kolong's refusals (`KolongError`) into one red line and exit status 2, never a traceback."""
    try:
        yield
    except (KolongError, FileNotFoundError) as error:
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


@contextlib.contextmanager
def stages(title: str, started: float | None = None) -> Iterator[Callable[[str], None]]:
    """Progress of a long command: a spinner on a terminal; elsewhere (a log file, CI) one line per stage
    with the seconds since `started` (a `time.perf_counter()` value; default: now), so a redirected run
    still shows where it is."""
    started = time.perf_counter() if started is None else started
    if console.is_terminal:
        with console.status(title) as status:
            yield status.update
        return

    def line(message: str) -> None:
        console.print(f"[{time.perf_counter() - started:5.0f}s] {message}", highlight=False, markup=False)

    line(title)
    yield line
