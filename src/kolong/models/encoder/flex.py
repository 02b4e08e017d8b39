"""FlexAttention for the encoder: one compiled function per scheme, score_mods built inside it.

A scheme's flex function (module level, e.g. `kolong.positions.shaw.shaw_flex`) takes q, k, v, the
block mask, the scale and the scheme's tensors, defines its `score_mod` inside and calls
`flex_attention`. `flex_call` compiles each such function once. Building the score_mod inside the
compiled function matters: a new closure passed in from outside at every call makes dynamo
recompile until its limit (8) and then fall back, silently, to an unfused path that materialises
(b, h, n, n) scores. Block masks are built outside per forward; their mask_mods capture tensors,
which dynamo lifts to inputs without recompiling. Shapes are static (`dynamic=False`, as PyTorch advises
for FlexAttention): a new length or scheme setting recompiles, because under dynamic shapes a changed int
read inside a score_mod (Shaw's max_distance, T5's bucket bounds) becomes a symbol that inductor cannot
lower (seen on an H200 with torch 2.11, and on CPU). Inside a compiled model the model's compile decides.

FlexAttention has a forward but no backward on CPU, and no attention dropout anywhere.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import flex_attention

# Tests turn compilation off to run the same score_mods through eager flex_attention on CPU.
COMPILE = True
_compiled: dict[Callable, Callable] = {}


def flex_call(function: Callable, *args):
    """`function(*args)`, compiled on first use (one compiled function per scheme)."""
    if not COMPILE:
        return function(*args)
    compiled = _compiled.get(function)
    if compiled is None:
        compiled = _compiled[function] = torch.compile(function, dynamic=False)
    return compiled(*args)


def plain_flex(q, k, v, block_mask, scale):
    """No position term: only the mask (packed documents, local + global patterns)."""
    return flex_attention(q, k, v, block_mask=block_mask, scale=scale)


def check_flex(q: torch.Tensor, dropout_p: float) -> None:
    """FlexAttention's limits, as errors that say what to do instead."""
    if dropout_p > 0:
        raise ValueError(
            "attn_implementation='flex_attention' has no attention dropout: use it for inference (model.eval()), "
            "set attention_probs_dropout_prob=0, or use attn_implementation='sdpa' (kolong's default)"
        )
    if q.device.type == "cpu" and torch.is_grad_enabled() and q.requires_grad:
        raise ValueError(
            "attn_implementation='flex_attention' has no backward on CPU: train on CPU with "
            "attn_implementation='sdpa' (kolong's default), or run this forward under torch.no_grad()"
        )
