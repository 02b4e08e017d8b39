"""The one choice of attention path: `plan_attention` takes the first row of PLAN_TABLE whose condition holds for
the call, and the encoder runs `ATTENTION_FUNCTIONS[plan.kernel]`, every entry of one signature:

    function(q, k, v, call: AttentionCall, layer) -> (context (b, h, n, d_h), probabilities or None)

The table is kolong's own: HF's `ALL_ATTENTION_FUNCTIONS` is global to the process, and these functions read
kolong's masks and scheme terms.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kolong.attention import banded, distance_view, documents, sdpa_regions
from kolong.attention.chunked import chunked_attention
from kolong.attention.masks import AttentionMask, exporting
from kolong.attention.options import AttentionOptions
from kolong.attention.sdpa import sdpa
from kolong.attention.terms import attention_dropout_mask
from kolong.errors import KolongError, warn

KINDS = ("none", "rotation", "distance", "query")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Contribution:
    """What a position scheme hands to attention: nothing (its signal is in the embeddings), a rotation of q and k,
    a bias by distance alone (T5, ALiBi) or one that depends on the query (Shaw); whether it adds a value term;
    whether the bias trains; and `reach`: where the bias is constant past a distance on each side, that distance
    (the scheme then has `regions(...)`, `sdpa_regions.py`), else 0."""

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


@dataclass(frozen=True)
class Plan:
    """A path, by the name of its function in ATTENTION_FUNCTIONS, and why it was chosen."""

    kernel: str
    why: str
    by_row: bool = False  # packed documents attended one row of the batch at a time (`CallFacts.by_row`)
    one_call: bool = False  # the chunked path's forward as one fused call (`CallFacts.one_call`)

    def __str__(self) -> str:
        return self.kernel

    @property
    def forms(self) -> dict[str, bool]:
        """The `PLAN_FORMS` this plan runs in, as the kernel's keyword arguments."""
        return {form.name: True for form in PLAN_FORMS if getattr(self, form.name)}

    @property
    def label(self) -> str:  # what benchmarks print: "chunked by row"
        return " ".join([self.kernel, *(name.replace("_", " ") for name in self.forms)])


def plan_summary(plans: list[Plan]) -> str:
    """Each layer's path, counted in order of first use: "flex x12", "sdpa-document-blocks by row x2, chunked x2"."""
    labels = [plan.label for plan in plans]
    return ", ".join(f"{label} x{labels.count(label)}" for label in dict.fromkeys(labels))


@dataclass
class AttentionCall:
    """What one attention call reads beside q, k, v and the layer: the scheme's terms are built only by the path
    that reads them (`scheme`'s hooks, with the forward's shared `state`). The layer is never kept here: a compiled
    layer would guard on it. `options` has no default: dynamo (torch 2.11) cannot wrap an instance held as a
    default of `__init__`, a graph break at every layer."""

    mask: AttentionMask
    dropout_p: float
    options: AttentionOptions
    scheme: Any = None
    state: Any = None

    def bias(self, q, layer):  # a `terms.ChunkBias`
        return None if self.scheme is None else self.scheme.chunk_bias(layer, q, self.state)

    def flex_score(self, q, layer):  # (function, tensors)
        return None if self.scheme is None else self.scheme.flex_score(layer, q, self.state)

    def score_bias(self, q, layer):  # the reference's (b|1, h, n, n)
        return None if self.scheme is None else self.scheme.score_bias(layer, q, self.state)

    def value_term(self, probs, layer):
        return None if self.scheme is None else self.scheme.value_term(layer, probs, self.state)


class once:
    """functools.cached_property without its lock (Python 3.11's RLock, which dynamo cannot enter)."""

    def __init__(self, function: Callable) -> None:
        self.function, self.name, self.__doc__ = function, function.__name__, function.__doc__

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.function(instance)
        return value


class CallFacts:
    """One attention call as the plan table reads it; facts that read the device are computed when first asked."""

    def __init__(self, implementation: str, q: torch.Tensor, contribution: Contribution, mask: AttentionMask,
                 dropout_p: float, options: AttentionOptions) -> None:  # fmt: skip
        self.implementation, self.q, self.contribution, self.mask, self.options = (
            implementation, q, contribution, mask, options)  # fmt: skip
        self.device = q.device.type
        self.length = q.shape[2]
        self.dropout = dropout_p > 0
        self.kind = contribution.kind
        self.has_bias = contribution.bias
        self.value_term = contribution.value_term
        self.window = mask.window is not None
        self.visible = mask.visible is not None
        # a gradient flows through attention (into q or the bias), and into the bias's parameters
        grad = torch.is_grad_enabled()
        self.grad = grad and (q.requires_grad or contribution.trained)
        self.bias_grad = grad and contribution.trained
        self.exact = q.dtype in (torch.float32, torch.float64)
        # FlexAttention has a backward here (not on CPU); compiled on CPU it returns no log-sum-exp for dropout
        self.flex_device = self.device in options.flex_devices
        self.flex = (
            self.flex_device and options.compiled_kernels and (not self.dropout or options.flex_dropout)
        )
        self.flex_can_drop = self.device != "cpu" or not options.flex_compile
        # a compiled path that failed on this device earlier in the process (`attend`) is not planned again
        self.flex_failed = "flex" in COMPILED_FAILURES.failed
        self.exporting = exporting()  # torch.export traces one graph
        # packed documents or a window through FlexAttention's block mask
        self.packed_flex = not mask.keys_only and self.flex and not self.dropout
        # a bias SDPA can take as a float mask
        self.plain_bias = self.has_bias and not self.value_term and not self.window and not self.dropout
        self.cpu_packed_documents = self.device == "cpu" and mask.documents is not None and not self.window

    @once
    def row_ends(self) -> list[int] | None:
        return distance_view.row_ends(self.mask, self.length)

    @once
    def regions_fit(self) -> bool:
        """Three regions through SDPA's fused CPU kernel (`sdpa_regions.py`): a bias constant past a reach, no
        dropout, padding alone, float32 or wider (the edges' gradient is a difference of two products with the
        output, whose digits 16 bits lose), rows of `regions_strips` strips of `regions_block_rows` + 2r - 2 keys,
        and the kernel's private operators (the same from torch 2.11 to 2.15)."""
        reach, options, ops = self.contribution.reach, self.options, torch.ops.aten
        return (
            reach > 0
            and not self.dropout
            and self.mask.keys_only
            and self.device == "cpu"
            and self.exact
            and options.regions_strips * (options.regions_block_rows + 2 * reach - 2) <= self.length
            and hasattr(ops, "_scaled_dot_product_flash_attention_for_cpu")
            and hasattr(ops, "_scaled_dot_product_flash_attention_for_cpu_backward")
        )

    @once
    def one_call(self) -> bool:
        """The chunked path's forward as one call of SDPA's fused CPU kernel over the bias's strided view (which
        returns the log-sum-exp its backward needs): a bias by distance alone, no mask, no dropout, CPU."""
        return (
            self.kind == "distance"
            and self.mask.empty
            and not self.dropout
            and self.device == "cpu"
            and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")
        )

    @once
    def by_row(self) -> bool:
        """The paths over documents' spans go one row at a time: where the rows' own spans read at most
        `documents_by_row` of the pairs the batch's widest spans read (rows of fewer than 4 blocks stay whole)."""
        rows = self.options.document_block_rows
        if not self.cpu_packed_documents or self.q.shape[0] == 1 or self.length < 4 * rows:
            return False
        mask = self.mask
        return documents.keys_read(
            mask, rows, by_row=True
        ) <= self.options.documents_by_row * documents.keys_read(mask, rows)

    @once
    def document_blocks(self) -> bool:
        """Blocks of queries over their documents' spans read at most `documents_max_share` of the pairs."""
        rows = self.options.document_block_rows
        return (
            self.cpu_packed_documents
            and self.length > rows
            and documents.keys_read(self.mask, rows, by_row=self.by_row) <= self.options.documents_max_share
        )


@dataclass(frozen=True)
class PlanRow:
    """One row of the plan table: the first whose `when` holds is the plan."""

    kernel: str
    when: Callable[[CallFacts], bool]
    condition: str  # `when` in words, for `kolong attention plans` and docs/encoder.md
    why: str


def _plain(f: CallFacts) -> bool:
    """No logit bias and no window: SDPA's own masks serve, unless FlexAttention takes packed documents."""
    return not f.has_bias and not f.window and not f.packed_flex


@dataclass(frozen=True)
class PlanForm:
    """A form the chosen kernel runs in where `when` holds: `name` is the `Plan` field and the kernel's keyword."""

    name: str
    kernels: tuple[str, ...]
    when: Callable[[CallFacts], bool]
    condition: str  # `when` in words, for `kolong attention plans`
    why: str


# How a chosen kernel runs, beside the table: each form that holds is added to the plan.
PLAN_FORMS: tuple[PlanForm, ...] = (
    PlanForm("by_row", ("sdpa-document-blocks", "chunked"), lambda f: f.by_row,
             "CPU, packed documents in rows of at least 4 x document_block_rows tokens whose own spans read at most "
             "documents_by_row of the pairs the batch's spans read",
             "one row of the batch at a time, over its own documents' spans"),
    PlanForm("one_call", ("chunked",), lambda f: f.one_call,
             "a bias by distance alone, no mask, no dropout, CPU: the forward one fused SDPA call over the bias's "
             "strided view", "the forward one fused call over the bias's strided view"),
)  # fmt: skip


# The whole choice, in order. Each row reads `CallFacts` alone; each kernel is one entry of ATTENTION_FUNCTIONS.
PLAN_TABLE: tuple[PlanRow, ...] = (
    PlanRow("eager", lambda f: f.implementation == "eager", "attn_implementation='eager'",
            "the reference: scores, bias and probabilities materialised"),
    # with attention dropout on CPU too, unlike plain attention below: over a whole K-BERT training step SDPA's
    # math path and the explicit path cost the same (`kolong bench knowledge-step`), so one row serves
    PlanRow("sdpa", lambda f: f.visible and not f.has_bias and not f.window,
            "a visible matrix (K-BERT), no logit bias or window",
            "a visible matrix per example: SDPA under its dense mask"),
    PlanRow("eager", lambda f: f.visible, "a visible matrix with a logit bias or a window",
            "a visible matrix with soft positions: distances per example, which the reference reads"),
    PlanRow("chunked", lambda f: f.implementation == "flex_attention" and f.value_term,
            "attn_implementation='flex_attention', Shaw's value term", "Shaw's value term has no FlexAttention form"),
    PlanRow("chunked", lambda f: f.implementation == "flex_attention" and f.dropout and not f.flex_can_drop,
            "attn_implementation='flex_attention', dropout, compiled on CPU",
            "compiled FlexAttention on CPU returns no log-sum-exp for dropout's second pass"),
    PlanRow("chunked", lambda f: f.implementation == "flex_attention" and f.flex_failed,
            "attn_implementation='flex_attention', FlexAttention failed to compile earlier in this process",
            "FlexAttention failed to compile on this device (the warning said why): the chunked exact path instead"),
    PlanRow("flex", lambda f: f.implementation == "flex_attention", "attn_implementation='flex_attention'",
            "asked for (attn_implementation='flex_attention')"),
    PlanRow("chunked", lambda f: _plain(f) and f.dropout and not f.flex_device and f.document_blocks,
            "no bias or window, dropout, CPU, packed documents whose spans read at most documents_max_share",
            "packed documents with dropout: the chunked path over the keys their documents span"),
    PlanRow("eager", lambda f: _plain(f) and f.dropout and not f.flex_device,
            "no bias or window, dropout, CPU", "SDPA has no fused CPU kernel with dropout; the explicit path draws it cheaper"),
    PlanRow("sdpa-document-blocks", lambda f: _plain(f) and not f.dropout and f.document_blocks,
            "no bias or window, no dropout, CPU, packed documents whose spans read at most documents_max_share",
            "packed documents: SDPA per block of queries, over the keys their documents span"),
    PlanRow("sdpa", _plain, "no bias or window (packed documents: not through FlexAttention)",
            "no logit bias: SDPA's fused kernel, under the mask SDPA takes"),
    PlanRow("eager", lambda f: f.exporting, "torch.export", "torch.export: one graph, without the fused paths' loops"),
    PlanRow("chunked", lambda f: f.flex and not f.value_term and f.flex_failed,
            "FlexAttention here, no value term, but it failed to compile earlier in this process",
            "FlexAttention failed to compile on this device (the warning said why): the chunked exact path instead"),
    PlanRow("flex", lambda f: f.flex and not f.value_term, "FlexAttention here, no value term",
            "FlexAttention: the bias in its score_mod, blocks outside the mask skipped"),
    PlanRow("sdpa-distance-view",
            lambda f: f.plain_bias and f.kind == "distance" and not f.bias_grad and (f.grad or f.device == "cpu")
            and f.row_ends is not None,
            "a bias by distance alone, no gradient into it (ALiBi training; T5 and ALiBi inference on CPU), no window "
            "or dropout, padding at the rows' ends",
            "a bias by distance alone, as one strided view: SDPA's fused kernel and its backward"),
    PlanRow("sdpa-regions", lambda f: f.regions_fit,
            "Shaw's bias in three regions without dropout, padding masks only, CPU fp32, rows of regions_strips "
            "near strips", "three regions: the far keys through SDPA's fused CPU kernel, the near strip in blocks"),
    # over key bands a bias is a float mask per band: kept for the backward, so only without a gradient
    PlanRow("banded", lambda f: not f.dropout and f.window and (not f.has_bias or (f.kind == "distance" and not f.grad)),
            "a local window without dropout, no bias or an untrained one by distance",
            "a local window over key bands: one SDPA call"),
    PlanRow("chunked", lambda f: True, "everything else",
            "the chunked exact path: linear memory, the bias's gradient without a scatter"),
)  # fmt: skip


def plan_attention(implementation: str, q: torch.Tensor, contribution: Contribution, mask: AttentionMask,
                   dropout_p: float, options: AttentionOptions) -> Plan:  # fmt: skip
    """The first row of PLAN_TABLE (not skipped by the options) whose condition holds for this call."""
    facts = CallFacts(implementation, q, contribution, mask, dropout_p, options)
    row = next(row for row in PLAN_TABLE if not options.skips(row.kernel) and row.when(facts))
    forms = [form for form in PLAN_FORMS if row.kernel in form.kernels and form.when(facts)]
    why = "; ".join([row.why, *(form.why for form in forms)])
    return Plan(row.kernel, why, **{form.name: True for form in forms})


def _eager(q, k, v, call: AttentionCall, layer):
    """The reference: everything materialised; returns the attention probabilities too."""
    scores = torch.matmul(q * (1.0 / math.sqrt(q.shape[-1])), k.transpose(-1, -2))  # (b, h, n, n)
    # in place, then dropped: no second (b, h, n, n) tensor stays alive
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


def _flex(q, k, v, call: AttentionCall, layer):
    from kolong.attention import flex

    block_mask = call.mask.block_mask(q.shape[0], k.shape[2], q.device, q.shape[1])  # once, for every layer
    scale = 1.0 / math.sqrt(q.shape[-1])
    dropout = flex.dropout_for(q, call.dropout_p)
    function, tensors = call.flex_score(q, layer) or (flex.plain_flex, ())
    tensors = flex.trained_reads_in_float32(tensors)
    options = flex.kernel_options(q, *tensors, chosen=call.options.flex_kernel_options)  # None without reads
    return flex.flex_call(function, q, k, v, block_mask, scale, dropout, options, *tensors,
                          compiled=call.options.flex_compile), None  # fmt: skip


def _given(mask: AttentionMask) -> AttentionMask | None:
    return None if mask.empty else mask


def _sdpa_regions(q, k, v, call: AttentionCall, layer):
    terms = call.scheme.regions(layer, q, call.state)
    rows = call.options.regions_block_rows
    return sdpa_regions.sdpa_region_attention(q, k, v, _given(call.mask), terms, rows), None


def _document_blocks(q, k, v, call: AttentionCall, layer, by_row: bool = False):
    def attention(q, k, v, mask):
        return documents.document_block_attention(q, k, v, mask, call.options.document_block_rows)

    return documents.each_row(attention, q, k, v, call.mask, by_row), None


def _distance_view(q, k, v, call: AttentionCall, layer):
    return distance_view.distance_attention(q, k, v, _given(call.mask), call.bias(q, layer)), None


def _banded(q, k, v, call: AttentionCall, layer):
    return banded.banded_attention(q, k, v, call.mask, call.bias(q, layer), call.options), None


def _chunked(q, k, v, call: AttentionCall, layer, by_row: bool = False, one_call: bool = False):
    def attention(q, k, v, mask):
        return chunked_attention(
            q, k, v, _given(mask), call.bias(q, layer), call.dropout_p, call.options, one_call
        )

    return documents.each_row(attention, q, k, v, call.mask, by_row), None


ATTENTION_FUNCTIONS: dict[str, Callable] = {
    "eager": _eager,
    "sdpa": _sdpa,
    "flex": _flex,
    "sdpa-regions": _sdpa_regions,
    "sdpa-document-blocks": _document_blocks,
    "sdpa-distance-view": _distance_view,
    "banded": _banded,
    "chunked": _chunked,
}


# Paths that compile a kernel at their first call of a shape: one that fails on the user's GPU falls back.
COMPILED_PATHS = ("flex",)


@dataclass
class CompiledFailures:
    """The compiled paths that failed in this process (kernel -> the error) and the call shapes already tried
    forward and backward: a kernel that cannot compile for one layer cannot for the next."""

    failed: dict[str, str] = field(default_factory=dict)
    tried: set[tuple] = field(default_factory=set)


COMPILED_FAILURES = CompiledFailures()


def attend(plan: Plan, q, k, v, call: AttentionCall, layer=0):
    """Run `plan`: (context, probabilities or None). A compiled path that fails is run as the chunked path."""
    kernel = ATTENTION_FUNCTIONS[plan.kernel]
    if plan.forms:
        return kernel(q, k, v, call, layer, **plan.forms)
    # not compiled, or inside a model compiled as a whole, whose compile decides
    if plan.kernel not in COMPILED_PATHS or torch.compiler.is_compiling():
        return kernel(q, k, v, call, layer)
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
    """Before a compiled path trains a new shape, its forward and backward once on copies of the inputs, so that a
    backward that cannot compile fails here, where the chunked path can still take the call. Nothing accumulates
    into the parameters (`autograd.grad` of the copies), and the random state is restored for dropout."""
    if not torch.is_grad_enabled() or q.device.type not in call.options.flex_devices:
        return
    shape = (name, tuple(q.shape), q.dtype, q.device.type, call.dropout_p > 0)
    if shape in COMPILED_FAILURES.tried:
        return
    logger.info(
        "attention path %r: one extra forward and backward on copies before training shape %s (%s, %s), "
        "so that a backward that cannot compile falls back here",
        name,
        tuple(q.shape),
        q.dtype,
        q.device.type,
    )
    devices = [q.device] if q.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type=q.device.type):
        copies = [t.detach().requires_grad_() for t in (q, k, v)]
        out, _ = kernel(*copies, call, layer)
        torch.autograd.grad(out.float().sum(), copies, allow_unused=True)
    COMPILED_FAILURES.tried.add(shape)
