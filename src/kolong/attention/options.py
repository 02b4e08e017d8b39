"""Choices about attention that belong to a machine or a measurement, never to a model (whose own choices are
config fields): given at run time (`model.set_attention_options(...)`, `--attention-option NAME=VALUE`) and never
written into a checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class AttentionOptions:
    flex_dropout: bool = field(default=True, metadata={"help": (
        "attention dropout on CUDA inside FlexAttention, in two passes; false: the chunked exact path")})  # fmt: skip
    skip_paths: tuple[str, ...] = field(default=(), metadata={"help": (
        "paths the plan table passes over (joined by +, e.g. sdpa-regions+banded): to time a path against the one "
        "that runs without it, or to avoid one that fails")})  # fmt: skip
    compiled_kernels: bool = field(default=True, metadata={"help": (
        "the compiled FlexAttention path on CUDA; false: the chunked exact path from the start (a failure also "
        "falls back by itself, with a warning)")})  # fmt: skip
    regions_strips: int = field(default=4, metadata={"help": (
        "CPU: `sdpa-regions` from rows of this many near strips of regions_block_rows + 2r - 2 keys; below, the "
        "chunked path is as fast")})  # fmt: skip
    regions_block_rows: int = field(default=128, metadata={"help": (
        "CPU: query rows per block of `sdpa-regions` (shorter: more keys for the fused kernel; taller: fewer "
        "calls)")})  # fmt: skip
    documents_max_share: float = field(default=0.75, metadata={"help": (
        "CPU: packed documents through blocks over their spans where these read at most this share of the "
        "pairs; above, one dense call is as fast")})  # fmt: skip
    documents_by_row: float = field(default=0.85, metadata={"help": (
        "CPU: the paths over documents' spans go row by row where the rows' own spans read at most this share "
        "of the batch's")})  # fmt: skip
    document_block_rows: int = field(default=256, metadata={"help": (
        "CPU: query rows per SDPA call over packed documents' spans (shorter: fewer needless keys; taller: fewer "
        "calls)")})  # fmt: skip
    chunk_scores: int = field(default=2**21, metadata={"help": (
        "scores (b x h x rows x keys) the chunked path holds per block: its memory, and what stays in cache")})  # fmt: skip
    chunk_document_rows: int = field(default=128, metadata={"help": (
        "the chunked path's most query rows per block under packed documents (taller: more needless keys)")})  # fmt: skip
    mask_entries: int = field(default=2**22, metadata={"help": (
        "`banded` with a bias: entries of its float mask per SDPA call (bounds that mask's memory)")})  # fmt: skip
    banded_min_rows: int = field(default=128, metadata={"help": (
        "`banded`: the fewest query rows per key band (below, SDPA's per-call overhead outweighs the saving)")})  # fmt: skip
    flex_devices: tuple[str, ...] = field(default=("cuda",), metadata={"help": (
        "devices (joined by +) where FlexAttention trains, its kernels tried forward and backward on each new "
        "shape")})  # fmt: skip
    flex_compile: bool = field(default=True, metadata={"help": (
        "compile FlexAttention's kernels; false: its eager reference (to debug a score_mod)")})  # fmt: skip
    flex_kernel_options: dict | None = field(default=None, metadata={"help": (
        "FlexAttention kernel options (JSON, e.g. {\"BLOCK_M\": 64}) where a kernel trains a float32 tensor its "
        "score_mod reads; default: two forward stages, one backward")})  # fmt: skip

    @classmethod
    def parse(cls, items: Iterable[str], flag: str = "--attention-option") -> AttentionOptions:
        """`NAME=VALUE` items; a bad one is refused naming the flag, the name and what it takes."""
        from kolong.errors import ConfigError

        known = {spec.name: spec.type for spec in dataclasses.fields(cls)}
        values: dict = {}
        for item in items:
            name, sep, text = str(item).partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in known:
                raise ConfigError(f"{flag} {item!r}: expected NAME=VALUE with NAME one of {', '.join(known)}")
            try:
                values[name] = _value(name, known[name], text)
            except ValueError as error:
                raise ConfigError(f"{flag} {name}: {error}, got {text!r}") from None
        return cls(**values)

    def skips(self, path: str) -> bool:
        return path in self.skip_paths

    def changed(self) -> dict:
        """The options that differ from the defaults (what a result records)."""
        default = type(self)()
        return {spec.name: getattr(self, spec.name) for spec in dataclasses.fields(self)
                if getattr(self, spec.name) != getattr(default, spec.name)}  # fmt: skip


# The plans `skip_paths` may name: all but the chunked path, which takes every call, and the reference.
SKIPPABLE = ("sdpa", "flex", "sdpa-regions", "sdpa-document-blocks", "sdpa-distance-view", "banded")


def _value(name: str, kind: str, text: str):
    """An option's value from its text; a ValueError says what the option takes."""
    if name == "flex_kernel_options":
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            raise ValueError(
                "expected a JSON object of FlexAttention kernel options, e.g. '{\"BLOCK_M\": 64}'"
            )
        return value
    if kind.startswith("tuple"):  # names joined by +
        parts = tuple(part.strip() for part in text.split("+") if part.strip())
        wrong = [part for part in parts if name == "skip_paths" and part not in SKIPPABLE]
        if wrong:
            raise ValueError(
                f"{wrong[0]!r} is not a path the plan may pass over; choose from {', '.join(SKIPPABLE)}"
            )
        if not parts and name == "flex_devices":
            raise ValueError("expected device types joined by +, e.g. cuda+xpu")
        return parts
    if kind in ("int", "float"):
        try:
            value = (int if kind == "int" else float)(text)
        except ValueError:
            raise ValueError(f"expected a number ({kind})") from None
        if value <= 0:
            raise ValueError("expected a positive number")
        return value
    lowered = text.strip().lower()
    if lowered not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError("expected true or false")
    return lowered in ("true", "1", "yes")


# One instance for every layer given none: layers compiled one by one guard on it and must share a graph.
DEFAULT = AttentionOptions()
