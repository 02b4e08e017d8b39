"""Shared pieces of the CLI: the console, user-facing errors, progress display."""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from kolong.errors import InterruptedRunError, KolongError

# A line no table or path of kolong's reaches: where output goes to a file or a pipe, rich wraps nothing at it.
UNWRAPPED = 10_000


def make_console(stderr: bool = False) -> Console:
    """rich's console. On a terminal, its width; where the stream is a file or a pipe (and COLUMNS does not say a
    width), nothing is cut or wrapped: tables take the width of their content, paths and lines their own length,
    so a redirected table, markdown row or output path reads whole."""
    console = Console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(stderr=stderr, width=UNWRAPPED, soft_wrap=True)


console = make_console()
errors = make_console(stderr=True)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn kolong's refusals (`KolongError`) into one red line and exit status 2, never a traceback."""
    try:
        yield
    except InterruptedRunError as error:  # Ctrl-C: the shell's status for SIGINT, after the way to resume
        errors.print(f"[bold yellow]{escape(str(error))}[/]", highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None
    except (KolongError, FileNotFoundError) as error:
        errors.print(f"[bold red]error:[/] {escape(str(error))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except OSError as error:  # a file the system refused (permissions, disk full): named, not a traceback
        if error.filename is None:
            raise
        errors.print(
            f"[bold red]error:[/] {escape(f'{error.strerror}: {error.filename}')}",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(2) from None


def one_of(*choices: str) -> Callable[[str | None], str | None]:
    """Option callback: the value must be one of `choices` (a usage error naming the option otherwise)."""

    def check(value: str | None) -> str | None:
        if value is not None and value not in choices:
            raise typer.BadParameter(f"{value!r} is not one of: {', '.join(choices)}")
        return value

    check.choices = choices  # read by the bad-input tests
    return check


def json_object(text: str | None, flag: str) -> dict | None:
    """A JSON object option (`--position-kwargs`), or a usage error naming it."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise typer.BadParameter(f"not valid JSON: {error}", param_hint=flag) from None
    if not isinstance(value, dict):
        raise typer.BadParameter(f"expected a JSON object such as '{{\"max_distance\": 8}}', got {text}",
                                 param_hint=flag)  # fmt: skip
    return value


def positive(value: float | None) -> float | None:
    """Option callback: a finite number above zero."""
    if value is not None and not 0 < value < math.inf:  # NaN fails it too
        raise typer.BadParameter(f"must be a positive finite number, got {value}")
    return value


positive.bad_values = (0, -1.5, "nan", "inf")


def finite(value: float | None) -> float | None:
    """Option callback of a float with typer's `min=` / `max=`: typer before 0.2x lets NaN through them."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number, got {value}")
    return value


def share(value: float | None) -> float | None:
    """Option callback: a share of a whole, 0 <= value < 1."""
    if value is not None and not 0 <= value < 1:
        raise typer.BadParameter(f"must be at least 0 and below 1, got {value}")
    return value


share.bad_values = (-0.1, 1.0, "nan")


def show_kolong_warnings() -> None:
    """Print kolong's warnings (`kolong.errors.warn`) as one yellow line each, not Python's two-line form."""
    import warnings

    from kolong.errors import KolongWarning

    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if isinstance(category, type) and issubclass(category, KolongWarning):
            errors.print(f"[yellow]warning:[/] {escape(str(message))}", highlight=False, soft_wrap=True)
        else:
            shown(message, category, filename, lineno, file, line)

    if getattr(shown, "__name__", "") != "show":
        warnings.showwarning = show


def report(message: str) -> None:
    """One line of a command's progress, on stderr: stdout keeps what the command produces."""
    errors.print(message, style="dim", highlight=False, markup=False, soft_wrap=True)


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
