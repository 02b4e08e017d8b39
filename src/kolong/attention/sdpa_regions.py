"""Exact attention with a bias that is constant past a reach r on each side (Shaw's clipped key term), as three
regions merged by their log-sum-exp, forward and backward through SDPA's fused CPU kernel.

Shaw's q_i . w_clip(j - i, k) is one constant per row on each side past r = k. Split every query row into

    left   L_i = { j : j - i <= -r }     bias c^L_i
    band   B_i = { j : |j - i| <  r }    bias band[i, j - i + r - 1]
    right  R_i = { j : j - i >=  r }     bias c^R_i

A constant does not change a softmax, so the edges run without a bias, their constant added to their log-sum-exp;
the parts merge exactly: lse_i = log sum_X exp lse_X', out_i = sum_X exp(lse_X' - lse_i) out_X. Query rows go in
blocks of c: for rows start..stop-1 every key j <= start - r is left of every row and every j >= stop - 1 + r right,
so those far keys go through the fused kernel in rectangles that halve recursively (`_Layout.rectangles`: most
work in a few tall calls), and only the strip between (c + 2r - 2 keys) is tensor code, its bias written before
the GEMM adds the product into it.

The kernel's backward takes no gradient through a log-sum-exp, and needs none. Run on a far rectangle with the
merged output and log-sum-exp (as ring attention does), L_i - c_i in place of its lse and O_i - w^V_side of its
output, it computes

    P_ij = exp(s_ij + c_i - L_i),   dS_ij = P_ij (dO_i . (v_j + w^V_side) - dO_i . O_i),

the merged attention's own (Shaw's value row w^V_side is the same for every far key of the side). Each side's
constant then gets

    dc_i = sum_{j far} dS_ij = share_i (dO_i . (O_far,i + w^V_side) - dO_i . O_i)

and the strip's terms come from its recomputed probabilities. Memory is linear in n. The plan table takes it for
Shaw on CPU where rows hold `regions_strips` near strips.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from kolong.attention import options as attention_options
from kolong.attention.terms import RegionTerms, labelled, softmax_backward


def softmax_with_lse(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over the last dimension and its log-sum-exp; a row of -inf alone gets 0 and -inf (not NaN)."""
    top = scores.amax(-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weights = torch.exp(scores - top)
    total = weights.sum(-1, keepdim=True)
    reached = total > 0
    safe = torch.where(reached, total, torch.ones_like(total))  # log(0) would send NaN back through the where
    return weights / safe, torch.where(reached, top + safe.log(), -math.inf).squeeze(-1)


class _Layout:
    """Where each block's keys lie, and the masks that do not change from layer to layer."""

    def __init__(self, q, real: torch.Tensor | None, reach: int, rows: int):
        self.length, self.reach, self.rows = q.shape[2], reach, rows
        self.width = 2 * reach - 1  # the band's distances
        # (b, 1, 1, n) additive mask of padded keys for the kernel; real keys counted up to each position
        self.keys_mask = None if real is None else torch.zeros(real.shape, dtype=q.dtype).masked_fill(
            ~real, -math.inf)[:, None, None]  # fmt: skip
        self.counts = None if real is None else F.pad(real.long().cumsum(1), (1, 0))  # (b, n + 1)
        # padded key index m is key m - r + 1: a block's near strip is padded keys [start, stop + 2r - 2)
        present = torch.ones(1, self.length, dtype=torch.bool) if real is None else real
        valid = F.pad(present, (reach - 1, reach - 1), value=False)  # (b|1, n + 2r - 2)
        self.valid = valid[:, None, None]
        # blocks whose strip holds no padded key: most of them, which then skip the strip's fill of -inf
        self.whole = {start: bool(valid[:, self.near(start, stop)].all()) for start, stop in self.blocks()}
        self.rectangles = {side: self._rectangles(side) for side in ("left", "right")}  # forward and backward
        self._sides: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._weights: dict[tuple, torch.Tensor] = {}

    def blocks(self):
        for start in range(0, self.length, self.rows):
            yield start, min(start + self.rows, self.length)

    def _rectangles(self, side: str) -> list[tuple[slice, slice]]:
        """The far keys of one side as (query rows, keys) rectangles: the staircase the blocks make, split in halves
        recursively (half the rows by the keys all of them read, then each half's own staircase), so a row is in
        about log2(n / c) rectangles per side and the kernel, slow on short calls, gets tall ones."""
        n, c, r, found = self.length, self.rows, self.reach, []

        def cover(lo: int, hi: int) -> None:
            if hi - lo <= 1:
                return
            mid = (lo + hi) // 2
            if side == "left":
                rows, keys = (
                    slice(mid * c, min(n, hi * c)),
                    slice(max(0, lo * c - r + 1), max(0, mid * c - r + 1)),
                )
            else:
                rows, keys = (
                    slice(lo * c, mid * c),
                    slice(min(n, mid * c + r - 1), min(n, min(n, hi * c) + r - 1)),
                )
            if keys.stop > keys.start:
                found.append((rows, keys))
            cover(lo, mid)
            cover(mid, hi)

        cover(0, -(-n // c))
        return found

    def near(self, start: int, stop: int) -> slice:
        return slice(start, stop + self.width - 1)  # in padded key indices

    def sides(self, rows: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """(c, c + 2r - 2) masks of a block's strip left of the band and right of it (built once a layout)."""
        if rows not in self._sides:
            relative = (
                torch.arange(rows + self.width - 1, device=device)[None, :]
                - torch.arange(rows, device=device)[:, None]
            )
            self._sides[rows] = (relative < 0, relative > self.width - 1)
        return self._sides[rows]

    def edge_weights(self, rows: int, dtype, device) -> torch.Tensor:
        key = (rows, dtype)
        if key not in self._weights:
            self._weights[key] = torch.stack(self.sides(rows, device), dim=-1).to(dtype)
        return self._weights[key]

    def padded(self, t: torch.Tensor) -> torch.Tensor:
        """(b, h, n, d) -> (b, h, n + 2r - 2, d), zeros on either side (finite: they meet probabilities 0)."""
        edge = self.reach - 1
        out = t.new_empty(*t.shape[:2], t.shape[2] + 2 * edge, t.shape[3])
        out[:, :, :edge].zero_()
        out[:, :, edge + t.shape[2] :].zero_()
        out[:, :, edge : edge + t.shape[2]].copy_(t)
        return out

    def reached(self, keys: slice) -> torch.Tensor | None:
        """(b, 1, 1) whether each sequence has a real key in `keys` (the kernel gives a row with none lse 0)."""
        if self.counts is None:
            return None
        return (self.counts[:, keys.stop] > self.counts[:, keys.start])[:, None, None]


def diagonals(block: torch.Tensor, width: int) -> torch.Tensor:
    """(b, h, c, c + width - 1) contiguous -> (b, h, c, width): entry (a, t) = block[a, a + t], a view."""
    b, h, c, m = block.shape
    return block.as_strided((b, h, c, width), (h * c * m, c * m, m + 1, 1), block.storage_offset())


def _near_scores(q, k_padded, terms, left, right, layout: _Layout, start, stop, scale, shift=None):
    """(b, h, c, c + 2r - 2) biased scores of rows start..stop-1 against their strip, less `shift` (b, h, n) when
    given, -inf where no key: the bias written first (the band on the diagonals), the GEMM adding the product."""
    rows = slice(start, stop)
    before, _ = layout.sides(stop - start, q.device)
    lower, upper, band = left[:, :, rows, None], right[:, :, rows, None], terms.band[:, :, rows].to(q.dtype)
    if shift is not None:
        row_shift = shift[:, :, rows, None]
        lower, upper, band = lower - row_shift, upper - row_shift, band - row_shift
    scores = torch.where(
        before, lower.to(q.dtype), upper.to(q.dtype)
    )  # contiguous (b, h, c, m); the band next
    diagonals(scores, layout.width).copy_(band)
    keys = k_padded[:, :, layout.near(start, stop)]
    scores.flatten(0, 1).baddbmm_(
        q[:, :, rows].flatten(0, 1), keys.flatten(0, 1).transpose(1, 2), alpha=scale
    )
    if not layout.whole[start]:
        scores.masked_fill_(~layout.valid[..., layout.near(start, stop)], -math.inf)
    return scores


def _far(q, k, v, layout: _Layout, keys: slice, rows: slice, scale):
    """One rectangle of far keys through the kernel: output and lse (b, h, rows), -inf where it holds no key."""
    kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    mask = None if layout.keys_mask is None else layout.keys_mask[..., keys]
    out, lse = kernel(q[:, :, rows], k[:, :, keys], v[:, :, keys], 0.0, False, attn_mask=mask, scale=scale)
    reached = layout.reached(keys)  # the kernel's lse comes in q's dtype: float32 or float64 here (`fits`)
    return out, (lse if reached is None else lse.masked_fill(~reached, -math.inf))


def _edge_sums(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(b, h, c, m) -> (b, h, c, 2): each row's sum left of the band and right of it, as one batched product."""
    b, h, c, m = x.shape
    return torch.bmm(x.reshape(b * h, c, m).transpose(0, 1), weights).transpose(0, 1).reshape(b, h, c, 2)


def _merge_into(out: torch.Tensor, lse: torch.Tensor, part_out: torch.Tensor, part_lse: torch.Tensor) -> None:
    """A side's running (out, lse) views <- the attention over their keys and a part's, in place (a row neither
    reaches keeps 0)."""
    total = torch.logaddexp(lse, part_lse)
    safe = total.masked_fill(total == -math.inf, 0.0)
    out.mul_((lse - safe).exp_()[..., None]).addcmul_(part_out, (part_lse - safe).exp_()[..., None])
    lse.copy_(total)


def _forward(q, k, v, terms: RegionTerms, left, right, layout: _Layout):
    """The output, the merged log-sum-exp, and each far side's output and shifted lse (for the backward)."""
    batch, heads, length, _ = q.shape
    scale = 1.0 / math.sqrt(q.shape[-1])
    k_padded, v_padded = layout.padded(k), layout.padded(v)
    far_out = [torch.zeros_like(q), torch.zeros_like(q)]
    far_lse = [q.new_full((batch, heads, length), -math.inf) for _ in range(2)]
    near_out = torch.empty_like(q)
    near_lse = q.new_empty((batch, heads, length))
    for side, name in enumerate(("left", "right")):
        written = bytearray(length)
        for rows, keys in layout.rectangles[name]:
            out, lse = _far(q, k, v, layout, keys, rows, scale)
            if any(written[rows]):
                _merge_into(far_out[side][:, :, rows], far_lse[side][:, :, rows], out, lse)
            else:  # rows still at (0, -inf): the part is their merge
                far_out[side][:, :, rows], far_lse[side][:, :, rows] = out, lse
                written[rows] = b"\x01" * (rows.stop - rows.start)
    for start, stop in layout.blocks():
        scores = _near_scores(q, k_padded, terms, left, right, layout, start, stop, scale)
        # the strip's softmax in place, its normalisation left to the (c, d_h) output rather than the (c, m) block
        top = scores.amax(-1, keepdim=True)
        top.masked_fill_(top == -math.inf, 0.0)  # a row without a key in its strip: weights 0, lse -inf
        weights = scores.sub_(top).exp_()
        total = weights.sum(-1, keepdim=True)
        near_lse[:, :, start:stop] = (top + total.log()).squeeze(-1)
        # out of place: a product into a strided view of near_out runs head by head (torch 2.13, CPU)
        block = torch.matmul(weights, v_padded[:, :, layout.near(start, stop)])
        if terms.value_band is not None:
            # Shaw's value rows: w^V_-k on the strip's left, w^V_+k on its right, w^V_t on its diagonals
            edges = _edge_sums(weights, layout.edge_weights(stop - start, q.dtype, q.device))
            block += (torch.matmul(diagonals(weights, layout.width), terms.value_band.to(q.dtype))
                      + edges[..., :1] * terms.value_left.to(q.dtype)
                      + edges[..., 1:] * terms.value_right.to(q.dtype))  # fmt: skip
        near_out[:, :, start:stop] = block.div_(total.masked_fill_(total == 0, 1.0))
    far_lse = [far_lse[0] + left, far_lse[1] + right]
    shares, lse = softmax_with_lse(torch.stack([far_lse[0], near_lse, far_lse[1]], dim=-1))  # (b, h, n, 3)
    left_share, near_share, right_share = (share[..., None] for share in shares.unbind(-1))
    out = near_out.mul_(near_share).addcmul_(far_out[0], left_share).addcmul_(far_out[1], right_share)
    if terms.value_band is not None:
        out += left_share * terms.value_left + right_share * terms.value_right
    return out, lse, far_out, far_lse


def _backward(d_out, q, k, v, terms: RegionTerms, left, right, layout: _Layout, out, lse, far_out, far_lse):
    """Every input's gradient from the merged output and log-sum-exp (see the module's docstring)."""
    kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
    scale, reach, width = 1.0 / math.sqrt(q.shape[-1]), layout.reach, layout.width
    lse = torch.where(torch.isfinite(lse), lse, math.inf)  # a row no region reaches: every exp(s - L) is 0
    row_sums = (d_out * out).sum(-1)  # D_i = dO_i . O_i, (b, h, n)
    k_padded, v_padded = layout.padded(k), layout.padded(v)
    d_q = torch.zeros_like(q)
    # the kernel's dk, dv go into the padded buffers' inner rows, beside the strips'
    d_kp, d_vp = torch.zeros_like(k_padded), torch.zeros_like(v_padded)
    d_k, d_v = (t[:, :, reach - 1 : reach - 1 + q.shape[2]] for t in (d_kp, d_vp))
    d_left, d_right = torch.empty_like(lse), torch.empty_like(lse)
    d_band = lse.new_empty((*lse.shape, width))
    values = terms.value_band is not None
    d_value_rows = [q.new_zeros(q.shape[-1]) for _ in range(2)]
    d_value_band = q.new_zeros((width, q.shape[-1])) if values else None
    # each far side's backward sees the merged attention: lse less its constant, O less its value row
    passed = [(out if not values else out - terms.value_left, lse - left),
              (out if not values else out - terms.value_right, lse - right)]  # fmt: skip
    for (side_out, side_lse), name in zip(passed, ("left", "right"), strict=True):
        for rows, keys in layout.rectangles[name]:
            mask = None if layout.keys_mask is None else layout.keys_mask[..., keys]
            dq, dk, dv = kernel(d_out[:, :, rows], q[:, :, rows], k[:, :, keys], v[:, :, keys], side_out[:, :, rows],
                                side_lse[:, :, rows], 0.0, False, attn_mask=mask, scale=scale)  # fmt: skip
            d_q[:, :, rows] += dq
            d_k[:, :, keys] += dk
            d_v[:, :, keys] += dv
    for start, stop in layout.blocks():
        rows, near = slice(start, stop), layout.near(start, stop)
        # the merged attention's probabilities, 0 off the strip: exp(s - L), L folded into the bias
        scores = _near_scores(q, k_padded, terms, left, right, layout, start, stop, scale, lse)
        sides = layout.edge_weights(stop - start, q.dtype, q.device)  # (c, m, 2)
        probs = scores.exp_()
        d_block = d_out[:, :, rows]  # (b, h, c, d_h)
        d_probs = torch.matmul(d_block, v_padded[:, :, near].transpose(-1, -2))  # (b, h, c, m)
        if values:
            diagonals(d_probs, width).add_(torch.matmul(d_block, terms.value_band.T))
            d_probs.addcmul_(sides[..., 0], (d_block @ terms.value_left)[..., None])
            d_probs.addcmul_(sides[..., 1], (d_block @ terms.value_right)[..., None])
            d_value_band += torch.einsum("bhct,bhcd->td", diagonals(probs, width), d_block)
            edges = _edge_sums(probs, sides)
            d_value_rows[0] += torch.einsum("bhc,bhcd->d", edges[..., 0], d_block)
            d_value_rows[1] += torch.einsum("bhc,bhcd->d", edges[..., 1], d_block)
        # products out of place, then added: into a strided view of the buffers they run head by head
        d_vp[:, :, near] += torch.matmul(probs.transpose(-1, -2), d_block)
        d_scores = softmax_backward(probs, d_probs, row_sums[:, :, rows, None])
        edges = _edge_sums(d_scores, sides)
        d_left[:, :, rows], d_right[:, :, rows] = edges[..., 0], edges[..., 1]
        d_band[:, :, rows] = diagonals(d_scores, width)
        d_scores.mul_(scale)
        d_q[:, :, rows] += torch.matmul(d_scores, k_padded[:, :, near])
        d_kp[:, :, near] += torch.matmul(d_scores.transpose(-1, -2), q[:, :, rows])
    # the far sides' constants and value rows, from their share of the mass: dc = share (dO . (O_far + w^V) - D)
    for side, value in enumerate((terms.value_left, terms.value_right)):
        share = torch.exp(far_lse[side] - lse)
        reached = far_out[side] if value is None else far_out[side] + value
        (d_left if side == 0 else d_right).add_(share * ((d_out * reached).sum(-1) - row_sums))
        if value is not None:
            d_value_rows[side] += torch.einsum("bhn,bhnd->d", share, d_out)
    return d_q, d_k, d_v, d_left, d_band, d_right, d_value_rows[0], d_value_band, d_value_rows[1]


class _SdpaRegions(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, real, reach, rows, left, band, right, value_left, value_band, value_right):
        # a view of the (b, n, 3, h, d_h) projection: each block's product would copy its rows
        q = q.contiguous()
        terms = RegionTerms(reach, left, band, right, value_left, value_band, value_right)
        layout = _Layout(q, real, reach, rows)
        rows = q.shape[:3]  # the constants as (b, h, n), the layout of the lse they shift
        with labelled("regions forward"):
            out, lse, far_out, far_lse = _forward(
                q, k, v, terms, left.expand(rows), right.expand(rows), layout
            )
        ctx.save_for_backward(q, k, v, out, lse, *far_out, *far_lse, *_tensors(terms))
        ctx.layout = layout
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse, left_out, right_out, left_lse, right_lse, *saved = ctx.saved_tensors
        left, band, right, value_left, value_band, value_right = saved
        terms = RegionTerms(ctx.layout.reach, left, band, right, value_left, value_band, value_right)
        rows = q.shape[:3]
        with labelled("regions backward"):
            grads = _backward(d_out, q, k, v, terms, left.expand(rows), right.expand(rows), ctx.layout, out, lse,
                              (left_out, right_out), (left_lse, right_lse))  # fmt: skip
        d_q, d_k, d_v, d_left, d_band, d_right, d_value_left, d_value_band, d_value_right = grads
        # over the dimensions the constants broadcast (per-head ones are (1, h, 1))
        summed = [
            g.sum_to_size(t.shape).to(t.dtype) for g, t in ((d_left, left), (d_band, band), (d_right, right))
        ]
        return (
            d_q.to(q.dtype), d_k.to(k.dtype), d_v.to(v.dtype), None, None, None,
            *summed,
            None if value_left is None else d_value_left.to(value_left.dtype),
            None if value_band is None else d_value_band.to(value_band.dtype),
            None if value_right is None else d_value_right.to(value_right.dtype),
        )  # fmt: skip


def _tensors(terms: RegionTerms) -> tuple:
    return terms.left, terms.band, terms.right, terms.value_left, terms.value_band, terms.value_right


# Never traced: its loops and the private operators run eagerly between two graphs of a compiled model.
@torch.compiler.disable
def sdpa_region_attention(q, k, v, mask, terms: RegionTerms, block_rows: int | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + bias + mask) v (+ Shaw's value term): (b, h, n, d_h), exact, for a mask of padding
    alone (or none). `block_rows`: the option `regions_block_rows`, the default's when None."""
    block_rows = block_rows or attention_options.DEFAULT.regions_block_rows
    if mask is not None and not mask.keys_only:
        raise ValueError(
            "the CPU region path takes padding masks only (no packed documents, no local window)"
        )
    real = None if mask is None else mask.real
    return _SdpaRegions.apply(q, k, v, real, terms.reach, block_rows, *_tensors(terms))
