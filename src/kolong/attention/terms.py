"""What a position scheme hands to the hand-written kernels (`ChunkBias`, `RegionTerms`), and what those kernels
share: a bias by distance alone read from its per-distance vector, the softmax backward, the dropout draws, and
the torch.profiler ranges that `kolong bench ... --profile` reports by name.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

PROFILER_PREFIX = "kolong: "


def labelled(name: str):
    """A torch.profiler range named PROFILER_PREFIX + NAME; none inside a compiled graph."""
    if torch.compiler.is_compiling():
        return contextlib.nullcontext()
    return torch.profiler.record_function(PROFILER_PREFIX + name)


# The keys a block of queries reads: all (None), one run of them (a `range`: sliced, no copy), or their positions.
Keys = range | torch.Tensor | None


class ChunkBias:
    """A relative-position term of the logits, built and differentiated one row block at a time. `tensors`: the
    inputs autograd tracks; the `*_grads` methods add into `grads`, zeros of their shapes (None: no gradient)."""

    tensors: tuple[torch.Tensor, ...] = ()
    has_values: bool = False  # Shaw's value term: O += reduce(P') W^V
    by_distance: bool = False  # the bias depends on j - i alone (`distances`)
    # the reductions take a block over one run of keys (a range) as it is, not the whole row
    key_runs: bool = False

    def scores(self, tensors, start: int, stop: int, length: int, keys: Keys = None) -> torch.Tensor:
        """Additive logits of query rows start..stop-1: (b|1, h, c, n), or at the `keys` only."""
        raise NotImplementedError

    def block(self, tensors, start: int, stop: int, length: int, shape, dtype, keys: Keys = None,
              shift: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """A new contiguous (b, h, c, n | keys) block of the logits of rows start..stop-1, less `shift` (b, h, c);
        the product q k^T is added into it."""
        bias = self.scores(tensors, start, stop, length, keys).to(dtype)
        if shift is None:
            return bias.expand(shape).contiguous()
        # into a contiguous tensor: an output of broadcast operands may take their strides
        return torch.sub(bias, shift[..., None].to(dtype), out=bias.new_empty(shape))

    def distances(self, tensors, distance: torch.Tensor, length: int) -> torch.Tensor:
        """`by_distance` schemes: the bias at key - query = `distance` (any shape): (h, *shape)."""
        raise NotImplementedError

    def score_grads(self, tensors, start: int, stop: int, d_scores: torch.Tensor, grads: list,
                    keys: range | None = None) -> None:  # fmt: skip
        """Add the gradient of the bias inputs, given dL/dS of the row block (b, h, c, n | keys)."""

    def values(
        self, tensors, start: int, stop: int, probs: torch.Tensor, keys: range | None = None
    ) -> torch.Tensor:
        """The value term of the row block: (b, h, c, d_h)."""
        raise NotImplementedError

    def value_grads(
        self, tensors, start, stop, probs, d_out, grads: list, keys: range | None = None
    ) -> torch.Tensor:
        """Add the value inputs' gradients; return the value term's part of dL/dP' (b, h, c, n | keys)."""
        raise NotImplementedError


@dataclass
class RegionTerms:
    """A bias in three regions (`sdpa_regions.py`): `reach` r; `left` and `right`, the edges' constants (b|1, h,
    n|1); `band` (b, h, n, 2r - 1), entry (i, r') the bias at j - i = r' - r + 1; for a value term, the value rows
    at the two edges (d_h,) and in the band (2r - 1, d_h)."""

    reach: int
    left: torch.Tensor
    band: torch.Tensor
    right: torch.Tensor
    value_left: torch.Tensor | None = None
    value_band: torch.Tensor | None = None
    value_right: torch.Tensor | None = None


def toeplitz_rows(per_distance: torch.Tensor, start: int, stop: int, length: int) -> torch.Tensor:
    """Rows start..stop-1 of the (h, n, n) bias whose entry (i, j) is per_distance[:, j - i + n - 1]: (h, c, n),
    contiguous and row-major (the `hankel_view` rows copied, then flipped: flipping the view itself ties two axes
    of stride 1, which flip breaks by laying the block out column-major)."""
    return hankel_view(per_distance, length, length)[0, :, start:stop].contiguous().flip(-1)


def hankel_view(per_distance: torch.Tensor, length: int, keys: int) -> torch.Tensor:
    """The (1, h, n, keys) bias between every query and the first `keys` keys in reverse order, as a strided view
    of the (h, 2n - 1) per-distance vector reversed: entry (i, j') is reverse[:, n - keys + i + j'], a Hankel
    matrix (strides 2n - 1, 1, 1), which SDPA's fused CPU kernel reads through its strides."""
    reverse = per_distance.contiguous().flip(-1)  # (h, 2n - 1), contiguous
    return reverse.as_strided(
        (1, reverse.shape[0], length, keys), (0, reverse.stride(0), 1, 1), length - keys
    )


def softmax_backward(probs: torch.Tensor, d_probs: torch.Tensor, row_sums: torch.Tensor) -> torch.Tensor:
    """dS = P (dP - D), D_i = sum_j P_ij dP_ij: the softmax backward of every hand-written one, in place on dP."""
    return d_probs.sub_(row_sums).mul_(probs)


def attention_dropout_mask(shape, p: float, device, generator=None) -> tuple[torch.Tensor, float]:
    """Which attention probabilities to drop, and the exact keep probability: 16-bit integers (cheaper on CPU than
    `bernoulli_`), p rounded to a multiple of 1/65536 and the rounded keep returned; compiled, floats against p."""
    if torch.compiler.is_compiling() and generator is None:
        # randint of a symbolic shape does not trace (torch 2.11-2.13); rand does, inside the kernel that uses it
        return torch.rand(shape, device=device) < p, 1.0 - p
    threshold = round(p * 65536)
    return _random_int16(shape, device, generator) < threshold - 32768, 1.0 - threshold / 65536


def _random_int16(shape, device, generator=None) -> torch.Tensor:
    """Uniform 16-bit integers of `shape`; on CPU four to a 64-bit draw (the generator's cost is per element)."""
    if torch.device(device).type != "cpu":
        return torch.randint(-32768, 32768, shape, dtype=torch.int16, device=device, generator=generator)
    count = math.prod(shape)
    words = torch.randint(-(2**63), 2**63 - 1, (-(-count // 4),), dtype=torch.int64, generator=generator)
    return words.view(torch.int16)[:count].view(shape)
