"""Errors of kolong's tokenizers: the CLI prints them as one red line (exit status 2)."""

from __future__ import annotations

INSTALL_HINT = 'pip install "kolong[korean]"'


class TokenizerError(ValueError):
    """A tokenizer cannot be built, trained, loaded or applied as asked."""


class CorpusError(TokenizerError):
    """A training or statistics corpus that kolong cannot read: the file and line are in the message."""


class AnalyserMissingError(TokenizerError, ImportError):
    """The morphological analyser's Python package is not installed."""
