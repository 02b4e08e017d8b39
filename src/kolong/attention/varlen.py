"""Packed documents through FlashAttention's variable-length kernel: the scores inside each document only.

Under SDPA a row of packed documents is attended with a dense (b, 1, n, n) mask: every score is computed,
most are then masked (NSMC's reviews packed into rows of 2,048 leave about one score in 200 allowed).
FlashAttention's variable-length kernel takes the packed tokens as one
(total, h, d) sequence cut into segments at the cumulative lengths `cu_seq_lens` and computes each
segment's scores alone, attention dropout included, forward and backward: ModernBERT's unpadding, with the
kernel PyTorch ships (`aten._flash_attention_forward`, behind its nested-tensor SDPA), no flash-attn needed.

The segments come from the collator, which packs on the host (`segments_of`): `cu_seq_lens`, int32 (C + 1),
and the longest segment's length (at least 2) as the size of `longest_document`, an empty (L, 0) tensor
(no bytes to copy): the kernel needs that length as an int, and a host read of it would wait for the GPU.
Both change with every batch; marked dynamic where batches reach the device (`mark_dynamic`), they let one
compiled graph serve every batch. Each row's padding is a segment of its own, whose outputs nothing reads.

On CUDA with 16-bit q, k, v (bf16 autocast) and heads of at most 256 (a multiple of 8), for schemes without a
logit bias and without a local window, with the run-time option `packed_varlen`: opt-in, because each document takes whole tiles, so short documents
gain nothing over the dense mask (docs/pretraining.md has the measurement).
"""

from __future__ import annotations

import itertools

import torch

KEYS = ("cu_seq_lens", "longest_document")


def segments_of(attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """The segments of a (b, n) mask of document numbers (0 = padding), row by row: cumulative lengths over
    the b x n tokens and the longest segment's length (at least 2) as the size of an empty tensor (`KEYS`)."""
    b, n = attention_mask.shape
    flat = attention_mask.reshape(-1)
    starts = torch.ones_like(flat, dtype=torch.bool)
    starts[1:] = flat[1:] != flat[:-1]
    starts[::n] = True  # a new row starts a new segment, even with the same document number
    cuts = torch.cat([torch.nonzero(starts).squeeze(1), torch.tensor([b * n])])
    # at least 2: the kernel takes it as a bound (its grid), and 1 is a size dynamo specialises, so a batch
    # of one-token documents alone would compile the model once more
    longest = max(2, int((cuts[1:] - cuts[:-1]).max()))
    return {
        "cu_seq_lens": cuts.to(torch.int32),
        "longest_document": torch.empty(longest, 0, dtype=torch.uint8),
    }


def mark_dynamic(batch: dict) -> dict:
    """Mark the segments of a batch on its device dynamic for torch.compile: their sizes change every batch,
    and a compiled model would otherwise compile again for each (kolong compiles with static shapes)."""
    for key in KEYS:
        value = batch.get(key)
        if isinstance(value, torch.Tensor) and value.shape[0] > 1:  # 2 or more (`segments_of`)
            torch._dynamo.mark_dynamic(value, 0)
    return batch


def flash_kernel(q, k, v, cu_seq_lens, longest: int, dropout_p: float, scale: float) -> torch.Tensor:
    """(total, h, d) q, k, v -> (total, h, d): each segment attends within itself (FlashAttention 2)."""
    return torch.ops.aten._flash_attention_forward(
        q, k, v, cu_seq_lens, cu_seq_lens, longest, longest, dropout_p, False, False, scale=scale
    )[0]


def reference_kernel(q, k, v, cu_seq_lens, longest: int, dropout_p: float, scale: float) -> torch.Tensor:
    """`flash_kernel`'s result on any device, segment by segment (tests; no dropout)."""
    if dropout_p:
        raise ValueError("the reference kernel has no dropout")
    bounds = cu_seq_lens.tolist()
    outputs = []
    for start, stop in itertools.pairwise(bounds):
        if stop - start > longest:
            raise ValueError(f"segment {start}:{stop} is longer than the longest given ({longest})")
        part = [t[start:stop].transpose(0, 1) for t in (q, k, v)]  # (h, len, d)
        outputs.append(torch.nn.functional.scaled_dot_product_attention(*part, scale=scale).transpose(0, 1))
    return torch.cat(outputs)


def attend(
    q, k, v, segments: tuple[torch.Tensor, torch.Tensor], dropout_p: float, kernel=None
) -> torch.Tensor:
    """(b, h, n, d) q, k, v of packed rows -> (b, h, n, d) context, each segment attending within itself;
    `kernel`: `flash_kernel` unless given."""
    b, h, n, d = q.shape
    cu_seq_lens, longest = segments
    # (b, h, n, d) -> (b n, h, d): a view of the projection's (b, n, 3, h, d) output, rows strided
    tokens = [t.transpose(1, 2).reshape(b * n, h, t.shape[-1]) for t in (q, k, v)]
    context = (kernel or flash_kernel)(
        *tokens, cu_seq_lens, longest.shape[0], dropout_p, d**-0.5
    )  # (b n, h, d)
    return context.view(b, n, h, -1).transpose(1, 2)
