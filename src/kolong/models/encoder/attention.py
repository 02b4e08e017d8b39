"""Multi-head self-attention of kolong's encoder: the projections, the scheme's rotation, and the one plan.

HF's `attn_implementation` picks among `eager` (the reference: everything materialised, the only path that
returns attention weights), `sdpa` (HF's default and kolong's: the fastest exact path for the device) and
`flex_attention` (FlexAttention always, forward-only on CPU). Which kernel runs is decided in one place,
`kolong.attention.dispatch.plan_attention`, from the scheme's declared contribution, the mask, dropout and the
run-time options; `KolongAttention.plan` says which it is for a call, and `KolongModel.attention_plans` for a
whole input.
"""

from __future__ import annotations

import torch
from torch import nn

from kolong.attention import options as attention_options
from kolong.attention.dispatch import AttentionCall, Plan, attend, plan_attention
from kolong.attention.masks import AttentionMask
from kolong.positions import PositionEncoding

IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention")
__all__ = ["IMPLEMENTATIONS", "KolongAttention"]


class KolongAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config  # read at each call: `model.set_attn_implementation(...)` switches paths
        self.heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.out = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.dropout_p = config.attention_probs_dropout_prob
        self.options = attention_options.DEFAULT  # run-time choices (`set_attention_options`), never saved

    def implementation(self, output_attentions: bool = False) -> str:
        implementation = self.config._attn_implementation or "sdpa"
        if output_attentions and implementation != "eager":
            raise ValueError(
                f"attention weights come from the eager path, and this model attends with {implementation!r}: "
                "load it with attn_implementation='eager' or call model.set_attn_implementation('eager')"
            )
        return implementation

    def plan(self, q: torch.Tensor, mask: AttentionMask, positions: PositionEncoding) -> Plan:
        """The path this layer takes for queries like `q` (its device, dtype, shape and gradient) under `mask`."""
        dropout_p = self.dropout_p if self.training else 0.0
        return plan_attention(self.implementation(), q, positions.contribution, mask, dropout_p, self.options)

    def forward(self, x, mask: AttentionMask, positions: PositionEncoding, layer: int, state,
                output_attentions: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
        batch, length, hidden = x.shape
        qkv = self.qkv(x).view(batch, length, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (b, h, n, d_h)
        q, k = positions.rotate(layer, q, k, state)
        implementation = self.implementation(output_attentions)
        if implementation == "flex_attention":
            from kolong.attention import flex

            flex.check_flex(q)
        plan = self.plan(q, mask, positions)
        dropout_p = self.dropout_p if self.training else 0.0
        call = AttentionCall(mask, dropout_p, self.options, positions, state)
        context, weights = attend(plan, q, k, v, call, layer)
        context = context.transpose(1, 2).reshape(batch, length, hidden)  # (b, n, d)
        return self.out(context), weights
