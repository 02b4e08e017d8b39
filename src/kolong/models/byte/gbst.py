"""GBST, gradient-based subword tokenisation (Tay et al. 2022, "Charformer", section 2).

GBST turns a sequence of byte embeddings into a shorter sequence of soft "subword" vectors:

1. a depthwise 1-D convolution mixes each byte with its neighbours, which lets blocks see past their own
   boundaries (the paper's cheap substitute for enumerating every block offset, section 2.1.1);
2. for each candidate block size b, the sequence is cut into non-overlapping blocks of b bytes and each
   block is represented by the mean of its bytes (eq. 1, F = strided mean pooling);
3. a linear map scores each block, p_{b,i} = F_R(X_{b,i}), and each byte receives its block's score (eq. 2);
4. at each byte, a softmax over the block sizes gives P_i (eq. 3); optionally, position-wise score
   consensus recalibrates the scores with an attention over positions, P' = softmax(P P^T) P (eq. 4);
5. each byte becomes the score-weighted sum of the representations of its blocks, X^_i = sum_b P_{b,i} X_{b,i}
   (eq. 5);
6. mean pooling with stride `rate` shortens the sequence (eq. 6), and the attention mask is pooled the
   same way (a group is real when it holds at least one real byte).

Padding never leaks into real positions: padded bytes are zeroed before the convolution (which also
zero-pads beyond the ends), block means and the final pooling average real bytes only, and the consensus
attends to real positions only. So the outputs at real positions do not depend on the padding bytes nor on
how much padding follows, and no sequence is padded to the least common multiple of the block sizes: each
block size pads (with masked zeros) only what it needs. See docs/byte.md for how this differs from
lucidrains' charformer-pytorch and ETRI's gbswt5.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class GBST(nn.Module):
    """Charformer's GBST with mean-pooling downsampling; `forward(x, mask) -> (shorter x, shorter mask)`."""

    def __init__(
        self,
        hidden_size: int,
        blocks: list[tuple[int, int]] = ((1, 0), (2, 0), (3, 0), (6, 0), (9, 0)),
        downsample_rate: int = 3,
        score_consensus: bool = True,
        conv_kernel_size: int | None = None,
        initializer_factor: float = 1.0,
    ):
        super().__init__()
        self.blocks = [(int(size), int(offset)) for size, offset in blocks]
        self.downsample_rate = downsample_rate
        self.score_consensus = score_consensus
        self.kernel_size = conv_kernel_size or max(size for size, _ in self.blocks)
        # Depthwise convolution + pointwise projection (a 1x1 convolution written as a Linear).
        self.conv = nn.Conv1d(hidden_size, hidden_size, self.kernel_size, groups=hidden_size)
        self.proj = nn.Linear(hidden_size, hidden_size)
        self.score = nn.Linear(hidden_size, 1)  # F_R: R^d -> R, the block scoring network
        # How transformers' initialisation (and `init_weights`) starts them: see `init_weights`.
        self.conv.init_identity = self.proj.init_identity = True
        self.score.init_std = initializer_factor * hidden_size**-0.5

    @torch.no_grad()
    def init_weights(self) -> None:
        """Identity convolution and projection, small random scores: a fresh GBST starts from block means."""
        nn.init.dirac_(self.conv.weight, groups=self.conv.groups)  # 1 at the centre tap k // 2
        nn.init.zeros_(self.conv.bias)
        nn.init.eye_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)
        nn.init.normal_(self.score.weight, mean=0.0, std=self.score.init_std)
        nn.init.zeros_(self.score.bias)

    def output_length(self, length: int) -> int:
        return math.ceil(length / self.downsample_rate)

    def downsample_mask(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """(b, n) 0/1 mask -> (b, ceil(n / rate)) bool: a group is real when any of its bytes is."""
        mask = attention_mask.bool()
        pad = (-mask.shape[1]) % self.downsample_rate
        mask = F.pad(mask, (0, pad), value=False)  # (b, r * n')
        return mask.view(mask.shape[0], -1, self.downsample_rate).any(dim=-1)  # (b, n')

    def forward(
        self, x: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length, hidden = x.shape  # x: (b, n, d) byte embeddings
        if attention_mask is None:
            mask = torch.ones(batch, length, dtype=torch.bool, device=x.device)
        else:
            mask = attention_mask.bool()
        padding = ~mask[..., None]  # (b, n, 1)
        real = mask[..., None].to(x.dtype)  # (b, n, 1)
        x = x.masked_fill(padding, 0.0)  # padding bytes contribute nothing from here on

        # 1. soft offsets: a centred depthwise convolution, zero beyond the ends (section 2.1.1)
        h = self.proj(self._depthwise_conv(x)).masked_fill(padding, 0.0)  # (b, n, d), zero at padding

        # 2-3. candidate blocks: X_{b,i} = mean of the block holding byte i (eq. 1), p_{b,i} = F_R(X_{b,i}) (eq. 2)
        block_means, scores = [], []
        for size, offset in self.blocks:
            means = _block_means(h, real, size, offset)  # (b, n_b, d)
            block_means.append(means)
            scores.append(_to_bytes(self.score(means), size, offset, length))  # (b, n, 1)
        # 4. P_i = softmax over the M block sizes (eq. 3)
        p = torch.cat(scores, dim=-1).softmax(dim=-1)  # (b, n, M)
        if self.score_consensus:
            # P' = softmax(P P^T) P over real positions (eq. 4); a sequence with no real byte attends to all
            # its positions so that its (ignored) rows stay finite.
            keys = mask | ~mask.any(dim=1, keepdim=True)  # (b, n)
            # Zero columns up to a multiple of 8 leave every P P^T entry and the first M output columns as they
            # are; CUDA's memory-efficient kernel needs 16-bit widths divisible by 8 and would otherwise fall
            # back to the math path, which materialises the (b, n, n) weights.
            width = p.shape[-1]
            padded = F.pad(p, (0, -width % 8))[:, None]  # (b, 1, n, 8k)
            p = F.scaled_dot_product_attention(
                padded, padded, padded, attn_mask=keys[:, None, None, :], scale=1.0
            )[:, 0, :, :width]  # (b, n, M)
        # 5. X^_i = sum_b P_{b,i} X_{b,i} (eq. 5), one block size at a time (no (b, n, M, d) tensor)
        x = torch.zeros_like(h)
        for m, ((size, offset), means) in enumerate(zip(self.blocks, block_means, strict=True)):
            x = x + p[..., m : m + 1] * _to_bytes(means, size, offset, length)  # (b, n, d)
        x = x.masked_fill(padding, 0.0)

        # 6. mean-pool groups of `rate` bytes over real bytes only (eq. 6)
        rate = self.downsample_rate
        pad = (-length) % rate
        sums = F.pad(x, (0, 0, 0, pad)).view(batch, -1, rate, hidden).sum(dim=2)  # (b, n', d)
        counts = F.pad(real, (0, 0, 0, pad)).view(batch, -1, rate, 1).sum(dim=2)  # (b, n', 1)
        pooled = sums / counts.clamp(min=1.0)  # (b, n', d); fully padded groups stay 0
        return pooled, counts[..., 0] > 0

    def _depthwise_conv(self, x: torch.Tensor) -> torch.Tensor:
        """`self.conv` with "same" zero padding, as k shifted multiply-adds in (b, n, d) layout.

        Same result as `self.conv` on the transposed input. With several threads on a busy CPU, PyTorch's
        depthwise `Conv1d` backward stalls, where these products do not.
        """
        length, k = x.shape[1], self.kernel_size
        left = k // 2
        padded = F.pad(x, (0, 0, left, k - 1 - left))  # (b, n + k - 1, d)
        weight = self.conv.weight[:, 0, :]  # (d, k)
        out = self.conv.bias + padded[:, :length] * weight[:, 0]
        for t in range(1, k):
            out = out + padded[:, t : t + length] * weight[:, t]  # (b, n, d)
        return out


def _block_means(h, real, size: int, offset: int):
    """Mean of the real bytes of each block; blocks start at positions offset + j * size (and 0)."""
    batch, length, hidden = h.shape
    left = (size - offset) % size  # masked zeros before position 0 so that a block starts at `offset`
    right = (-(left + length)) % size
    sums = F.pad(h, (0, 0, left, right)).view(batch, -1, size, hidden).sum(dim=2)  # (b, n_b, d)
    counts = F.pad(real, (0, 0, left, right)).view(batch, -1, size, 1).sum(dim=2)  # (b, n_b, 1)
    return sums / counts.clamp(min=1.0)


def _to_bytes(per_block: torch.Tensor, size: int, offset: int, length: int) -> torch.Tensor:
    """(b, n_b, c) -> (b, n, c): every byte gets the value of its block."""
    batch, blocks, channels = per_block.shape
    left = (size - offset) % size
    expanded = per_block[:, :, None, :].expand(batch, blocks, size, channels)  # (b, n_b, size, c)
    return expanded.reshape(batch, blocks * size, channels)[:, left : left + length]
