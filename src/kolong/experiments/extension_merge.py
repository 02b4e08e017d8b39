"""`kolong experiment extension-init --merge-from A,B`: one study from variants trained side by side.

Continued pre-training takes an hour or more per variant on CPU. Run as separate commands, one work
directory each (e.g. `--methods copy --no-control` in A and `--methods "" --control` in B, with the same
base, length, seed and blocks), the variants train in parallel; merging then takes every loss they stored
(they must have scored the same held-out blocks with the same masks) and links their models and corpora
into the target work directory, where the study reads them back instead of training again.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from kolong.io import atomic_write_bytes

LOSSES = "losses.npz"
LINKED = ("extended-", "continued-", "corpus-")  # what the study would otherwise rebuild or retrain


def merge_work_dirs(target: str | Path, sources: list[str | Path]) -> list[str]:
    """Merge the stored losses of `sources` (and of `target`, if it has some) into `target` and link their
    model and corpus directories there (links, not copies: keep the sources). Returns the merged names."""
    target, sources = Path(target), [Path(source) for source in sources]
    if (target / LOSSES).is_file() and target.resolve() not in {s.resolve() for s in sources}:
        sources = [target, *sources]
    merged: dict[str, np.ndarray] = {}
    blocks, first = None, None
    for source in sources:
        path = source / LOSSES
        if not path.is_file():
            raise ValueError(
                f"--merge-from {source}: no {LOSSES} there (run the study in that directory first)"
            )
        stored = dict(np.load(path))
        fingerprint = str(stored.pop("blocks", ""))
        if blocks is not None and fingerprint != blocks:
            raise ValueError(
                f"--merge-from {source}: it scored other held-out blocks or masks than {first} (another "
                "--length, --seed, --max-blocks, --review-blocks or base), so its losses do not compare"
            )
        blocks, first = fingerprint, first or source
        for name, losses in stored.items():
            if name in merged and not np.array_equal(merged[name], losses, equal_nan=True):  # NaN: unmasked
                raise ValueError(f"--merge-from {source}: its {name} losses differ from {first}'s")
            merged[name] = losses
    target.mkdir(parents=True, exist_ok=True)
    for source in sources:
        for entry in sorted(source.iterdir()):
            link = target / entry.name
            if (
                entry.is_dir()
                and entry.name.startswith(LINKED)
                and not link.exists()
                and not link.is_symlink()
            ):
                link.symlink_to(entry.resolve(), target_is_directory=True)
    with io.BytesIO() as buffer:
        np.savez_compressed(buffer, blocks=np.array(blocks), **merged)
        atomic_write_bytes(target / LOSSES, buffer.getvalue())
    return sorted(merged)
