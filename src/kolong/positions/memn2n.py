"""MemN2N's multiplicative position encoding (Sukhbaatar et al. 2015, section 4.1).

    l_kj = (1 - j/J) - (k/d)(1 - 2j/J),    j = 1..J (tokens), k = 1..d (dimensions)

and token j's embedding becomes l_j * x_j (element-wise). J is each sequence's *true* length: the
number of real tokens in its attention mask, so the same sentence gets the same encoding however
much padding surrounds it. j counts real tokens from 1 (left padding is skipped); padding tokens
get l = 1 (their embeddings are left as they are, and attention masks them anyway).
"""

from __future__ import annotations

import torch

from kolong.positions.base import PositionEncoding, absolute_panels

KNOWLEDGE_REFUSAL = ("position_encoding='memn2n' weighs each token by its row's length and its count of real "
                     "tokens, which a sentence tree's branches change: K-BERT's soft positions need another scheme")  # fmt: skip


def memn2n_weights(real: torch.Tensor, dim: int) -> torch.Tensor:
    """(b, n) mask of real tokens -> (b, n, dim) weights l_kj."""
    real = real.to(torch.float64)
    j = torch.cumsum(real, dim=1)  # (b, n): 1..J over real tokens
    J = real.sum(dim=1, keepdim=True).clamp(min=1.0)  # (b, 1)
    k = torch.arange(1, dim + 1, dtype=torch.float64, device=real.device)  # (d,)
    ratio = (j / J)[..., None]  # (b, n, 1)
    weights = (1 - ratio) - (k / dim) * (1 - 2 * ratio)  # l_kj
    return torch.where(real[..., None].bool(), weights, torch.ones_like(weights))


class MemN2NPositions(PositionEncoding):
    name = "memn2n"
    absolute = True

    @classmethod
    def panels(cls, length, dim, heads, options, config):
        table = memn2n_weights(torch.ones(1, length), dim)[0].numpy()
        return absolute_panels(f"MemN2N l_kj (J = {length}, d = {dim})", table)

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        self.dim = config.embedding_size or config.hidden_size

    def packed_position_ids(self, positions, real):
        raise ValueError(
            "position_encoding='memn2n' weighs each position by the whole row's length, so packed documents "
            "(attention_mask with document numbers) would see the wrong lengths: pack with "
            "--packing concatenate or give one document per row"
        )

    def at_positions(self, state, position_ids):
        raise ValueError(KNOWLEDGE_REFUSAL)

    def forward(self, inputs_embeds, input_ids=None, position_ids=None, attention_mask=None):
        if attention_mask is None:
            attention_mask = torch.ones(inputs_embeds.shape[:2], device=inputs_embeds.device)
        weights = memn2n_weights(attention_mask, self.dim)  # (b, n, e)
        return inputs_embeds * weights.to(inputs_embeds.dtype)
