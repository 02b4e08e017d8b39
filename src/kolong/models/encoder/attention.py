"""Multi-head self-attention of kolong's encoder, on three paths chosen by HF's `attn_implementation`.

- `eager`: the reference. Scores, the scheme's (b|1, h, n, n) bias and probabilities are materialised;
  the only path that returns attention weights (`output_attentions=True`).
- `sdpa` (HF's default, and kolong's): the fastest exact path for the device. Schemes without a logit bias
  (learned, sinusoidal, memn2n, rope, none) call `scaled_dot_product_attention` (packed documents: with
  their (b, 1, n, n) mask, except on CUDA without attention dropout: FlexAttention, whose block mask skips
  the blocks between documents (`skips_blocks_in_flex`), and on CUDA in 16 bits wherever the collator gave
  their segments (KOLONG_PACKED_VARLEN): FlashAttention's variable-length kernel (`varlen.py`), each document
  scored alone, dropout included; local windows: flex on CUDA, else
  SDPA over key bands (`banded.py`) without dropout and the chunked path with it). Schemes with one (shaw,
  t5, alibi) run through FlexAttention on CUDA, attention dropout included (`flex_dropout.py`: two passes),
  and on CPU through the chunked exact path (`chunked.py`: linear memory, no scatter), except that t5 and
  alibi (a bias by distance alone) take SDPA with the bias as its float mask when the bias needs no gradient
  (inference; ALiBi's training too) and there is no attention dropout: the whole bias as a strided view of
  one vector (`rowwise.py`), or over key bands under a local window (`banded.py`, inference); Shaw's key
  term (without its value term) takes SDPA per block of query rows at inference (`rowwise.py`).
- `flex_attention`: FlexAttention always (forward-only on CPU), except Shaw's value term, which has no
  flex form and takes the chunked path.

Every path reads the same `AttentionMask` (padding, packed documents, local + global windows).
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from kolong.attention import banded, rowwise, varlen
from kolong.attention.chunked import attention_dropout_mask, chunked_attention
from kolong.attention.masks import AttentionMask, exporting
from kolong.positions import PositionEncoding

IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention")
# Local windows without a logit bias or dropout take the banded path; `kolong bench long-attention` turns
# this off for its `local+global-chunked` pattern, to time the chunked path beside it.
BANDED_LOCAL_ATTENTION = True
# Attention dropout on CUDA through FlexAttention in two passes (`flex_dropout`) rather than the chunked exact
# path; off (also KOLONG_FLEX_DROPOUT=0 in the environment): the path before it, for comparisons, or a way
# around a torch release whose FlexAttention cannot compile it.
FLEX_DROPOUT = os.environ.get("KOLONG_FLEX_DROPOUT", "1") != "0"
# Packed documents with attention dropout on CUDA: SDPA under their dense (b, 1, n, n) mask (cuDNN), unless
# KOLONG_PACKED_FLEX_DROPOUT=1 sends them to FlexAttention's block mask in two passes, which trained the base
# preset at 2,048 tokens on an H200 (torch 2.11) at half SDPA's speed: its forward kernels took most of the step.
PACKED_FLEX_DROPOUT = os.environ.get("KOLONG_PACKED_FLEX_DROPOUT", "0") == "1"
# Devices whose FlexAttention kernels are compiled with a backward: the fused path's choice of flex.
FLEX_DEVICES = ("cuda",)
__all__ = ["IMPLEMENTATIONS", "KolongAttention", "attention_dropout_mask", "skips_blocks_in_flex"]


def skips_blocks_in_flex(q: torch.Tensor, mask: AttentionMask, dropout_p: float) -> bool:
    """Whether the fused path gives a structured mask (packed documents, a local window) to FlexAttention,
    whose block mask skips the blocks the mask rules out, rather than to SDPA, which computes every score
    under a dense (b, 1, n, n) mask. On CUDA: local windows always (with dropout in two passes, unless
    KOLONG_FLEX_DROPOUT=0), packed documents without attention dropout, and with it only under
    PACKED_FLEX_DROPOUT: NSMC's reviews packed into rows of 2,048 leave about one block of 128 x 128 in five to
    compute, yet FlexAttention's two passes trained the base preset at half SDPA's speed (H200, torch 2.11)."""
    if not flex_runs_here(q, dropout_p) or mask.keys_only:
        return False
    return dropout_p == 0 or mask.window is not None or PACKED_FLEX_DROPOUT


def flex_runs_here(q: torch.Tensor, dropout_p: float) -> bool:
    """Whether the fused path may train and infer through FlexAttention for `q`: a device whose kernels are
    compiled with a backward, without attention dropout or with it in FlexAttention (KOLONG_FLEX_DROPOUT)."""
    return q.device.type in FLEX_DEVICES and (dropout_p == 0 or FLEX_DROPOUT)


class KolongAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config  # read at each call: `model.set_attn_implementation(...)` switches paths
        self.heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.out = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, x, mask: AttentionMask, positions: PositionEncoding, layer: int, state,
                output_attentions: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
        batch, length, hidden = x.shape
        qkv = self.qkv(x).view(batch, length, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (b, h, n, d_h)
        q, k = positions.rotate(layer, q, k, state)
        dropout_p = self.dropout_p if self.training else 0.0
        implementation = self.config._attn_implementation or "sdpa"
        weights = None
        if implementation == "eager" or output_attentions:
            if implementation != "eager":
                raise ValueError(
                    f"attention weights come from the eager path, and this model attends with {implementation!r}: "
                    "load it with attn_implementation='eager' or call model.set_attn_implementation('eager')"
                )
            context, weights = self._attend_explicitly(q, k, v, mask, positions, layer, state, dropout_p)
        elif implementation == "flex_attention":
            context = self._attend_flex(q, k, v, mask, positions, layer, state, dropout_p, explicit=True)
        else:
            context = self._attend_fused(q, k, v, mask, positions, layer, state, dropout_p)
        context = context.transpose(1, 2).reshape(batch, length, hidden)  # (b, n, d)
        return self.out(context), weights

    def _attend_fused(self, q, k, v, mask, positions, layer, state, dropout_p):
        if (
            mask.segments is not None
            and mask.window is None
            and not positions.has_logit_bias
            and varlen.fits(q)
        ):
            return varlen.attend(q, k, v, mask.segments, dropout_p)  # packed documents, each scored alone
        if (
            not positions.has_logit_bias
            and mask.window is None
            and not skips_blocks_in_flex(q, mask, dropout_p)
        ):
            if dropout_p > 0 and q.device.type == "cpu":
                # SDPA's CPU kernels fall back to an unfused path with dropout anyway; the explicit path
                # draws its dropout mask 2-3x cheaper.
                return self._attend_explicitly(q, k, v, mask, positions, layer, state, dropout_p)[0]
            # padding (b, 1, 1, n), packed documents (b, 1, n, n), or None
            allowed = mask.additive(k.shape[2], q.dtype, q.device)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout_p)
        if exporting():  # the chunked path loops over row blocks: one graph needs the reference
            return self._attend_explicitly(q, k, v, mask, positions, layer, state, dropout_p)[0]
        if flex_runs_here(q, dropout_p) and not positions.needs_probabilities:
            return self._attend_flex(q, k, v, mask, positions, layer, state, dropout_p, explicit=False)
        # The bias is built only here, once the path is known (flex builds its own from the same tables).
        bias = positions.chunk_bias(layer, q, state)
        # SDPA's fused kernel wherever it can take the bias: 1.5-2.5x the chunked path's speed on CPU
        given = None if mask.empty else mask
        if dropout_p == 0 and mask.window is None:
            if rowwise.fits_distance(bias):  # T5, ALiBi: the bias as one strided view
                context = rowwise.distance_attention(q, k, v, given, bias)
                if context is not None:
                    return context
            elif rowwise.fits_row_blocks(q, k, v, bias):  # Shaw's key term at inference
                return rowwise.row_block_attention(q, k, v, given, bias)
        if dropout_p == 0 and mask.window is not None and BANDED_LOCAL_ATTENTION and banded.fits(q, bias):
            return banded.banded_attention(q, k, v, mask, bias)  # over key bands
        return chunked_attention(q, k, v, given, bias, dropout_p)

    def _attend_flex(self, q, k, v, mask, positions, layer, state, dropout_p, explicit: bool):
        from kolong.attention import flex

        if explicit:
            flex.check_flex(q)
        # Shaw's value term has no flex form; compiled flex on CPU returns no log-sum-exp for dropout's second
        # pass (torch 2.11-2.13). Both take the chunked exact path.
        if positions.needs_probabilities or (dropout_p > 0 and not flex.drops_here(q)):
            bias = positions.chunk_bias(layer, q, state)
            return chunked_attention(q, k, v, None if mask.empty else mask, bias, dropout_p)
        block_mask = mask.block_mask(q.shape[0], k.shape[2], q.device, q.shape[1])  # once, for every layer
        scale = 1.0 / math.sqrt(self.head_dim)
        dropout = flex.dropout_for(q, dropout_p)
        score = positions.flex_score(layer, q, state)
        if score is None:
            return flex.flex_call(flex.plain_flex, q, k, v, block_mask, scale, dropout)
        function, tensors = score
        return flex.flex_call(function, q, k, v, block_mask, scale, dropout, *tensors)

    def _attend_explicitly(self, q, k, v, mask, positions, layer, state, dropout_p):
        """The reference: everything materialised. Returns the context and the attention probabilities."""
        scores = torch.matmul(q * (1.0 / math.sqrt(self.head_dim)), k.transpose(-1, -2))  # (b, h, n, n)
        # Biases are added in place and dropped at once: no extra (b, h, n, n) tensor stays alive.
        bias = positions.score_bias(layer, q, state)
        if bias is not None:
            scores = scores.add_(bias) if bias.shape == scores.shape else scores + bias
            del bias
        additive = mask.additive(k.shape[2], scores.dtype, scores.device)
        if additive is not None:
            scores = scores.add_(additive) if additive.shape == scores.shape else scores + additive
        probs = scores.softmax(dim=-1)
        weights = probs
        keep = 1.0
        if dropout_p > 0:
            dropped, keep = attention_dropout_mask(probs.shape, dropout_p, probs.device)
            probs = probs.masked_fill(dropped, 0.0)
        # The 1 / keep rescaling of dropout goes on v (n x d_h) rather than the probabilities (n x n).
        context = torch.matmul(probs, v * (1.0 / keep) if keep != 1.0 else v)  # (b, h, n, d_h)
        value_term = positions.value_term(layer, probs, state)
        if value_term is not None:
            context = context + (value_term * (1.0 / keep) if keep != 1.0 else value_term)
        return context, weights
