"""Resumable experiment stages: each stage's result is stored as JSON when it ends and read back on reruns."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from kolong.io import atomic_write_json


def run_stage(path: str | Path, make: Callable[[], dict]) -> dict:
    """`make()` once: its result is written to `path` (unless it says ``"finished": False``) and read back later."""
    path = Path(path)
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    result = make()
    if result.get("finished", True):
        atomic_write_json(path, result)
    return result
