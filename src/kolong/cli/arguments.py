"""Typer commands generated from argument dataclasses, so a recipe's options are written once.

`command_from(Arguments)` turns a function `run(args: Arguments)` into a typer command with one option per
dataclass field (`--name_with_underscores`, `--name-with-dashes` and the field's aliases), one per HF
`TrainingArguments` field that no kolong field covers (from the static table `kolong.training.hf_fields`,
so `--help` never imports transformers), and `--config FILE.{json,yaml}` holding any of them. Values
given on the command line win over the file; HF fields land in `args.extra` under their HF names.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import json
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from kolong.cli.common import user_errors
from kolong.errors import ConfigError
from kolong.training.hf_fields import FIELDS
from kolong.training.options import field_metadata as _metadata

HF_PREFIX = "hf__"  # python names of the generated HF options, never clashing with kolong's fields
_PYTHON_TYPES = {"bool": bool, "int": int, "float": float, "str": str, "list": str, "ints": str, "json": str}


def _flags(name: str, extra: tuple[str, ...] = ()) -> list[str]:
    flags = [f"--{name}"]
    if "_" in name:
        flags.append(f"--{name.replace('_', '-')}")
    return flags + [flag for flag in extra if flag not in flags]


def _own_first(cls: type, specs: list) -> list:
    """Required fields, then the recipe's own, then those it shares with every recipe (the base class)."""
    base = set(getattr(cls.__mro__[1], "__dataclass_fields__", {}))
    required = [s for s in specs if s.default is s.default_factory is dataclasses.MISSING]
    return (
        required
        + [s for s in specs if s.name not in base and s not in required]
        + [s for s in specs if s.name in base and s not in required]
    )


def _kind(annotation) -> str:
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    args = [a for a in typing.get_args(annotation) if a is not type(None)] if union else [annotation]
    origin = typing.get_origin(args[0]) or args[0]
    if origin is dict:
        return "json"
    if origin is list:
        return "many"
    return {bool: "bool", int: "int", float: "float"}.get(args[0], "str")


@dataclasses.dataclass
class _Option:
    """One generated option: where its value goes and how to read it."""

    python_name: str
    field: str  # the dataclass field, or the HF field for HF options
    kind: str
    required: bool
    hf: bool
    flags: list[str]
    choices: tuple = ()

    def parameter(self, default: Any, help: str) -> inspect.Parameter:
        if self.kind in ("list", "ints") and isinstance(default, list):  # shown as typed: comma-separated
            help = f"{help}  [default: {','.join(str(item) for item in default)}]"
        if default is dataclasses.MISSING or isinstance(default, (dict, list)):
            default = None
        if self.kind == "bool" and self.field in FLAGS_ONLY:
            declarations, annotation = self.flags, bool
            default = bool(default)
        elif self.kind == "bool":
            declarations = [f"{self.flags[0]}/--no-{self.flags[0][2:]}", *self.flags[1:]]
            annotation = bool | None
        elif self.kind in ("many", "pairs"):
            declarations, annotation = self.flags, list[str] | None
        else:
            declarations, annotation = self.flags, _PYTHON_TYPES.get(self.kind, str) | None
        info = typer.Option(
            None if self.required or self.kind == "many" else default, *declarations, help=help
        )
        return inspect.Parameter(
            self.python_name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation
        )


# Booleans that are plain flags, spelled as on every hand-written command (`--overwrite`, never `--no-overwrite`)
FLAGS_ONLY = ("overwrite",)


def _options(cls: type, hf_fields: bool) -> list[_Option]:
    hints = typing.get_type_hints(cls)
    options, covered, taken = [], set(), set()
    for spec in _own_first(cls, list(dataclasses.fields(cls))):
        metadata = _metadata(cls, spec.name)
        if not spec.init or metadata.get("cli") is False:
            continue
        kind = metadata.get("kind") or _kind(hints[spec.name])
        hf_spelling = (f"--{metadata['hf']}",) if metadata.get("hf") not in (None, spec.name) else ()
        flags = _flags(spec.name, (*metadata.get("flags", ()), *hf_spelling))
        required = spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
        choices = tuple(metadata.get("choices") or ())
        options.append(_Option(spec.name, spec.name, kind, required, False, flags, choices))
        covered |= {spec.name, metadata.get("hf") or spec.name, *(f.lstrip("-") for f in flags)}
        taken |= set(flags)
    if hf_fields:
        for name, kind, _default, _help in FIELDS:
            if name in covered or kind == "object":
                continue
            flags = [flag for flag in _flags(name) if flag not in taken]
            options.append(_Option(HF_PREFIX + name, name, kind, False, True, flags))
    return options


TRUE_WORDS, FALSE_WORDS = ("true", "yes", "y", "1", "on"), ("false", "no", "n", "0", "off")


def _truth(value: Any) -> bool | None:
    """True or False for a bool or a word HF's command line reads as one (`True`, `false`, `1`), else None."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    return True if word in TRUE_WORDS else False if word in FALSE_WORDS else None


def _parse(option: _Option, value: Any, source: str) -> Any:
    """A command-line or config-file value as the dataclass (or TrainingArguments) wants it, converted by the
    field's declared type: YAML reads `3e-5` as text, and HF's command line takes `True` / `False`."""
    where = f" ({source})" if source else ""
    if {"yes", "no"} <= set(option.choices) and _truth(value) is not None and value not in option.choices:
        return "yes" if _truth(value) else "no"  # an auto | yes | no option given a boolean
    if option.kind == "bool" and value is not None and not isinstance(value, bool):
        if _truth(value) is None:
            raise ConfigError(f"{option.flags[0]}: expected true or false, got {value!r}{where}")
        return _truth(value)
    if option.kind in ("int", "float") and isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ConfigError(f"{option.flags[0]}: expected a number, got {value!r}{where}") from None
        return int(number) if option.kind == "int" and number.is_integer() else number
    if value is None or not isinstance(value, (str, list, tuple)):
        return value
    if option.kind in ("many", "pairs") and isinstance(value, str):
        value = [value]
    if option.kind == "pairs":
        return parse_pairs(" / ".join(option.flags), value, source)
    if option.kind == "json" and isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as error:
            if not option.hf:  # HF's dict-or-str fields also take a path (deepspeed, fsdp_config)
                raise ConfigError(f"{option.flags[0]}: not valid JSON ({error}) ({source})") from None
            return value
    if option.kind in ("list", "ints") and isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if option.kind == "ints":
        try:
            return [int(item) for item in value]
        except ValueError:
            raise ConfigError(
                f"{option.flags[0]}: expected integers separated by commas, got {value!r}"
            ) from None
    if option.kind == "list":
        return value
    if option.kind == "many":
        return [str(item) for item in value]
    return value


def parse_pairs(flag: str, items: list[str] | None, source: str = "") -> dict:
    """`--set key=value` (repeated) as a dict, each value read as JSON when it can be."""
    pairs = {}
    for item in items or []:
        if "=" not in item or not item.split("=", 1)[0].strip():
            where = f" ({source})" if source else ""
            raise ConfigError(f"{flag}: expected key=value, got {item!r}{where}")
        key, text = item.split("=", 1)
        try:
            pairs[key.strip()] = json.loads(text)
        except json.JSONDecodeError:
            pairs[key.strip()] = text
    return pairs


def read_config_file(path: str) -> dict:
    """--config FILE: a JSON or YAML mapping of option names to values."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"--config {file}: no such file")
    if file.suffix not in (".json", ".yaml", ".yml"):
        raise ConfigError(f"--config {file}: expected a .json, .yaml or .yml file")
    from kolong.data.sources import utf8_text
    from kolong.errors import DataError

    try:
        text = utf8_text(file)
    except DataError as error:
        raise ConfigError(f"--config {error}") from None
    if file.suffix in (".yaml", ".yml"):
        import yaml

        try:
            payload = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigError(f"--config {file}: not valid YAML ({error})") from None
    else:
        try:
            payload = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"--config {file}: not valid JSON ({error})") from None
    if not isinstance(payload, dict):
        raise ConfigError(f"--config {file}: expected a mapping of option names to values")
    return payload


def build_arguments(
    cls: type, options: list[_Option], values: dict, given: set[str], config: dict, source: str
):
    """The dataclass instance: command-line values, then the config file's for options not given."""
    by_flag = {flag.lstrip("-").replace("-", "_"): option for option in options for flag in option.flags}
    for key, value in config.items():
        option = by_flag.get(str(key).lstrip("-").replace("-", "_"))
        if option is None:
            raise ConfigError(f"--config {source}: {key!r} is not an option of this command")
        if option.python_name not in given:
            values[option.python_name] = value
    fields, extra = {}, {}
    for option in options:
        value = _parse(option, values.get(option.python_name), source)
        if option.hf:
            if value is not None:
                extra[option.field] = value
        elif value is not None:
            fields[option.field] = value
        elif option.required:
            raise ConfigError(f"{option.flags[0]} is required (on the command line or in --config)")
    if extra:
        fields["extra"] = {**fields.get("extra", {}), **extra}
    try:
        return cls(**fields)
    except TypeError as error:
        raise ConfigError(str(error)) from None
    except ValueError as error:  # a dataclass's own check that is not yet a ConfigError
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(str(error)) from None


class GeneratedCommand:
    """A typer command function whose signature is built from `cls` when typer reads it (each CLI start),
    so choices read from registries (position schemes) include late registrations."""

    def __init__(self, run: Callable, cls: type, hf_fields: bool):
        functools.update_wrapper(self, run, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
        del self.__wrapped__  # typer must read the generated signature, not `run`'s
        self.run, self.cls, self.hf_fields = run, cls, hf_fields

    def __call__(self, ctx: typer.Context, config: str | None = None, **values):
        # typer may vendor its own click: compare the source by name, not by enum identity
        given = {
            name for name in values if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"
        }
        with user_errors():
            settings = read_config_file(config) if config else {}
            args = build_arguments(
                self.cls, _options(self.cls, self.hf_fields), values, given, settings, config or ""
            )
            return self.run(args)

    @property
    def __signature__(self) -> inspect.Signature:
        from kolong.positions.registry import scheme_names

        key = tuple(scheme_names())  # the only input that can change between reads
        if getattr(self, "_signature_key", None) != key:
            self._signature, self._signature_key = self._build_signature(), key
        return self._signature

    def _build_signature(self) -> inspect.Signature:
        parameters = [
            inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
            inspect.Parameter(
                "config",
                inspect.Parameter.KEYWORD_ONLY,
                default=typer.Option(None, "--config", help="JSON or YAML file of any options below."),
                annotation=str | None,
            ),
        ]
        defaults = {
            spec.name: spec.default_factory()
            if spec.default_factory is not dataclasses.MISSING
            else spec.default
            for spec in dataclasses.fields(self.cls)
        }
        rows = {row[0]: row for row in FIELDS}
        for option in _options(self.cls, self.hf_fields):
            if option.hf:
                row = rows[option.field]
                parameters.append(option.parameter(None, f"{HF_MARK}{row[3]} (HF default: {row[2]!r})"))
            else:
                help = _metadata(self.cls, option.field).get("help", "")
                if option.kind == "scheme":
                    from kolong.positions.registry import scheme_names

                    help = f"{help} One of: {', '.join(scheme_names())}."
                parameters.append(option.parameter(defaults.get(option.field), help))
        return inspect.Signature(parameters)

    @property
    def __annotations__(self) -> dict:
        return {p.name: p.annotation for p in self.__signature__.parameters.values()}


def bare_yes(app: typer.Typer, argv: list[str]) -> list[str]:
    """`argv` read as HF's command line reads it: `yes` after each bare auto|yes|no option (`--bf16`,
    `--compile`) at the end or before another option, where click would take the next option as its value or
    ask for one; and a boolean option followed by a word HF reads as a boolean (`--gradient_checkpointing
    True`, `--quiet false`) as the flag or its `--no-` form. Found from the typer apps' registries and the
    command's dataclass (no click tree is built, nothing is imported)."""
    command = _leaf_command(app, argv)
    if not isinstance(command, GeneratedCommand):
        return argv
    options = _options(command.cls, hf_fields=command.hf_fields)
    bare = {flag for option in options if "yes" in option.choices for flag in option.flags}
    booleans = {flag: option.flags[0] for option in options if option.kind == "bool" for flag in option.flags}
    normalised, skip = [], False
    for index, token in enumerate(argv):
        if skip:
            skip = False
            continue
        following = argv[index + 1] if index + 1 < len(argv) else None
        if token in booleans and following is not None and _truth(following) is not None:
            if _truth(following):
                normalised.append(token)
            elif booleans[token][2:] not in FLAGS_ONLY:  # `--overwrite false`: the flag's absence
                normalised.append(f"--no-{booleans[token][2:]}")
            skip = True
            continue
        normalised.append(token)
        if token in bare and (following is None or following.startswith("-")):
            normalised.append("yes")
    return normalised


def only_the_named_command(app: typer.Typer, argv: list[str]) -> typer.Typer:
    """`app` with only the groups and command that `argv` names, down to the first token it does not name.

    typer builds the click command of every kolong command at each start (a noticeable share of start-up,
    `kolong bench startup`) where one is run. A level whose next token is an option or unknown keeps all its commands, so help, usage
    errors and "No such command" read as with the whole app."""
    tokens = [token for token in argv if not token.startswith("-")]
    if not tokens:
        return app
    token, rest = tokens[0], argv[argv.index(tokens[0]) + 1 :]
    command = [info for info in app.registered_commands if _command_name(info) == token]
    group = [info for info in app.registered_groups if info.name == token]
    if not command and not group:
        return app
    pruned = copy.copy(app)
    pruned.registered_commands = command
    pruned.registered_groups = []
    if group:
        info = copy.copy(group[0])
        info.typer_instance = only_the_named_command(info.typer_instance, rest)
        pruned.registered_groups = [info]
    return pruned


def _command_name(info) -> str:
    """A registered command's name on the command line (typer's rule: the function's, with dashes)."""
    return info.name or info.callback.__name__.replace("_", "-")


def _leaf_command(app: typer.Typer, argv: list[str]):
    """The callback of the (sub)command `argv` names, or None."""
    current = app
    for token in (token for token in argv if not token.startswith("-")):
        commands = {_command_name(info): info.callback for info in current.registered_commands}
        groups = {info.name: info.typer_instance for info in current.registered_groups}
        if token in commands:
            return commands[token]
        if token not in groups:
            return None
        current = groups[token]
    return None


HF_MARK = "[HF] "  # the start of the help of an option generated from a TrainingArguments field


class SectionedHelp(TyperCommand):
    """--help of a training command in two sections: kolong's options (the recipe's own first), then the
    Hugging Face `TrainingArguments` fields it also takes. In one list, a recipe's dozen options were lost
    among HF's hundred."""

    def format_options(self, ctx, formatter) -> None:
        own, hf = [], []
        for parameter in self.get_params(ctx):
            record = parameter.get_help_record(ctx)
            if record is not None:
                (hf if record[1].startswith(HF_MARK) else own).append(record)
        with formatter.section("Options"):
            formatter.write_dl(own)
        if hf:
            title = "Hugging Face TrainingArguments (on the command line or in --config, as HF's scripts take them)"
            with formatter.section(title):
                formatter.write_dl([(names, text.removeprefix(HF_MARK)) for names, text in hf])


def command_from(cls: type, hf_fields: bool = True) -> Callable[[Callable], GeneratedCommand]:
    """Decorate `run(args: cls)` into a typer command whose options are `cls`'s fields (and HF's)."""
    return lambda run: GeneratedCommand(run, cls, hf_fields)
