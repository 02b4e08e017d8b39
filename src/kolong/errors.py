"""kolong's refusals: one base class, so the CLI turns every one into one red line and exit status 2.

Each error keeps a builtin base too (`ValueError`, `FileExistsError`, `ImportError`) so that code
written against the builtin keeps catching it. The message names what is at fault: the option, file,
line or example, and the fix when there is one.
"""

from __future__ import annotations

import warnings

INSTALL_HINT = 'pip install "kolong[korean]"'


class KolongError(Exception):
    """Base of every error kolong raises on purpose for bad input; never a bug."""


class DataError(KolongError, ValueError):
    """Input data that kolong cannot use, with the file and place in the message."""


class ConfigError(KolongError, ValueError):
    """An option, a configuration file or a combination of settings that cannot work."""


class CheckpointError(KolongError, ValueError):
    """A path or name that does not lead to a loadable model, or a model kolong cannot use as asked."""


class ExtensionError(CheckpointError):
    """A model or request that kolong refuses to extend, with the reason in the message."""


class ConversionError(CheckpointError):
    """A model kolong cannot convert, with the reason."""


class OutputExistsError(KolongError, FileExistsError):
    """The output path holds something and the user did not allow overwriting it."""


class OutputBusyError(KolongError):
    """Another kolong run holds the lock of the output path; the message names it."""


class OutOfMemoryError(KolongError, MemoryError):
    """What was asked does not fit the device's memory; the message names the case and what to lower."""


class TrainingDivergedError(KolongError, FloatingPointError):
    """Training met a loss or gradient that is not a finite number; the message names the step and the fix."""


class InterruptedRunError(KolongError):
    """A run stopped by Ctrl-C or SIGTERM at a checkpoint; the message says how to resume."""


class TokenizerError(KolongError, ValueError):
    """A tokenizer cannot be built, trained, loaded or applied as asked."""


class CorpusError(TokenizerError, DataError):
    """A training or statistics corpus that kolong cannot read: the file and line are in the message."""


class AnalyserMissingError(TokenizerError, ImportError):
    """The morphological analyser's Python package is not installed."""


class KolongWarning(UserWarning):
    """Something kolong did on the user's behalf that they should know of (skipped, ignored, replaced)."""


def warn(message: str) -> None:
    """Tell the user; the CLI prints it as one yellow `warning:` line."""
    warnings.warn(message, KolongWarning, stacklevel=3)
