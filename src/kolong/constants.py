"""Names kolong writes into files that other tools read back: shared by writers and readers, imports nothing."""

from __future__ import annotations

POSITION_SCALING_KEY = "kolong_position_scaling"  # config.json entry of keep-short checkpoints
