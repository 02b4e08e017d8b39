"""Writing a matplotlib figure: rendered in memory, written atomically, closed."""

from __future__ import annotations

import io
from pathlib import Path


def save_figure(figure, path: str | Path, dpi: int = 100) -> Path:
    """Lay out `figure`, write it to `path` atomically (format from the suffix, PNG without one), close it."""
    import matplotlib.pyplot as plt

    from kolong.io import atomic_write_bytes

    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format=Path(path).suffix.lstrip(".").lower() or "png", dpi=dpi)
    plt.close(figure)
    return atomic_write_bytes(path, buffer.getvalue())
