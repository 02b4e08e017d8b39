"""Figures of position schemes by name: the encoding as a heatmap and position-to-position similarity.

Absolute schemes (sinusoidal, memn2n) draw their (length x dim) matrix and the dot products of its
rows, as the positional-encoding blog does; relative schemes draw what they add to attention:
ALiBi's bias for the first and last head, RoPE's rotation (cos of the angles) and the dot product of
a rotated constant vector with itself at positions i and j, Shaw's clipped-distance index and T5's
bucket index. Learned tables come from checkpoints (`kolong plot positions MODEL`).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch

from kolong.io import atomic_write_bytes


def scheme_panels(
    scheme: str, length: int, dim: int, heads: int = 12, position_kwargs: dict | None = None
) -> list[tuple[str, np.ndarray, str, str]]:
    """(title, matrix, x label, y label) for each panel of `scheme`."""
    from kolong.models import KolongConfig
    from kolong.positions import (
        SCHEMES,
        alibi_slopes,
        clipped_distances,
        memn2n_weights,
        relative_position_bucket,
        sinusoid_table,
    )

    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of: {', '.join(SCHEMES)}")
    kwargs = dict(position_kwargs or {})
    config = KolongConfig(
        hidden_size=dim * heads if scheme in ("rope", "shaw") else dim,
        num_attention_heads=heads if scheme in ("rope", "shaw") else 1,
        num_hidden_layers=1,
        position_encoding=scheme,
        position_kwargs=kwargs,
    )
    options = SCHEMES[scheme].check_kwargs(kwargs, config)
    positions = torch.arange(length)
    if scheme == "sinusoidal":
        table = (sinusoid_table(positions, dim, options["base"]) * options["scale"]).numpy()
        return _absolute(f"sinusoidal PE (length {length}, d = {dim})", table)
    if scheme == "memn2n":
        table = memn2n_weights(torch.ones(1, length), dim)[0].numpy()
        return _absolute(f"MemN2N l_kj (J = {length}, d = {dim})", table)
    if scheme == "alibi":
        slopes = alibi_slopes(heads).numpy()
        distance = np.abs(np.arange(length)[None, :] - np.arange(length)[:, None])
        return [
            (f"ALiBi bias, head 1 (m = {slopes[0]:.3g})", -slopes[0] * distance, "key position j", "query position i"),
            (f"ALiBi bias, head {heads} (m = {slopes[-1]:.3g})", -slopes[-1] * distance, "key position j",
             "query position i"),
        ]  # fmt: skip
    if scheme == "rope":
        from kolong.positions import RotaryPositions

        rope = RotaryPositions(config, **kwargs)
        cos, sin = (part.numpy() for part in rope.prepare(length, "cpu", torch.float64))
        x = np.ones(dim) / np.sqrt(dim)
        rotated = x * cos + np.concatenate([-x[dim // 2 :], x[: dim // 2]]) * sin  # R_p x: (n, d)
        return [
            (f"RoPE cos(p * theta_i) (d_head = {dim})", cos, "dimension", "position"),
            ("RoPE <R_i x, R_j x> for a constant x", rotated @ rotated.T, "position j", "position i"),
        ]
    if scheme == "shaw":
        index = clipped_distances(length, options["max_distance"]).numpy() - options["max_distance"]
        return [
            (f"Shaw clip(j - i, k = {options['max_distance']})", index, "key position j", "query position i")
        ]
    if scheme == "t5":
        relative = positions[None, :] - positions[:, None]
        buckets = relative_position_bucket(relative, options["num_buckets"], options["max_distance"]).numpy()
        return [
            (f"T5 bucket of j - i ({options['num_buckets']} buckets, max distance {options['max_distance']})",
             buckets, "key position j", "query position i"),
        ]  # fmt: skip
    raise ValueError(
        f"scheme {scheme!r} has nothing to draw without a checkpoint (learned tables: pass a MODEL)"
    )


def _absolute(title: str, table: np.ndarray) -> list[tuple[str, np.ndarray, str, str]]:
    return [
        (title, table, "dimension", "position"),
        ("dot product of position vectors", table @ table.T, "position j", "position i"),
    ]


def plot_panels(panels: list[tuple[str, np.ndarray, str, str]], output: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(panels), figsize=(5.8 * len(panels), 5), squeeze=False)
    for axis, (title, matrix, xlabel, ylabel) in zip(axes[0], panels, strict=True):
        image = axis.imshow(matrix, cmap="RdBu_r" if matrix.min() < 0 else "viridis", aspect="auto",
                            interpolation="nearest")  # fmt: skip
        axis.set_title(title, fontsize=10)
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        figure.colorbar(image, ax=axis, fraction=0.046)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format=Path(output).suffix.lstrip(".").lower() or "png", dpi=110)
    plt.close(figure)
    return atomic_write_bytes(output, buffer.getvalue())


def plot_scheme(scheme: str, length: int, dim: int, output: str | Path, heads: int = 12,
                position_kwargs: dict | None = None) -> Path:  # fmt: skip
    return plot_panels(scheme_panels(scheme, length, dim, heads, position_kwargs), output)
