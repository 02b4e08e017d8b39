"""Exact attention with relative-position terms, chunked over queries: memory linear in n, no scatter.

    S = q k^T / sqrt(d) + B + mask,   P = softmax(S),   O = P' v + reduce(P') W^V    (P' = dropout(P))

one block of query rows at a time. The forward keeps q, k, v, O and each row's log-sum-exp; the backward
recomputes S and P per block (as FlashAttention does) and reduces dS onto the bias's inputs itself
(`ChunkBias`), so no (n, n) tensor outlives a block and no scatter runs:

    dP = dO v^T (+ expand(dO W^V^T)),   dS = P * (dP - rowsum(P * dP)) = P * (dP - dO . O),
    dq = dS k / sqrt(d),   dk = dS^T q / sqrt(d),   dv = P'^T dO,   d(bias inputs) = the scheme's reduction of dS.

Dropout is drawn from a per-call seed and redrawn in the backward. With `one_call` (the plan's, for a bias by
distance alone without a mask or dropout on CPU: T5's training) the forward is one fused SDPA call over the bias's
strided view (`_hankel_forward`). The plan table takes this path for everything no other row takes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from kolong.attention import options as attention_options
from kolong.attention.masks import as_additive, take_keys
from kolong.attention.options import AttentionOptions
from kolong.attention.terms import (
    ChunkBias,
    Keys,
    attention_dropout_mask,
    hankel_view,
    labelled,
    softmax_backward,
)

# The floor of s - L before exp: exp(-87) is the smallest power of e float32 holds as a normal number.
EXP_FLOOR = -87.0


def block_rows(q: torch.Tensor, mask, options: AttentionOptions) -> int:
    """Query rows per block: a block's scores near `options.chunk_scores`, a window's blocks about as tall as
    the window (c rows read c + 2w keys), packed documents' at most `options.chunk_document_rows`."""
    batch, heads, length, _ = q.shape
    keys = mask.keys_per_row(length) if mask is not None else length
    rows = max(16, min(length, options.chunk_scores // max(1, batch * heads * keys)))
    if mask is not None and mask.window is not None:
        rows = min(rows, max(16, mask.window))
    elif mask is not None and mask.documents is not None:
        rows = min(rows, options.chunk_document_rows)
    return rows


def _scatter_keys(block: torch.Tensor, keys: Keys, length: int) -> torch.Tensor:
    """(..., len(keys)) -> (..., length), zeros at the keys not read."""
    if keys is None:
        return block
    if isinstance(keys, range):
        return F.pad(block, (keys.start, length - keys.stop))
    return block.new_zeros(*block.shape[:-1], length).index_copy_(-1, keys, block)


def _as_read(bias: ChunkBias, keys: Keys) -> bool:
    """The bias's reductions take a block over `keys` as it is (else the whole row, zeros at the keys not read)."""
    return keys is None or (bias.key_runs and isinstance(keys, range))


def _for_bias(bias: ChunkBias, block: torch.Tensor, keys: Keys, length: int) -> torch.Tensor:
    return block if _as_read(bias, keys) else _scatter_keys(block, keys, length)


def _bias_keys(bias: ChunkBias, keys: Keys) -> range | None:
    return keys if _as_read(bias, keys) else None


# the inverse of `_for_bias`
def _from_bias(bias: ChunkBias, block: torch.Tensor, keys: Keys) -> torch.Tensor:
    return block if _as_read(bias, keys) else take_keys(block, keys, dim=-1)


def _dropped(shape, p: float, seed: int, device) -> tuple[torch.Tensor, float]:
    generator = torch.Generator(device=device).manual_seed(seed)
    return attention_dropout_mask(shape, p, device, generator)


class _ChunkedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, bias, dropout_p, rows, one_call, *tensors):
        # views of one (b, n, 3, h, d_h) projection, whose (b, h) axes do not merge: one copy each, not one per product
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        seed = int(torch.randint(0, 2**62, (), device="cpu")) if dropout_p > 0 else 0
        with labelled("chunked forward"):
            if one_call:
                out, lse = _hankel_forward(q, k, v, bias, tensors)
            else:
                out, lse = _row_block_forward(q, k, v, mask, bias, dropout_p, tensors, rows, seed)
        ctx.save_for_backward(q, k, v, lse, out, *tensors)
        ctx.mask, ctx.bias, ctx.dropout_p, ctx.seed, ctx.rows = mask, bias, dropout_p, seed, rows
        return out

    @staticmethod
    def backward(ctx, d_out):
        with labelled("chunked backward"):
            return _chunked_backward(ctx, d_out)


def _chunked_backward(ctx, d_out):
    q, k, v, lse, out, *tensors = ctx.saved_tensors
    mask, bias, dropout_p, rows = ctx.mask, ctx.bias, ctx.dropout_p, ctx.rows
    length, scale = q.shape[2], 1.0 / math.sqrt(q.shape[-1])
    exact = _exact(q)
    # D_i = sum_j P'_ij dP'_ij = dO_i . O_i (value term and dropout included): one product over (n, d_h); from
    # an output rounded to 16 bits it would not be exact, so summed per block then
    row_sums = (d_out * out).sum(-1, keepdim=True) if out.dtype == exact else None  # (b, h, n, 1)
    # contiguous, so `_add_products` accumulates into them in place
    d_q, d_k, d_v = (
        torch.zeros_like(q),
        k.new_zeros(k.shape, dtype=exact),
        v.new_zeros(v.shape, dtype=exact),
    )
    grads = [torch.zeros_like(t) if t.requires_grad else None for t in tensors]
    for index, start in enumerate(range(0, length, rows)):
        stop = min(start + rows, length)
        keys = mask.key_index(start, stop, length, q.device) if mask is not None else None
        k_block, v_block = take_keys(k, keys, dim=2).to(exact), take_keys(v, keys, dim=2).to(exact)
        lse_block = lse[:, :, start:stop]
        probs = _probabilities(q, k, mask, bias, tensors, start, stop, scale, keys, lse_block)[0]
        kept, keep = probs, 1.0
        if dropout_p > 0:
            dropped, keep = _dropped(probs.shape, dropout_p, ctx.seed + index, q.device)
            kept = probs.masked_fill(dropped, 0.0).mul_(1.0 / keep)
        d_block = d_out[:, :, start:stop].to(exact)  # (b, h, c, d_h)
        d_kept = torch.matmul(d_block, v_block.transpose(-1, -2))  # (b, h, c, n | keys)
        if bias is not None and bias.has_values:
            d_value = bias.value_grads(tensors, start, stop, _for_bias(bias, kept, keys, length), d_block, grads,
                                       _bias_keys(bias, keys))  # fmt: skip
            d_kept += _from_bias(bias, d_value, keys)
        _add_products(d_v, keys, kept.transpose(-1, -2), d_block)
        d_probs = d_kept.masked_fill_(dropped, 0.0).mul_(1.0 / keep) if dropout_p > 0 else d_kept
        # dS = P * (dP - sum_j P dP): the softmax backward, in place on dP.
        sums = row_sums[:, :, start:stop] if row_sums is not None else (probs * d_probs).sum(-1, keepdim=True)
        d_scores = softmax_backward(probs, d_probs, sums)
        q_block = q[:, :, start:stop].to(exact) * scale  # (b, h, c, d_h): the scale on c rows, not on n
        d_q[:, :, start:stop] = (torch.matmul(d_scores, k_block) * scale).to(q.dtype)
        _add_products(d_k, keys, d_scores.transpose(-1, -2), q_block)
        if bias is not None:
            with labelled("chunked bias gradient"):
                bias.score_grads(tensors, start, stop, _for_bias(bias, d_scores, keys, length), grads,
                                 _bias_keys(bias, keys))  # fmt: skip
    return (d_q, d_k.to(k.dtype), d_v.to(v.dtype), None, None, None, None, None, *grads)


def _row_block_forward(q, k, v, mask, bias, dropout_p, tensors, rows: int, seed: int):
    """The output and each row's log-sum-exp, one block of `rows` query rows at a time."""
    batch, heads, length, head_dim = q.shape
    scale = 1.0 / math.sqrt(head_dim)
    out, lse = torch.empty_like(q), q.new_empty(batch, heads, length, dtype=_exact(q))
    for index, start in enumerate(range(0, length, rows)):
        stop = min(start + rows, length)
        keys = mask.key_index(start, stop, length, q.device) if mask is not None else None
        probs, lse[:, :, start:stop] = _probabilities(q, k, mask, bias, tensors, start, stop, scale, keys)
        if dropout_p > 0:
            dropped, keep = _dropped(probs.shape, dropout_p, seed + index, q.device)
            probs = probs.masked_fill_(dropped, 0.0).mul_(1.0 / keep)
        block = torch.matmul(probs.to(v.dtype), take_keys(v, keys, dim=2))  # (b, h, c, d_h)
        if bias is not None and bias.has_values:
            values = bias.values(
                tensors, start, stop, _for_bias(bias, probs, keys, length), _bias_keys(bias, keys)
            )
            block = block + values.to(block.dtype)
        out[:, :, start:stop] = block
    return out, lse


def _hankel_forward(q, k, v, bias, tensors):
    """A bias by distance alone, no mask, no dropout, CPU: output and log-sum-exp from one call of SDPA's fused
    CPU kernel (a private operator, the same from torch 2.11 to 2.15) over the bias's Hankel view with the keys
    reversed (`hankel_view`); the backward stays the chunked one."""
    kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    length = q.shape[2]
    per_distance = bias.distances(tensors, torch.arange(1 - length, length, device=q.device), length)
    view = hankel_view(per_distance.to(q.dtype), length, length)
    out, lse = kernel(q, k.flip(2), v.flip(2), attn_mask=view, scale=1.0 / math.sqrt(q.shape[-1]))
    return out, lse.to(_exact(q))


def _add_products(total: torch.Tensor, keys: Keys, left: torch.Tensor, right: torch.Tensor) -> None:
    """total[:, :, keys] += left @ right (all keys when None: in place, no (b, h, n, d_h) temporary per block)."""
    if keys is None and total.is_contiguous():
        # in place under autocast too, where the backward's products come in bf16
        total.flatten(0, 1).baddbmm_(left.flatten(0, 1).to(total.dtype), right.flatten(0, 1).to(total.dtype))
    elif keys is None:
        total += torch.matmul(left, right)
    elif isinstance(keys, range):
        total[:, :, keys.start : keys.stop] += torch.matmul(left, right).to(total.dtype)
    else:
        total.index_add_(2, keys, torch.matmul(left, right).to(total.dtype))


def _scores(q, k, bias, tensors, start, stop, scale, keys=None, shift=None) -> torch.Tensor:
    """q k^T / sqrt(d) + bias - shift of rows start..stop-1 over `keys`: (b, h, c, n | keys) in the exact dtype. The
    GEMM adds the product into the block that holds the bias and shift: no pass of their own over the block."""
    exact, length = _exact(q), k.shape[2]
    k = take_keys(k, keys, dim=2)
    shape = (*q.shape[:2], stop - start, k.shape[2])
    if bias is not None:
        block = bias.block(tensors, start, stop, length, shape, exact, keys, shift).contiguous()
    elif shift is not None:
        block = shift.to(exact).neg()[..., None].expand(shape).contiguous()
    else:
        block = q.new_zeros(shape, dtype=exact)
    # contiguous q, k: their (b, h) axes merge, so flatten is a view
    rows, keys_t = q[:, :, start:stop].flatten(0, 1), k.flatten(0, 1).transpose(1, 2)
    if q.dtype == exact:
        block.flatten(0, 1).baddbmm_(rows, keys_t, alpha=scale)
    else:  # 16-bit q, k keep their 16-bit product
        block.flatten(0, 1).add_(torch.bmm(rows, keys_t), alpha=scale)
    return block


def _probabilities(q, k, mask, bias, tensors, start, stop, scale, keys=None, lse=None):
    """Probabilities of rows start..stop-1 over `keys` in float32 or wider (b, h, c, n | keys), and their
    log-sum-exp; a row with no allowed key gets 0 (log-sum-exp 0), not NaN."""
    length = k.shape[2]
    # (b, h, c, n): s - L when L is given
    scores = _scores(q, k, bias, tensors, start, stop, scale, keys, shift=lse)
    allowed = mask.rows(start, stop, length, q.device, keys) if mask is not None else None
    if lse is None:
        if allowed is not None:
            scores.add_(as_additive(allowed, scores.dtype))
        lse = torch.logsumexp(scores, dim=-1)
        lse = lse.masked_fill(lse == float("-inf"), 0.0)
        scores.sub_(lse[..., None])
    # s - L <= 0 on allowed keys; the floor keeps exp off the CPU's slow path for subnormal numbers (it adds
    # under 2e-38 of the row's mass), and masked keys get exactly 0 from the product with the mask
    probs = scores.clamp_(EXP_FLOOR, 0.0).exp_()
    if allowed is not None:
        probs.mul_(allowed.to(probs.dtype))
    return probs, lse


def _exact(tensor: torch.Tensor) -> torch.dtype:  # scores, probabilities and gradients: float32 or float64
    return torch.promote_types(tensor.dtype, torch.float32)


# Never traced (eager between two graphs of a compiled model): its block loop and host-side dropout seed do not
# trace, nor (torch 2.11) its dropout masks once shapes turn dynamic.
@torch.compiler.disable
def chunked_attention(q, k, v, mask=None, bias: ChunkBias | None = None, dropout_p: float = 0.0,
                      options: AttentionOptions | None = None, one_call: bool = False):  # fmt: skip
    """softmax(q k^T / sqrt(d) + bias + mask) v (+ the bias's value term): (b, h, n, d_h), exact, memory linear in
    n. `options`: the layer's (its block sizes), else the defaults; `one_call`: the forward as one fused call
    (`_hankel_forward`: a bias by distance alone, no mask, no dropout, CPU)."""
    if one_call and (mask is not None or dropout_p > 0 or bias is None or not bias.by_distance):
        raise ValueError("one_call: a bias by distance alone, without a mask or dropout")
    options = options or attention_options.DEFAULT
    tensors = bias.tensors if bias is not None else ()
    rows = block_rows(q, mask, options)
    return _ChunkedAttention.apply(q, k, v, mask, bias, dropout_p, rows, one_call, *tensors)
