"""Every call of PyTorch's `scaled_dot_product_attention` from kolong's kernels, made safe on CUDA against two
defects of the cuDNN backend (first on sm90, Hopper):

- a float mask of another dtype than the queries is read as if in the queries' dtype: wrong, silently
  (pytorch/pytorch#191612). Float masks are cast to the queries' dtype first.
- with a mask, its backward returns NaN in dq at lengths 64 past a multiple of 128 where a row's log-sum-exp is
  below about -88.7 (pytorch/pytorch#196678: torch 2.11 and later with cuDNN before 9.26). A masked call that
  trains there leaves cuDNN out and runs the memory-efficient kernel (docs/compatibility.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# The first torch release with the masked-tile NaN, and the first cuDNN without it (docs/compatibility.md).
CUDNN_MASK_BACKWARD_FROM = (2, 11)
CUDNN_MASK_BACKWARD_FIXED = 92600  # 9.26.0, as torch.backends.cudnn.version() reads it


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a torch version string such as "2.13.0+cpu"."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


# Read once: a compiled model traces `sdpa`, and neither version changes in a process.
RELEASE = release(torch.__version__)


def cudnn_version() -> int | None:
    """The loaded cuDNN's version as torch reads it (9.26.0 -> 92600), or None: none, or one torch refuses."""
    try:
        return torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except RuntimeError:  # a runtime of another major version than torch's build: cuDNN will not run either
        return None


CUDNN = cudnn_version()


def avoid_cudnn(q: torch.Tensor, attn_mask: torch.Tensor | None, torch_release: tuple[int, int] = RELEASE,
                cudnn: int | None = CUDNN) -> bool:  # fmt: skip
    """This call must not run cuDNN: on CUDA, masked, building a graph for the backward, on an affected torch
    release with a cuDNN before the fix (or none known)."""
    if q.device.type != "cuda" or attn_mask is None:
        return False
    if not (torch.is_grad_enabled() and q.requires_grad):
        return False
    return torch_release >= CUDNN_MASK_BACKWARD_FROM and (cudnn is None or cudnn < CUDNN_MASK_BACKWARD_FIXED)


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
