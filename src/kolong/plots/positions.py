"""Figures of position tables: PCA curves (the extension paper's Figure 1) and cosine-similarity heatmaps."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kolong.plots.figures import save_figure

HEATMAP_MAX_ROWS = 1024


def pca_basis(rows: np.ndarray, components: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, the top principal directions (components, d) and their explained-variance ratios."""
    mean = rows.mean(axis=0)
    _, singular, directions = np.linalg.svd(rows - mean, full_matrices=False)
    variance = singular**2
    components = min(components, directions.shape[0])
    # Fix each direction's sign so the plots do not flip between runs or tables.
    signs = np.sign(directions[:components, np.abs(directions[:components]).argmax(axis=1)].diagonal())
    signs[signs == 0] = 1
    return mean, directions[:components] * signs[:, None], variance[:components] / variance.sum()


def cosine_similarity_matrix(rows: np.ndarray) -> np.ndarray:
    unit = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return unit @ unit.T


def plot_position_tables(
    tables: list[tuple[str, np.ndarray]], output: str | Path, components: int = 3
) -> Path:
    """One column per table: PCA components against position, cosine similarity, the table as a heatmap.

    All tables are projected on the principal directions of the *first* table, so an extended table
    whose rows keep the original distribution draws the same curves, stretched along the position axis.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mean, directions, explained = pca_basis(tables[0][1], components)
    figure, axes = plt.subplots(3, len(tables), figsize=(5.5 * len(tables), 13), squeeze=False)
    for column, (label, rows) in enumerate(tables):
        projected = (rows - mean) @ directions.T  # (n, components)
        curves = axes[0, column]
        for index in range(projected.shape[1]):
            curves.plot(projected[:, index], label=f"PC{index + 1} ({explained[index]:.0%} of table 1)", lw=1)
        curves.set_title(f"{label}\n{rows.shape[0]} positions x {rows.shape[1]} dims", fontsize=10)
        curves.set_xlabel("position")
        curves.set_ylabel("projection")
        curves.legend(fontsize=8)

        stride = max(1, -(-rows.shape[0] // HEATMAP_MAX_ROWS))
        sampled = rows[::stride]
        heatmap = axes[1, column].imshow(
            cosine_similarity_matrix(sampled),
            cmap="viridis",
            vmin=-1,
            vmax=1,
            extent=(0, rows.shape[0], rows.shape[0], 0),
            interpolation="nearest",
        )
        title = "cosine similarity of position vectors"
        if stride > 1:
            title += f" (one row in {stride})"
        axes[1, column].set_title(title, fontsize=10)
        axes[1, column].set_xlabel("position")
        axes[1, column].set_ylabel("position")
        figure.colorbar(heatmap, ax=axes[1, column], fraction=0.046)

        # The table itself (positions x dimensions), as the blog draws encoding matrices.
        matrix = axes[2, column].imshow(sampled, cmap="RdBu_r", aspect="auto", interpolation="nearest",
                                        extent=(0, rows.shape[1], rows.shape[0], 0))  # fmt: skip
        axes[2, column].set_title("position table", fontsize=10)
        axes[2, column].set_xlabel("dimension")
        axes[2, column].set_ylabel("position")
        figure.colorbar(matrix, ax=axes[2, column], fraction=0.046)
    return save_figure(figure, output, dpi=110)


def position_rows_of(model_or_path: str) -> tuple[str, np.ndarray]:
    """The real rows (offset rows of RoBERTa-family tables dropped) of a checkpoint's learned table."""
    from kolong.checkpoints import load_model
    from kolong.extension import find_position_table

    model = load_model(model_or_path)
    table = find_position_table(model)
    label = Path(str(model_or_path)).name or str(model_or_path)
    return label, table.real_rows().float().cpu().numpy()
