"""The position schemes by name, importable without torch: what CLI help and option checks read.

Adding a scheme is one module (a `PositionEncoding` subclass that states its facts: options and
defaults, `max_length()`, `panels()` for `kolong plot positions`, `bench_kwargs` for `kolong bench
encoder`) plus one line here, or `register_scheme(name, "module:Class")` from outside kolong.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

SCHEMES: dict[str, str] = {
    "learned": "kolong.positions.learned:LearnedPositions",
    "sinusoidal": "kolong.positions.sinusoidal:SinusoidalPositions",
    "memn2n": "kolong.positions.memn2n:MemN2NPositions",
    "shaw": "kolong.positions.shaw:ShawPositions",
    "t5": "kolong.positions.t5:T5Positions",
    "alibi": "kolong.positions.alibi:ALiBiPositions",
    "rope": "kolong.positions.rope:RotaryPositions",
    "none": "kolong.positions.none:NoPositions",
}


def register_scheme(name: str, target: str) -> None:
    """Make `position_encoding=name` build the class at `target` ("package.module:Class")."""
    SCHEMES[name] = target


def scheme_names() -> list[str]:
    return list(SCHEMES)


def scheme_class(name: str):
    """The scheme's class (imports its module, hence torch); ValueError naming the choices otherwise."""
    target = SCHEMES.get(name) if isinstance(name, str) else None
    if target is None:
        raise ValueError(
            f"position_encoding={name!r} is not a known scheme; choose one of: {', '.join(SCHEMES)}"
        )
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


class _SchemeClasses(Mapping):
    """`SCHEMES[name]` -> the scheme's class, read from the registry at each access (late registrations count)."""

    def __getitem__(self, name: str):
        if name not in SCHEMES:
            raise KeyError(name)
        return scheme_class(name)

    def __iter__(self):
        return iter(SCHEMES)

    def __len__(self) -> int:
        return len(SCHEMES)


SCHEME_CLASSES = _SchemeClasses()


def build_position_encoding(config):
    """The scheme module named by `config.position_encoding`, with `config.position_kwargs`."""
    return scheme_class(config.position_encoding)(config, **(config.position_kwargs or {}))
