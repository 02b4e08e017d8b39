"""Every call of PyTorch's `scaled_dot_product_attention` from kolong's kernels, made safe on CUDA.

Two defects of the cuDNN backend, which CUDA builds of torch put first on sm90 (Hopper):

- a float mask of another dtype than the queries (a float32 bias with bf16 queries) is described to cuDNN in
  the queries' dtype and read element by element as such: wrong outputs and gradients, no error
  (pytorch/pytorch#191612). kolong casts every float mask to the queries' dtype first; boolean masks pass as
  they are.
- with any explicit mask, cuDNN's backward returns NaN in dq when the length is 64 more than a multiple of
  128 and a query row's log-sum-exp is below about -88.7 (pytorch/pytorch#196678, a regression from torch
  2.11). kolong leaves cuDNN out of the backends tried for a masked call that builds a graph for the backward,
  from `CUDNN_MASK_BACKWARD_FROM` on (docs/compatibility.md says which releases are known to carry it).
  FlashAttention takes no mask, so such a call runs the memory-efficient kernel, which is exact here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# The first torch release whose cuDNN SDPA backward has the masked-tile NaN; no fixed release is known, so
# every release from it on avoids cuDNN for masked calls that train (docs/compatibility.md).
CUDNN_MASK_BACKWARD_FROM = (2, 11)


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a torch version string such as "2.13.0+cpu"."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


# Read once: a compiled model traces `sdpa`, and the version's string never changes in a process.
RELEASE = release(torch.__version__)


def avoid_cudnn(
    q: torch.Tensor, attn_mask: torch.Tensor | None, torch_release: tuple[int, int] = RELEASE
) -> bool:
    """Whether this call must not run cuDNN: on CUDA, with a mask, building a graph for the backward, on an
    affected torch release."""
    if q.device.type != "cuda" or attn_mask is None:
        return False
    if not (torch.is_grad_enabled() and q.requires_grad):
        return False
    return torch_release >= CUDNN_MASK_BACKWARD_FROM


def mask_for(q: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor | None:
    """`attn_mask` as SDPA must read it: a float mask in q's dtype, a boolean mask as it is."""
    if attn_mask is not None and attn_mask.is_floating_point() and attn_mask.dtype != q.dtype:
        return attn_mask.to(q.dtype)
    return attn_mask


def sdpa(q, k, v, attn_mask=None, dropout_p: float = 0.0, scale: float | None = None) -> torch.Tensor:
    """`F.scaled_dot_product_attention` with the mask cast and cuDNN left out where it is unsafe."""
    attn_mask = mask_for(q, attn_mask)
    if not avoid_cudnn(q, attn_mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)
