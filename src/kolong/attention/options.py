"""Choices about attention that belong to a machine or a measurement, never to a model.

A model's own choices are config fields (`attn_implementation`, the attention pattern, dropout) and are saved
with it. These are not: a workaround for a torch release, kernel tiles for a GPU other than those kolong was
measured on, or a second path timed beside the default. They are given at run time
(`model.set_attention_options(...)`, `--attention-option NAME=VALUE` on the commands that train or benchmark)
and never written into a checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class AttentionOptions:
    flex_dropout: bool = field(default=True, metadata={"help": (
        "attention dropout on CUDA inside FlexAttention, in two passes; false: the chunked exact path (a way "
        "around a torch release whose FlexAttention cannot compile it)")})  # fmt: skip
    skip_paths: tuple[str, ...] = field(default=(), metadata={"help": (
        "attention paths the plan table passes over (names from `kolong attention plans`, joined by +, e.g. "
        "sdpa-regions+banded), each call then taking the next row that holds: to time a path against the "
        "one that runs without it, or to avoid one on a machine where it fails; never chunked or eager")})  # fmt: skip
    compiled_kernels: bool = field(default=True, metadata={"help": (
        "the compiled FlexAttention paths on CUDA; false: the chunked exact path from the start (where a GPU or a "
        "torch release cannot compile them; a failure also falls back by itself, with a warning)")})  # fmt: skip
    regions_strips: int = field(default=4, metadata={"help": (
        "CPU: Shaw's regions (`sdpa-regions`) from rows that hold this many near strips of regions_block_rows "
        "+ 2r - 2 keys; below, the chunked path is as fast")})  # fmt: skip
    regions_block_rows: int = field(default=128, metadata={"help": (
        "CPU: query rows per block of `sdpa-regions`; shorter blocks give the fused kernel more of the keys, "
        "taller ones fewer, larger calls")})  # fmt: skip
    documents_max_share: float = field(default=0.75, metadata={"help": (
        "CPU: packed documents through blocks over their spans (`sdpa-blocks`, or the chunked path with "
        "dropout) where the blocks read at most this share of the (n, n) pairs; above, one dense call is as fast")})  # fmt: skip
    documents_by_row: float = field(default=0.85, metadata={"help": (
        "CPU: the paths over documents' spans go one row of the batch at a time where the rows' own spans read at "
        "most this share of the pairs the batch's widest spans read")})  # fmt: skip
    document_block_rows: int = field(default=256, metadata={"help": (
        "CPU: query rows per SDPA call over packed documents' spans; a block's span is about its rows plus the "
        "documents it cuts, so shorter blocks read fewer needless keys and taller ones make fewer calls")})  # fmt: skip
    chunk_scores: int = field(default=2**21, metadata={"help": (
        "scores (b x h x rows x keys) the chunked path holds per block: small enough to stay in cache and keep "
        "the backward's temporaries, which set its memory, small")})  # fmt: skip
    chunk_document_rows: int = field(default=128, metadata={"help": (
        "the chunked path's most query rows per block under packed documents: taller blocks read more needless "
        "keys of the documents they cut")})  # fmt: skip
    mask_entries: int = field(default=2**22, metadata={"help": (
        "`banded` with a bias: entries of its float mask per SDPA call, which bound the memory "
        "of the mask built for each call")})  # fmt: skip
    banded_min_rows: int = field(default=128, metadata={"help": (
        "`banded`: the fewest query rows per key band; below, SDPA's per-call overhead outweighs the band's "
        "wasted scores")})  # fmt: skip
    flex_devices: tuple[str, ...] = field(default=("cuda",), metadata={"help": (
        "devices (joined by +) where FlexAttention compiles with a backward and may train, its compiled kernels "
        "tried forward and backward on each new shape; cpu runs FlexAttention's eager reference there")})  # fmt: skip
    flex_compile: bool = field(default=True, metadata={"help": (
        "compile FlexAttention's kernels; false: its eager reference, which materialises the scores (to debug a "
        "score_mod)")})  # fmt: skip
    flex_kernel_options: dict | None = field(default=None, metadata={"help": (
        "FlexAttention kernel options (a JSON object, e.g. {\"fwd_num_stages\": 2, \"BLOCK_M\": 64}) for kernels "
        "that train a float32 tensor their score_mod reads; default: two forward stages and one backward")})  # fmt: skip

    @classmethod
    def parse(cls, items: Iterable[str], flag: str = "--attention-option") -> AttentionOptions:
        """`NAME=VALUE` items (booleans true / false, the kernel options a JSON object); a bad one is refused
        naming the flag, the name and what it takes."""
        from kolong.errors import ConfigError

        known = {spec.name: spec for spec in dataclasses.fields(cls)}
        values: dict = {}
        for item in items:
            name, sep, text = str(item).partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in known:
                choices = ", ".join(known)
                raise ConfigError(f"{flag} {item!r}: expected NAME=VALUE with NAME one of {choices}")
            if name == "flex_kernel_options":
                try:
                    value = json.loads(text)
                except json.JSONDecodeError:
                    value = None
                if not isinstance(value, dict):
                    raise ConfigError(f"{flag} {name}: expected a JSON object of FlexAttention kernel options, "
                                      f"e.g. '{{\"fwd_num_stages\": 2, \"BLOCK_M\": 64}}', got {text!r}")  # fmt: skip
            elif name == "skip_paths":
                value = _paths(text, flag)
            elif name == "flex_devices":
                value = _joined(text)
                if not value:
                    raise ConfigError(
                        f"{flag} flex_devices: expected device types joined by +, e.g. cuda+xpu"
                    )
            elif known[name].type in ("int", "float", int, float):
                number = int if known[name].type in ("int", int) else float
                try:
                    value = number(text)
                except ValueError:
                    raise ConfigError(
                        f"{flag} {name}: expected a number ({number.__name__}), got {text!r}"
                    ) from None
                if value <= 0:
                    raise ConfigError(f"{flag} {name}: expected a positive number, got {text!r}")
            else:
                lowered = text.strip().lower()
                if lowered not in ("true", "false", "1", "0", "yes", "no"):
                    raise ConfigError(f"{flag} {name}: expected true or false, got {text!r}")
                value = lowered in ("true", "1", "yes")
            values[name] = value
        return cls(**values)

    def skips(self, path: str) -> bool:
        return path in self.skip_paths

    def changed(self) -> dict:
        """The options that differ from the defaults (what a result records)."""
        default = type(self)()
        return {spec.name: getattr(self, spec.name) for spec in dataclasses.fields(self)
                if getattr(self, spec.name) != getattr(default, spec.name)}  # fmt: skip


# The plans `skip_paths` may name: every entry of `dispatch.ATTENTION_FUNCTIONS` but the chunked path, which takes
# every call, and the reference.
SKIPPABLE = ("sdpa", "flex", "sdpa-regions", "sdpa-document-blocks", "sdpa-distance-view", "banded")


def _joined(text: str) -> tuple[str, ...]:
    """`a+b` -> ("a", "b"): the form of the options that name several things."""
    return tuple(part.strip() for part in text.split("+") if part.strip())


def _paths(text: str, flag: str) -> tuple[str, ...]:
    from kolong.errors import ConfigError

    paths = _joined(text)
    skippable = SKIPPABLE
    for path in paths:
        if path not in skippable:
            raise ConfigError(f"{flag} skip_paths: {path!r} is not a path the plan may pass over; choose from "
                              f"{', '.join(skippable)} (joined by +)")  # fmt: skip
    return paths


# One instance for every layer that was given none: a compiled layer guards on the object its options are, and
# layers compiled one by one (`--compile regions`) must share a graph.
DEFAULT = AttentionOptions()
