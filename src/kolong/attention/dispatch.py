"""The one choice of attention path, and the table of paths it chooses from.

A position scheme declares what it hands to attention (a `Contribution`): nothing (learned, sinusoidal,
MemN2N: their signal is in the embeddings), a rotation of q and k (RoPE, applied before attention), a logit
bias by distance alone (T5's buckets, ALiBi), a logit bias that depends on the query (Shaw's q . w profile),
and whether it adds a term to the output from the probabilities (Shaw's value term). `plan_attention` maps
(implementation, device, contribution, mask, dropout, gradients, run-time options) to a named `Plan`; the
encoder runs `ATTENTION_FUNCTIONS[plan.kernel]`, every entry one function of one signature:

    function(q, k, v, call: AttentionCall, layer) -> (context (b, h, n, d_h), probabilities or None)

The table is kolong's own: HF's `ALL_ATTENTION_FUNCTIONS` is global to every model in the process, and these
functions understand only kolong's masks and scheme terms.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kolong.attention import banded, documents, hankel, rowwise, sdpa_regions, varlen
from kolong.attention.chunked import attention_dropout_mask, chunked_attention
from kolong.attention.masks import AttentionMask, exporting
from kolong.attention.options import AttentionOptions
from kolong.attention.sdpa import sdpa
from kolong.errors import KolongError, warn

KINDS = ("none", "rotation", "distance", "query")
# Devices whose FlexAttention kernels compile with a backward (torch has none on CPU): where the fused path may
# train through FlexAttention. Tests put "cpu" here to run CUDA's plans through FlexAttention's eager reference.
FLEX_DEVICES = ("cuda",)


@dataclass(frozen=True)
class Contribution:
    """What a position scheme hands to attention: `kind` (one of KINDS), whether it adds a value term, whether its
    bias has trained parameters (a gradient must flow into them), and `reach`: where the bias is constant past a
    distance on each side, that distance, so that it splits into three regions (`regions.py`; the scheme then has
    `regions(...)`); 0 where it does not."""

    kind: str = "none"
    value_term: bool = False
    trained: bool = False
    reach: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"a scheme's contribution is one of {', '.join(KINDS)}, got {self.kind!r}")

    @property
    def bias(self) -> bool:
        return self.kind in ("distance", "query")

    @property
    def regions(self) -> bool:
        return self.reach > 0


@dataclass(frozen=True)
class Plan:
    """A path, by the name of its function in ATTENTION_FUNCTIONS, and why it was chosen."""

    kernel: str
    why: str
    by_row: bool = False  # packed documents attended one row of the batch at a time (`documents.each_row`)

    def __str__(self) -> str:
        return self.kernel

    @property
    def label(self) -> str:
        """The kernel, and "by row" where it goes one row of the batch at a time: what benchmarks print."""
        return f"{self.kernel} by row" if self.by_row else self.kernel


def plan_summary(plans: list[Plan]) -> str:
    """Each layer's path, counted in order of first use: "flex x12", "sdpa-row-blocks x2, chunked by row x2"."""
    labels = [plan.label for plan in plans]
    return ", ".join(f"{label} x{labels.count(label)}" for label in dict.fromkeys(labels))


@dataclass
class AttentionCall:
    """Everything one attention call reads beside q, k, v and the layer. The scheme's terms come from `scheme` (an
    object with the position-scheme hooks: `chunk_bias`, `flex_score`, `score_bias`, `value_term`), built only by
    the path that reads them, with the forward's shared `state`. The layer is an argument of its own, never kept
    here: a compiled layer would guard on it, and layers compiled one by one must share a graph. `options` has no
    default: dynamo in torch 2.11 cannot wrap an instance held as a default of `__init__` (a graph break at every
    layer), only one reached through the layer that passes it."""

    mask: AttentionMask
    dropout_p: float
    options: AttentionOptions
    scheme: Any = None
    state: Any = None

    def bias(self, q, layer):
        """The scheme's bias for the fused paths (a `chunked.ChunkBias`), or None."""
        return None if self.scheme is None else self.scheme.chunk_bias(layer, q, self.state)

    def flex_score(self, q, layer):
        """(function, tensors) for FlexAttention, or None."""
        return None if self.scheme is None else self.scheme.flex_score(layer, q, self.state)

    def score_bias(self, q, layer):
        """The reference's (b|1, h, n, n) bias, or None."""
        return None if self.scheme is None else self.scheme.score_bias(layer, q, self.state)

    def value_term(self, probs, layer):
        """The reference's value term from the probabilities, or None."""
        return None if self.scheme is None else self.scheme.value_term(layer, probs, self.state)


# The paths that read packed documents' spans through `documents.each_row`: one row of the batch at a time where
# `documents.by_row` says so.
BY_ROW_PATHS = ("sdpa-document-blocks", "sdpa-row-blocks", "chunked")


def plan_attention(implementation: str, q: torch.Tensor, contribution: Contribution, mask: AttentionMask,
                   dropout_p: float, options: AttentionOptions) -> Plan:  # fmt: skip
    """The path of one attention call. `q`: its device, dtype, shape, and whether it wants a gradient."""
    plan = _path(implementation, q, contribution, mask, dropout_p, options)
    if plan.kernel in BY_ROW_PATHS and documents.by_row(q, mask):
        return Plan(
            plan.kernel, plan.why + "; one row of the batch at a time, over its own documents' spans", True
        )
    return plan


def _path(implementation: str, q: torch.Tensor, contribution: Contribution, mask: AttentionMask,
          dropout_p: float, options: AttentionOptions) -> Plan:  # fmt: skip
    from kolong.attention import flex

    if implementation == "eager":
        return Plan("eager", "the reference: scores, bias and probabilities materialised")
    if implementation == "flex_attention":
        if contribution.value_term:
            return Plan("chunked", "Shaw's value term has no FlexAttention form")
        if dropout_p > 0 and not flex.drops_here(q):
            return Plan(
                "chunked", "compiled FlexAttention on CPU returns no log-sum-exp for dropout's second pass"
            )
        return Plan("flex", "asked for (attn_implementation='flex_attention')")
    on_cuda = q.device.type in FLEX_DEVICES
    flex_here = on_cuda and options.compiled_kernels and (dropout_p == 0 or options.flex_dropout)
    if not contribution.bias and mask.window is None:
        if mask.segments is not None and options.packed_varlen and varlen.fits(q):
            return Plan(
                "varlen", "packed documents, each scored alone by FlashAttention's variable-length kernel"
            )
        packed = not mask.keys_only and flex_here and (dropout_p == 0 or options.packed_flex_dropout)
        if not packed:
            if dropout_p > 0 and not on_cuda:
                if documents.worth_it(q, mask):
                    return Plan(
                        "chunked",
                        "packed documents with dropout: the chunked path over the keys their documents span",
                    )
                return Plan(
                    "eager", "SDPA has no fused CPU kernel with dropout; the explicit path draws it cheaper"
                )
            if dropout_p == 0 and documents.worth_it(q, mask):
                return Plan(
                    "sdpa-document-blocks",
                    "packed documents: SDPA per block of queries, over the keys their documents span",
                )
            return Plan(
                "sdpa",
                "no logit bias: SDPA's fused kernel" + ("" if mask.keys_only else " under a dense mask"),
            )
    if exporting():
        return Plan("eager", "torch.export: one graph, without the fused paths' loops")
    split = contribution.regions and options.relative_regions and dropout_p == 0
    if (
        flex_here
        and split
        and ((torch.is_grad_enabled() and contribution.trained) or contribution.value_term)
    ):
        return Plan(
            "flex-regions", "FlexAttention in three regions merged by log-sum-exp: no hot gradient addresses"
        )
    if flex_here and not contribution.value_term:
        return Plan("flex", "FlexAttention: the bias in its score_mod, blocks outside the mask skipped")
    grad = torch.is_grad_enabled() and (q.requires_grad or contribution.trained)
    bias_grad = torch.is_grad_enabled() and contribution.trained
    plain_bias = dropout_p == 0 and mask.window is None and contribution.bias and not contribution.value_term
    if (
        plain_bias
        and contribution.kind == "distance"
        and not bias_grad
        and rowwise.row_ends(mask, q.shape[2]) is not None
    ):
        return Plan(
            "sdpa-distance-view", "a bias by distance alone, as one strided view: SDPA's fused kernel"
        )
    ends = rowwise.row_ends(mask, q.shape[2]) if plain_bias and contribution.kind == "distance" else None
    if split and ends is not None and hankel.fits(q, contribution.reach):
        return Plan(
            "sdpa-distance-grad",
            "a trained bias by distance alone: its strided view through SDPA's fused kernel, forward and "
            "backward, the bias's gradient from the band's strip and one causal call",
        )
    if split and mask.keys_only and sdpa_regions.fits(q, contribution.reach):
        return Plan(
            "sdpa-regions",
            "three regions: the far keys through SDPA's fused CPU kernel, the near strip in blocks",
        )
    if plain_bias and not grad:
        return Plan("sdpa-row-blocks", "SDPA per block of query rows, each block's bias built")
    # over key bands a bias is a float mask per band: kept for the backward, so only without a gradient
    banded_bias = not contribution.bias or (contribution.kind == "distance" and not grad)
    if dropout_p == 0 and mask.window is not None and options.banded and banded_bias:
        return Plan("banded", "a local window over key bands: one SDPA call")
    return Plan("chunked", "the chunked exact path: linear memory, the bias's gradient without a scatter")


def _eager(q, k, v, call: AttentionCall, layer):
    """The reference: everything materialised. Returns the context and the attention probabilities."""
    scores = torch.matmul(q * (1.0 / math.sqrt(q.shape[-1])), k.transpose(-1, -2))  # (b, h, n, n)
    # Biases are added in place and dropped at once: no extra (b, h, n, n) tensor stays alive.
    bias = call.score_bias(q, layer)
    if bias is not None:
        scores = scores.add_(bias) if bias.shape == scores.shape else scores + bias
        del bias
    additive = call.mask.additive(k.shape[2], scores.dtype, scores.device)
    if additive is not None:
        scores = scores.add_(additive) if additive.shape == scores.shape else scores + additive
    probs = scores.softmax(dim=-1)
    weights = probs
    keep = 1.0
    if call.dropout_p > 0:
        dropped, keep = attention_dropout_mask(probs.shape, call.dropout_p, probs.device)
        probs = probs.masked_fill(dropped, 0.0)
    # The 1 / keep rescaling of dropout goes on v (n x d_h) rather than the probabilities (n x n).
    context = torch.matmul(probs, v * (1.0 / keep) if keep != 1.0 else v)  # (b, h, n, d_h)
    value_term = call.value_term(probs, layer)
    if value_term is not None:
        context = context + (value_term * (1.0 / keep) if keep != 1.0 else value_term)
    return context, weights


def _sdpa(q, k, v, call: AttentionCall, layer):
    # padding (b, 1, 1, n), packed documents (b, 1, n, n), or None
    allowed = call.mask.additive(k.shape[2], q.dtype, q.device)
    return sdpa(q, k, v, attn_mask=allowed, dropout_p=call.dropout_p), None


def _varlen(q, k, v, call: AttentionCall, layer):
    return varlen.attend(q, k, v, call.mask.segments, call.dropout_p), None


def _flex(q, k, v, call: AttentionCall, layer):
    from kolong.attention import flex

    block_mask = call.mask.block_mask(q.shape[0], k.shape[2], q.device, q.shape[1])  # once, for every layer
    scale = 1.0 / math.sqrt(q.shape[-1])
    dropout = flex.dropout_for(q, call.dropout_p)
    score = call.flex_score(q, layer)
    if score is None:
        return flex.flex_call(flex.plain_flex, q, k, v, block_mask, scale, dropout, None), None
    function, tensors = score
    tensors = flex.trained_reads_in_float32(tensors)
    options = flex.kernel_options(q, *tensors, chosen=call.options.flex_kernel_options)
    return flex.flex_call(function, q, k, v, block_mask, scale, dropout, options, *tensors), None


def _flex_regions(q, k, v, call: AttentionCall, layer):
    from kolong.attention.regions import flex_region_attention

    terms = call.scheme.regions(layer, q, call.state)
    return flex_region_attention(q, k, v, call.mask, terms, call.options.flex_kernel_options), None


def _given(mask: AttentionMask) -> AttentionMask | None:
    return None if mask.empty else mask


def _sdpa_regions(q, k, v, call: AttentionCall, layer):
    terms = call.scheme.regions(layer, q, call.state)
    return sdpa_regions.sdpa_region_attention(q, k, v, _given(call.mask), terms), None


def _document_blocks(q, k, v, call: AttentionCall, layer):
    return documents.each_row(documents.document_block_attention, q, k, v, call.mask), None


def _distance_view(q, k, v, call: AttentionCall, layer):
    return rowwise.distance_attention(q, k, v, _given(call.mask), call.bias(q, layer)), None


def _distance_grad(q, k, v, call: AttentionCall, layer):
    bias = call.bias(q, layer)
    ends = rowwise.row_ends(_given(call.mask), q.shape[2])
    return hankel.hankel_attention(q, k, v, ends, bias.tensors[0], bias.reach), None


def _row_blocks(q, k, v, call: AttentionCall, layer):
    def attention(q, k, v, mask):
        return rowwise.row_block_attention(q, k, v, _given(mask), call.bias(q, layer))

    return documents.each_row(attention, q, k, v, call.mask), None


def _banded(q, k, v, call: AttentionCall, layer):
    return banded.banded_attention(q, k, v, call.mask, call.bias(q, layer)), None


def _chunked(q, k, v, call: AttentionCall, layer):
    def attention(q, k, v, mask):
        return chunked_attention(q, k, v, _given(mask), call.bias(q, layer), call.dropout_p)

    return documents.each_row(attention, q, k, v, call.mask), None


ATTENTION_FUNCTIONS: dict[str, Callable] = {
    "eager": _eager,
    "sdpa": _sdpa,
    "varlen": _varlen,
    "flex": _flex,
    "flex-regions": _flex_regions,
    "sdpa-regions": _sdpa_regions,
    "sdpa-document-blocks": _document_blocks,
    "sdpa-distance-view": _distance_view,
    "sdpa-distance-grad": _distance_grad,
    "sdpa-row-blocks": _row_blocks,
    "banded": _banded,
    "chunked": _chunked,
}


# Paths that compile a kernel at their first call of a shape: one that fails on the user's GPU falls back.
COMPILED_PATHS = ("flex", "flex-regions")


@dataclass
class CompiledFailures:
    """The compiled paths that failed in this process (kernel -> the error) and the call shapes already run
    through forward and backward. Kept for the process: a kernel that cannot compile for one layer cannot for
    the next, and each try costs a compile."""

    failed: dict[str, str] = field(default_factory=dict)
    tried: set[tuple] = field(default_factory=set)


COMPILED_FAILURES = CompiledFailures()


def attend(plan: Plan, q, k, v, call: AttentionCall, layer=0):
    """Run `plan`: (context, probabilities or None). A compiled path that fails is run as the chunked path."""
    kernel = ATTENTION_FUNCTIONS[plan.kernel]
    if (
        plan.kernel not in COMPILED_PATHS or torch.compiler.is_compiling()
    ):  # a compiled model: its compile decides
        return kernel(q, k, v, call, layer)
    if plan.kernel in COMPILED_FAILURES.failed:
        return _chunked(q, k, v, call, layer)
    try:
        _try_backward_once(kernel, q, k, v, call, layer, plan.kernel)
        return kernel(q, k, v, call, layer)
    except (KolongError, torch.OutOfMemoryError):
        raise
    except Exception as error:  # Triton out of resources, an Inductor error, an unsupported dtype, ...
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        COMPILED_FAILURES.failed[plan.kernel] = reason
        warn(f"attention path {plan.kernel!r} failed on this device ({type(error).__name__}: {reason}); it runs "
             "as the chunked exact path for the rest of this process (--attention-option compiled_kernels=false "
             "chooses that from the start)")  # fmt: skip
        return _chunked(q, k, v, call, layer)


def _try_backward_once(kernel, q, k, v, call: AttentionCall, layer, name: str) -> None:
    """Before a compiled path trains a new shape, its forward and backward once on copies of the inputs: a
    backward kernel that cannot compile fails here, where the chunked path can still take the call, rather
    than in the training loop's backward. The gradient is taken for the copies alone (`autograd.grad`), so
    nothing accumulates into the model's parameters."""
    if not torch.is_grad_enabled():
        return
    shape = (name, tuple(q.shape), q.dtype, q.device.type, call.dropout_p > 0)
    if shape in COMPILED_FAILURES.tried:
        return
    copies = [t.detach().requires_grad_() for t in (q, k, v)]
    out, _ = kernel(*copies, call, layer)
    torch.autograd.grad(out.float().sum(), copies, allow_unused=True)
    COMPILED_FAILURES.tried.add(shape)
