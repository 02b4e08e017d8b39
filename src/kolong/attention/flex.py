"""FlexAttention for the encoder: one compiled function per scheme, its score_mod built inside it.

A scheme's flex function (e.g. `kolong.positions.shaw.shaw_flex`) takes q, k, v, the block mask, the scale,
`dropout` (None or `dropout_for`'s (keys, p)), the kernel options and the scheme's tensors, defines its
`score_mod` inside and calls `attend`. Built inside the compiled function: a new closure from outside at every
call makes dynamo recompile to its limit and then silently run an unfused path that materialises (b, h, n, n)
scores. Shapes are static (`dynamic=False`): under dynamic shapes an int read in a score_mod (Shaw's
max_distance, T5's bucket bounds) becomes a symbol inductor cannot lower. Memory is linear in n; blocks the mask
empties are skipped. No backward on CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import flex_attention

from kolong.attention import flex_dropout
from kolong.attention.terms import labelled

# Input shapes one compiled flex function serves: past dynamo's default (8) it would run unfused, and
# whole-article QA meets dozens of lengths.
RECOMPILE_LIMIT = 64
_compiled: dict[Callable, Callable] = {}
# Inductor's CPU FlexAttention kernel (torch 2.13-2.15, AVX2) returns wrong values or NaN for the last (batch,
# head) pair with heads of 16 or less at lengths not a multiple of 16: smaller heads are zero-padded to this.
CPU_MIN_HEAD_DIM = 32


def trained_reads_in_float32(args: tuple) -> tuple:
    """`args` with every trained tensor in float32: FlexAttention's backward adds up to n gradients into one entry
    in the tensor's own dtype, and in bf16 most would round away."""
    return tuple(arg.float() if isinstance(arg, torch.Tensor) and arg.requires_grad else arg for arg in args)


def flex_call(function: Callable, q, k, v, *args, compiled: bool = True):
    """`function(q, k, v, *args)`, compiled on first use; uncompiled (the option `flex_compile`) where not."""
    if not compiled:
        return function(q, k, v, *args)
    kernel = _compiled.get(function)
    if kernel is None:
        kernel = _compiled[function] = torch.compile(function, dynamic=False)
    head_dim = q.shape[-1]
    if q.device.type == "cpu" and head_dim < CPU_MIN_HEAD_DIM:
        # zero columns leave every score (the scale is explicit) and the output's first columns as they are
        q, k, v = (torch.nn.functional.pad(t, (0, CPU_MIN_HEAD_DIM - head_dim)) for t in (q, k, v))
    if torch.compiler.is_compiling():  # inside a compiled model: its compile decides
        return _first_columns(kernel(q, k, v, *args), head_dim)
    with labelled("flex attention"), torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
        return _first_columns(kernel(q, k, v, *args), head_dim)


def _first_columns(result, head_dim: int):
    """The output's first `head_dim` columns (the rest are the CPU's zero padding)."""
    if isinstance(result, tuple):
        return (result[0][..., :head_dim], *result[1:])
    return result[..., :head_dim]


def dropout_for(q: torch.Tensor, dropout_p: float) -> tuple[torch.Tensor, float] | None:
    """The `dropout` argument of a flex function: None without dropout, else fresh (b, h) hash keys and p."""
    if dropout_p <= 0:
        return None
    return flex_dropout.draw_keys(q.shape[0], q.shape[1], q.device), float(dropout_p)


# Inductor's default forward tiles for 16-bit heads of 64 on sm90 (Hopper) need more shared memory than a block
# may use when the score_mod gathers from a trained float32 tensor (torch 2.11): two forward stages fit, and one
# backward stage (docs/encoder.md). The option `flex_kernel_options` replaces them.
DEFAULT_TRAINED_READ_OPTIONS = {"fwd_num_stages": 2, "bwd_num_stages": 1}


def kernel_options(q: torch.Tensor, *reads: torch.Tensor, chosen: dict | None = None) -> dict | None:
    """`chosen`, else DEFAULT_TRAINED_READ_OPTIONS, where a 16-bit CUDA kernel trains a float32 tensor it reads;
    else None (Inductor's)."""
    reads = tuple(t for t in reads if isinstance(t, torch.Tensor))
    trained = torch.is_grad_enabled() and any(t.requires_grad and t.dtype == torch.float32 for t in reads)
    if trained and q.device.type == "cuda" and q.dtype in (torch.bfloat16, torch.float16):
        return dict(chosen if chosen is not None else DEFAULT_TRAINED_READ_OPTIONS)
    return None


def attend(q, k, v, score_mod, block_mask, scale, dropout, options: dict | None = None):
    """`flex_attention` with `score_mod` (or None) and, given a (keys, p) pair, attention dropout."""
    if dropout is None:
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale,
                              kernel_options=options)  # fmt: skip
    return flex_dropout.attend(q, k, v, score_mod, block_mask, scale, *dropout, options=options)


def plain_flex(q, k, v, block_mask, scale, dropout, options):
    """No position term: only the mask."""
    return attend(q, k, v, None, block_mask, scale, dropout, options)


def check_flex(q: torch.Tensor) -> None:
    """FlexAttention's limits, as errors that say what to do instead."""
    if q.device.type == "cpu" and torch.is_grad_enabled() and q.requires_grad:
        raise ValueError(
            "attn_implementation='flex_attention' has no backward on CPU: train on CPU with "
            "attn_implementation='sdpa' (kolong's default), or run this forward under torch.no_grad()"
        )
