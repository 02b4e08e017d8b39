"""The example type of sentence and sentence-pair tasks (classification and regression), shared by the
readers of KLUE-NLI / KLUE-STS (`data/klue.py`), KorNLI / KorSTS (`data/kornlu.py`), NSMC and label files.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kolong.errors import DataError

NLI_LABELS = ("entailment", "neutral", "contradiction")


@dataclass
class Example:
    text: str
    label: int | float  # a class index, or a score for regression
    pair: str | None = None
    id: str = ""


def hold_out(items: list, fraction: float, seed: int) -> tuple[list, list]:
    """(kept, held out): a seeded shuffle, then `fraction` of the items (at least one) held out for evaluation."""
    if not 0.0 < fraction < 1.0:
        raise DataError(f"--eval-fraction must be between 0 and 1, got {fraction}")
    shuffled = items[:]
    random.Random(seed).shuffle(shuffled)
    held = max(1, round(len(shuffled) * fraction))
    if held >= len(shuffled):
        raise DataError(
            f"--eval-fraction {fraction} of {len(shuffled)} training items holds out {held}, leaving none to train "
            "on: lower it, or pass evaluation data with --eval"
        )
    return shuffled[held:], shuffled[:held]
