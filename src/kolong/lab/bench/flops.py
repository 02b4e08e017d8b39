"""The one FLOP count and the one MFU of every `kolong bench`: the work the model's math requires.

    training:   6 N T + 6 N_head P + 12 L d A       (FLOPs of one step)
    inference:  2 N T + 2 N_head P +  4 L d A       (FLOPs of one forward call)
    MFU = FLOPs / seconds / the device's dense peak at the dtype

T: tokens that are not padding. N: the parameters that multiply every token, the layers' weight matrices
(embeddings excluded: a lookup multiplies nothing). N_head, P: a prediction head's weights and the positions
it scores (a sparse MLM head scores the labelled positions; a dense head, HF's, every token). L layers of
width d. A: the key-query pairs the attention mask allows. A forward pass spends 2 FLOPs per weight per token
(Kaplan et al. 2020) and 4 d per pair and layer (q.k and p.v); the backward twice the forward (PaLM, app. B).

A pair the mask forbids counts for nothing, whatever a kernel does with it: padding, the pairs between
packed documents, the pairs outside a local window. So a kernel that computes whole rows and throws most
away is not credited for the waste, and one that skips blocks is not credited for what it skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

# Dense (not 2:4 sparse) peak FLOP/s of known GPUs by dtype, in TFLOP/s; `--peak-tflops` covers any other.
PEAK_TFLOPS = {
    "H100": {"bf16": 989.4, "fp32": 494.7},  # SXM: fp32 through TF32 tensor cores
    "H200": {"bf16": 989.4, "fp32": 494.7},
    "A100": {"bf16": 312.0, "fp32": 156.0},
    "L4": {"bf16": 121.0, "fp32": 60.0},
}


def layer_weights(hidden: int, intermediate: int, gated: bool = False) -> int:
    """Weights of one encoder layer that multiply every token: q, k, v, output (4 d^2) and the FFN."""
    return 4 * hidden * hidden + (3 if gated else 2) * hidden * intermediate


def mlm_head_weights(hidden: int, vocab: int) -> int:
    """BERT's prediction head: the d x d transform and the d x V decoder."""
    return hidden * hidden + hidden * vocab


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one model: `weights` (N) and `layers` x `hidden` for attention; a head's weights apart."""

    weights: int
    layers: int
    hidden: int
    head_weights: int = 0

    @classmethod
    def encoder(cls, hidden: int, layers: int, intermediate: int, vocab: int | None = None) -> FlopCount:
        head = mlm_head_weights(hidden, vocab) if vocab else 0
        return cls(layers * layer_weights(hidden, intermediate), layers, hidden, head)

    def forward(self, tokens: float, pairs: float, head_positions: float = 0.0) -> float:
        return (
            2 * self.weights * tokens
            + 2 * self.head_weights * head_positions
            + 4 * self.layers * self.hidden * pairs
        )

    def training(self, tokens: float, pairs: float, head_positions: float = 0.0) -> float:
        return 3 * self.forward(tokens, pairs, head_positions)

    def of(self, mode: str, tokens: float, pairs: float, head_positions: float = 0.0) -> float:
        """`mode` training or inference."""
        if mode not in ("training", "inference"):
            raise ValueError(f"mode must be training or inference, got {mode!r}")
        step = self.training if mode == "training" else self.forward
        return step(tokens, pairs, head_positions)


def mfu(flops: float, seconds: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation: the count above done in `seconds`, against `peak` FLOP/s (None: unknown)."""
    return flops / seconds / peak if peak and seconds > 0 else None


def gpu_peak_flops(gpu: str, dtype: str) -> float | None:
    """FLOP/s at the dtype's dense peak of a GPU known by name (`torch.cuda.get_device_name`), else None."""
    for key, peaks in PEAK_TFLOPS.items():
        if key in gpu:
            return peaks[dtype] * 1e12
    return None


def device_peak_flops(device: str, dtype: str, peak_tflops: float | None = None) -> float | None:
    """FLOP/s at the dtype's dense peak: `peak_tflops` if given, else the known GPU's, else None (a CPU)."""
    if peak_tflops:
        return peak_tflops * 1e12
    if not device.startswith("cuda"):
        return None
    import torch

    return gpu_peak_flops(torch.cuda.get_device_name(0), dtype)


def document_pairs(lengths) -> int:
    """Pairs inside packed documents of these lengths: each attends to itself only."""
    return sum(int(n) * int(n) for n in lengths)


def allowed_pairs(mask, batch: int, length: int, rows_per_call: int = 1024) -> int:
    """Key-query pairs a `kolong.attention.masks.AttentionMask` allows over a (batch, length) input,
    queries at padding left out (their outputs are never read). Counted a block of query rows at a time
    from the mask's own `rows`, so that 16k tokens never build an (n, n) tensor."""
    import torch

    if mask is None or mask.empty:
        return batch * length * length
    real = (
        mask.real if mask.real is not None else (mask.documents != 0 if mask.documents is not None else None)
    )
    total = 0
    for start in range(0, length, rows_per_call):
        stop = min(length, start + rows_per_call)
        allowed = mask.rows(start, stop, length, "cpu")  # (b|1, 1, c|1, n)
        allowed = torch.ones(1, 1, 1, length, dtype=torch.bool) if allowed is None else allowed
        allowed = allowed.expand(batch, 1, stop - start, length)
        if real is not None:
            allowed = allowed & real[:, None, start:stop, None]
        total += int(allowed.sum())
    return total
