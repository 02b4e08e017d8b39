"""Arguments dataclasses whose fields carry their CLI help and their valid values, checked when built.

`option()` declares a field (help, aliases, the HF field it sets, its range or choices); `CheckedArguments`
checks every field when the dataclass is built, so the CLI, `--config` files and Python callers get the
same refusal naming the option. Imports nothing heavy: `--help` reads it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from kolong.errors import ConfigError

REQUIRED = dataclasses.MISSING


def option(default: Any = REQUIRED, help: str = "", *flags: str, hf: str | None = None, **metadata):
    """A dataclass field with its CLI help, extra flags (aliases) and the HF `TrainingArguments` field it sets.

    Checked when the dataclass is built (`check_fields`): numbers must be positive unless the metadata says
    otherwise (`min=` inclusive bound or None for none, `max=`, `below=` exclusive upper bound), `choices=`
    lists the allowed strings, `check=` is a function that raises `ConfigError`."""
    metadata = {"help": help, "flags": flags, "hf": hf, **metadata}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def field_metadata(cls: type, name: str) -> dict:
    """A field's metadata; what a subclass left out (it only changed the default) comes from its bases."""
    merged: dict = {}
    for klass in reversed(cls.__mro__):
        spec = getattr(klass, "__dataclass_fields__", {}).get(name)
        if spec is not None:
            merged.update({key: value for key, value in spec.metadata.items() if value or key == "min"})
    return merged


_UNSET = object()


def _check_value(flag: str, value: Any, kind: type | None, metadata: dict) -> None:
    choices = metadata.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{flag}: {value!r} is not one of: {', '.join(map(str, choices))}")
    if kind not in (int, float):
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{flag}: expected a number, got {value!r}")
    if not math.isfinite(value):  # NaN passes every comparison below; inf is no setting either
        raise ConfigError(f"{flag}: expected a finite number, got {value!r}")
    if kind is int and not float(value).is_integer():
        raise ConfigError(f"{flag}: expected a whole number, got {value!r}")
    low = metadata.get("min", _UNSET)
    if low is _UNSET:  # the default range: positive
        if value <= 0:
            raise ConfigError(f"{flag} must be positive, got {value!r}")
    elif low is not None and value < low:
        raise ConfigError(f"{flag} must be at least {low}, got {value!r}")
    if metadata.get("max") is not None and value > metadata["max"]:
        raise ConfigError(f"{flag} must be at most {metadata['max']}, got {value!r}")
    if metadata.get("below") is not None and value >= metadata["below"]:
        raise ConfigError(f"{flag} must be below {metadata['below']}, got {value!r}")


def number_kind(annotation: Any) -> type | None:
    import types
    import typing

    if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # Optional[int]
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0] if len(args) == 1 else None
    return annotation if annotation in (int, float) else None


def check_fields(instance: Any) -> None:
    """Check every field of an arguments dataclass against its metadata (see `option`); a `ConfigError`
    names the option. Runs when the dataclass is built, so the CLI, --config files and Python all get it."""
    import typing

    cls = type(instance)
    hints = typing.get_type_hints(cls)
    for spec in dataclasses.fields(cls):
        value = getattr(instance, spec.name)
        if value is None or not spec.init:
            continue
        metadata = field_metadata(cls, spec.name)
        flag = f"--{spec.name}"
        hint = hints[spec.name]
        if typing.get_origin(hint) is list and isinstance(value, list):  # each item, as one value would be
            if not value and spec.default_factory is not dataclasses.MISSING and spec.default_factory():
                raise ConfigError(f"{flag}: expected at least one value (default: {spec.default_factory()})")
            for item in value:
                _check_value(flag, item, number_kind(typing.get_args(hint)[0]), metadata)
        else:
            _check_value(flag, value, number_kind(hint), metadata)
        if metadata.get("check"):
            metadata["check"](flag, value)


@dataclass(kw_only=True)
class CheckedArguments:
    """Base of every arguments dataclass: fields checked against their `option` metadata when built."""

    def __post_init__(self) -> None:
        check_fields(self)


def column_spec(flag: str, value: Any) -> None:
    """A corpus column: a number from 1 or a header name (`kolong.data.documents.column_field`)."""
    from kolong.data.documents import column_field
    from kolong.errors import CorpusError

    try:
        column_field(value)
    except CorpusError as error:
        raise ConfigError(f"{flag}: {error}") from None


def steps_or_all(flag: str, value: int) -> None:
    if value != -1 and value < 1:
        raise ConfigError(f"{flag} must be a positive number of steps, or -1 for all epochs; got {value}")


def attention_options(flag: str, value: Any) -> None:
    """`--attention-option NAME=VALUE` items (`kolong.attention.options.AttentionOptions`), checked when given."""
    from kolong.attention.options import AttentionOptions

    AttentionOptions.parse(value or [], flag)


def must_be_json_object(flag: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}: expected a JSON object such as '{{\"max_distance\": 16}}', got {value!r}")


def training_fields(flag: str, value: Any) -> None:
    """`--extra`: a JSON object of TrainingArguments fields, none of them a NaN or infinite number (JSON's NaN
    parses, and HF checks few of its numbers: an optimizer fails on a NaN beta, clipping ignores a NaN norm)."""
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}: expected a JSON object of TrainingArguments fields such as "
                          f"'{{\"max_grad_norm\": 0.5}}', got {value!r}")  # fmt: skip
    bad = next((name for name, v in value.items() if isinstance(v, float) and not math.isfinite(v)), None)
    if bad is not None:
        raise ConfigError(
            f"--{bad}: expected a finite number, got {value[bad]!r}"
        )  # set by its flag or in --extra


ON_BAD = ("error", "skip")
STRATEGIES = ("truncate", "sliding-window")


def check_eval_every(value: str | int) -> str:
    text = str(value)
    if text != "epoch" and not (text.isdigit() and int(text) > 0):
        raise ConfigError(f"--eval_every must be 'epoch' or a positive number of steps, got {value!r}")
    return text


def check_windows(max_length: int | None, doc_stride: int | None, strategy: str) -> None:
    if max_length is not None and max_length < 8:
        raise ConfigError(
            f"--max_length must be at least 8 tokens (question, context and specials), got {max_length}"
        )
    if max_length is not None and doc_stride is not None and strategy == "sliding-window":
        from kolong.data.qa_features import check_stride

        check_stride(max_length, doc_stride)


# transformers 5.23 renamed gradient checkpointing to activation checkpointing; the old names warn and go in v6.
RENAMED_FIELDS = (
    ("gradient_checkpointing", "activation_checkpointing"),
    ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"),
)


def under_known_names(fields: dict, known: set[str]) -> dict:
    """`fields` with each renamed TrainingArguments field under the name the installed transformers knows,
    so `--gradient-checkpointing` and `--activation-checkpointing` both work, without a deprecation
    warning, on every transformers kolong supports (the new name wins when both are given)."""
    fields = dict(fields)
    for old, new in RENAMED_FIELDS:
        if old in fields or new in fields:
            value = fields.pop(new, fields.get(old))
            fields.pop(old, None)
            fields[new if new in known else old] = value
    return fields
