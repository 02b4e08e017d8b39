"""A trained bias by distance alone (T5's buckets) on CPU through SDPA's fused kernel, forward and backward.

T5's bias b[j - i] takes one value per head for every j - i <= -r and one for every j - i >= r (r: where its
bucket function saturates), and reads the distances in between one by one. As a Hankel view of the keys in
reverse order (`chunked.hankel_view`), the whole (h, n, n) bias is the fused kernel's float mask with nothing
built, forward and backward: the kernel's backward gives dq, dk and dv. What it does not give is the bias's own
gradient, d b[t] = sum over b, i of dS_i,i+t, with dS = P (dP - D), D_i = dO_i . O_i. That comes from three
regions of each row:

- the band |j - i| < r, one entry per distance: a strip of blocks of rows against the c + 2r - 2 keys within
  reach of one of their rows, P and dP on its diagonals only, summed along them;
- the left edge j <= i - r: from the left region's own attention, one causal call of the kernel (queries r..n-1
  against keys 0..n-r-1, no bias: the edge's constant c_L enters through its log-sum-exp), whose output O_L and
  log-sum-exp give
      sum_{j <= i - r} dS_ij = exp(lse_L,i + c_L - L_i) (dO_i . O_L,i - D_i);
- the right edge from the other two, since every row of dS sums to 0 (sum_j P_ij dP_ij = D_i).

No (n, n) tensor, no scatter. Against the chunked path, whose backward recomputes every block of scores in tensor
code, this trained T5 faster on 2 CPU cores from 768 tokens on, and slower at 512, where the strip is
half of each row (`fits`); against the three regions of `sdpa_regions.py` at every length measured.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from kolong.attention.chunked import EXP_FLOOR, hankel_view
from kolong.attention.profiling import labelled
from kolong.attention.rowwise import each_length
from kolong.attention.sdpa_regions import diagonals

# Query rows per block of the band's strip: a block computes scores against c + 2r - 2 keys and uses 2r - 1 of
# them per row, so shorter blocks waste less of their products and taller ones make larger products.
BLOCK_ROWS = 64


def _exact(tensor: torch.Tensor) -> torch.dtype:
    return torch.promote_types(tensor.dtype, torch.float32)


def _every_distance(per_distance: torch.Tensor, reach: int, length: int) -> torch.Tensor:
    """(h, 2r + 1), entries for distances -r..r (the edges standing for every distance past them) ->
    (h, 2n - 1) for every distance 1-n..n-1."""
    index = torch.arange(1 - length, length, device=per_distance.device).clamp(-reach, reach) + reach
    return per_distance[:, index]


def _strip_keys(x: torch.Tensor, low: int, high: int, end: int) -> tuple[torch.Tensor, bool]:
    """x's keys low..high-1, zeros for those outside 0..end-1; and whether any was outside."""
    inside = x[:, :, max(low, 0) : min(high, end)]
    before, after = max(0, -low), max(0, high - end)
    if before == 0 and after == 0:
        return inside, False
    return F.pad(inside, (0, 0, before, after)), True


def _band_grads(q, k, v, d_out, lse, row_sums, per_distance, reach: int, end: int):
    """The band's gradient summed over the batch and rows (h, 2r - 1), and each row's sum of dS over its band
    (b, h, n): P and dP on the diagonals of each block's strip."""
    batch, heads, length, _ = q.shape
    exact, width, scale = lse.dtype, 2 * reach - 1, 1.0 / math.sqrt(q.shape[-1])
    band_bias = per_distance[:, 1:-1].to(exact)[:, None, :]  # (h, 1, 2r - 1): distances 1-r..r-1
    total = torch.zeros(heads, width, dtype=exact, device=q.device)
    row_totals = torch.empty(batch, heads, length, dtype=exact, device=q.device)
    k, v = k.to(exact), v.to(exact)
    for start in range(0, length, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, length)
        low, high = start - reach + 1, stop + reach - 1  # entry (a, t) is key start + a + t - r + 1
        keys, padded = _strip_keys(k, low, high, end)
        values, _ = _strip_keys(v, low, high, end)
        rows = q[:, :, start:stop].to(exact) * scale
        scores = diagonals(torch.matmul(rows, keys.transpose(-1, -2)), width)  # (b, h, c, 2r - 1)
        d_probs = diagonals(torch.matmul(d_out[:, :, start:stop], values.transpose(-1, -2)), width)
        # P = exp(s - L) <= 1, floored before exp: the CPU's exp is slow on subnormal results (`chunked`)
        probs = torch.add(scores, band_bias).sub_(lse[:, :, start:stop, None]).clamp_(min=EXP_FLOOR).exp_()
        if padded:  # keys before 0 or past the row's end have no probability
            key = (
                torch.arange(stop - start, device=q.device)[:, None]
                + torch.arange(width, device=q.device)
                + low
            )
            probs.mul_(((key >= 0) & (key < end)).to(exact))
        d_scores = torch.sub(d_probs, row_sums[:, :, start:stop, None]).mul_(probs)  # dS = P (dP - D)
        total += d_scores.sum((0, 2))
        row_totals[:, :, start:stop] = d_scores.sum(-1)
    return total, row_totals


class _HankelAttention(torch.autograd.Function):
    """Every query row against the first `end` keys (padding after them), the bias per_distance (h, 2r + 1)."""

    @staticmethod
    def forward(ctx, q, k, v, per_distance, reach: int, end: int):
        kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        q, length = q.contiguous(), q.shape[2]
        scale = 1.0 / math.sqrt(q.shape[-1])
        with labelled("hankel forward"):
            view = hankel_view(_every_distance(per_distance, reach, length).to(q.dtype), length, end)
            out, lse = kernel(q, k[:, :, :end].flip(2), v[:, :, :end].flip(2), attn_mask=view, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse, per_distance)
        ctx.reach, ctx.end = reach, end
        return out

    @staticmethod
    def backward(ctx, d_out):
        with labelled("hankel backward"):
            return _HankelAttention._backward(ctx, d_out)

    @staticmethod
    def _backward(ctx, d_out):
        q, k, v, out, lse, per_distance = ctx.saved_tensors
        reach, end = ctx.reach, ctx.end
        ops = torch.ops.aten
        length, scale, exact = q.shape[2], 1.0 / math.sqrt(q.shape[-1]), _exact(q)
        # k, v: views of the (b, n, 3, h, d_h) projection, whose (b, h) axes do not merge: every product of the
        # strip's blocks would copy its keys first. One copy each.
        d_out, k, v = d_out.contiguous(), k.contiguous(), v.contiguous()
        view = hankel_view(_every_distance(per_distance, reach, length).to(q.dtype), length, end)
        flipped_k, flipped_v = k[:, :, :end].flip(2), v[:, :, :end].flip(2)
        d_q, d_kf, d_vf = ops._scaled_dot_product_flash_attention_for_cpu_backward(
            d_out, q, flipped_k, flipped_v, out, lse, 0.0, False, attn_mask=view, scale=scale
        )
        if end == length:
            d_k, d_v = d_kf.flip(2), d_vf.flip(2)
        else:  # no gradient into the padding
            d_k, d_v = (
                F.pad(d_kf.flip(2), (0, 0, 0, length - end)),
                F.pad(d_vf.flip(2), (0, 0, 0, length - end)),
            )
        if not ctx.needs_input_grad[3]:
            return d_q, d_k, d_v, None, None, None
        with labelled("hankel bias gradient"):
            lse, d_exact = lse.to(exact), d_out.to(exact)
            row_sums = (d_exact * out.to(exact)).sum(-1)  # D_i = dO_i . O_i, (b, h, n)
            band, band_rows = _band_grads(q, k, v, d_exact, lse, row_sums, per_distance, reach, end)
            left_rows = torch.zeros_like(row_sums)
            if length > reach:  # rows r..n-1 have a left edge: keys 0..i-r, the causal pattern shifted by r
                keys = slice(0, min(length - reach, end))
                left_out, left_lse = ops._scaled_dot_product_flash_attention_for_cpu(
                    q[:, :, reach:], k[:, :, keys], v[:, :, keys], 0.0, True, scale=scale
                )
                share = torch.exp(left_lse.to(exact) + per_distance[:, :1].to(exact) - lse[:, :, reach:])
                reached = (d_exact[:, :, reach:] * left_out.to(exact)).sum(-1)
                left_rows[:, :, reach:] = share * (reached - row_sums[:, :, reach:])
            right_rows = -(left_rows + band_rows)  # each row of dS sums to 0
            d_bias = torch.cat([left_rows.sum((0, 2))[:, None], band, right_rows.sum((0, 2))[:, None]], 1)
        return d_q, d_k, d_v, d_bias.to(per_distance.dtype), None, None


# Never traced: its block loop and the private operators run eagerly between two graphs of a compiled model.
@torch.compiler.disable
def hankel_attention(q, k, v, ends: list[int], per_distance: torch.Tensor, reach: int) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + b[j - i] + padding) v: (b, h, n, d_h), exact, with b read from per_distance
    (h, 2r + 1) through the distance clipped to -r..r; `ends`: each row's number of real tokens, which come first
    (`rowwise.row_ends`). Rows of one length go in one call; a row of padding alone gets 0."""
    if per_distance.dim() != 2 or per_distance.shape[1] != 2 * reach + 1:
        raise ValueError(f"a bias constant past reach {reach} is a (heads, {2 * reach + 1}) vector over the "
                         f"distances -{reach}..{reach}, got shape {tuple(per_distance.shape)}")  # fmt: skip

    def attend(q, k, v, end):
        if end == 0:
            return torch.zeros_like(q)
        return _HankelAttention.apply(q, k, v, per_distance, reach, end)

    return each_length(attend, q, k, v, ends)
