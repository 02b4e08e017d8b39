"""kolong's torch.profiler ranges, which `kolong bench ... --profile` reports by name."""

from __future__ import annotations

import contextlib

import torch

PROFILER_PREFIX = "kolong: "


def labelled(name: str):
    """A torch.profiler range named PROFILER_PREFIX + NAME; none inside a compiled graph."""
    if torch.compiler.is_compiling():
        return contextlib.nullcontext()
    return torch.profiler.record_function(PROFILER_PREFIX + name)
