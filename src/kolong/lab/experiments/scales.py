"""The settings of an experiment's scale with `--set NAME=VALUE` overrides, checked before anything runs."""

from __future__ import annotations

import math

KINDS = {int: "a whole number", float: "a finite number", str: "text", bool: "true or false", list: "a list"}


def scale_settings(scales: dict[str, dict], scale: str, overrides: dict, what: str = "setting") -> dict:
    """`scales[scale]` updated with `overrides`; an unknown scale or name, or a value of another type than
    the scales give that setting (a whole number where one is expected, null only where a scale has it), is
    refused naming it."""
    if scale not in scales:
        raise ValueError(f"scale {scale!r} is not one of {', '.join(scales)}")
    defaults = scales[scale]
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(f"unknown {what} {unknown[0]!r}; settings: {', '.join(defaults)}")
    for name, value in overrides.items():
        seen = [settings[name] for settings in scales.values() if name in settings]
        types = {type(v) for v in seen if v is not None}
        if value is None and None in seen:
            continue
        if any(_fits(value, kind) for kind in types):
            continue
        expected = " or ".join(sorted({KINDS.get(kind, kind.__name__) for kind in types}))
        expected += " (or null)" if None in seen else ""
        raise ValueError(f"--set {name}={value!r}: expected {expected}")
    return {**defaults, **overrides}


def _fits(value, kind: type) -> bool:
    if isinstance(value, bool) or kind is bool:  # JSON's true is no whole number, and 1 is no flag
        return isinstance(value, bool) and kind is bool
    if kind is float:  # JSON's NaN and Infinity parse as floats: no setting takes them
        return isinstance(value, int | float) and math.isfinite(value)
    return isinstance(value, kind)
