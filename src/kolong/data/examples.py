"""The example type of sentence and sentence-pair tasks (classification and regression), shared by the
readers of KLUE-NLI / KLUE-STS (`data/klue.py`), KorNLI / KorSTS (`data/kornlu.py`), NSMC and label files.
"""

from __future__ import annotations

from dataclasses import dataclass

NLI_LABELS = ("entailment", "neutral", "contradiction")


@dataclass
class Example:
    text: str
    label: int | float  # a class index, or a score for regression
    pair: str | None = None
    id: str = ""
