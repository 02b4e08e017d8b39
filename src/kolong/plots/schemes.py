"""Figures of position schemes by name: the encoding as a heatmap and position-to-position similarity.

Absolute schemes (sinusoidal, memn2n) draw their (length x dim) matrix and the dot products of its
rows, as the positional-encoding blog does; relative schemes draw what they add to attention:
ALiBi's bias for the first and last head, RoPE's rotation (cos of the angles) and the dot product of
a rotated constant vector with itself at positions i and j, Shaw's clipped-distance index and T5's
bucket index. Learned tables come from checkpoints (`kolong plot positions MODEL`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kolong.plots.figures import save_figure


def scheme_panels(
    scheme: str, length: int, dim: int, heads: int = 12, position_kwargs: dict | None = None
) -> list[tuple[str, np.ndarray, str, str]]:
    """(title, matrix, x label, y label) for each panel of `scheme`, as the scheme's own `panels` draws them."""
    from kolong.models import KolongConfig
    from kolong.positions import scheme_class

    cls = scheme_class(scheme)
    kwargs = dict(position_kwargs or {})
    config = KolongConfig(
        hidden_size=dim * heads if cls.per_head else dim,
        num_attention_heads=heads if cls.per_head else 1,
        num_hidden_layers=1,
        position_encoding=scheme,
        position_kwargs=kwargs,
    )
    panels = cls.panels(length, dim, heads, cls.check_kwargs(kwargs, config), config)
    if not panels:
        raise ValueError(
            f"scheme {scheme!r} has nothing to draw without a checkpoint (learned tables: pass a MODEL)"
        )
    return panels


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
    return save_figure(figure, output, dpi=110)


def plot_scheme(scheme: str, length: int, dim: int, output: str | Path, heads: int = 12,
                position_kwargs: dict | None = None) -> Path:  # fmt: skip
    return plot_panels(scheme_panels(scheme, length, dim, heads, position_kwargs), output)
