"""Resumable experiment stages: each stage's result is stored as JSON when it ends and read back on reruns;
a `Deadline` (`--max-minutes`) stops the call's training runs at a checkpoint so a rerun resumes them."""

from __future__ import annotations

import json
import time
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


def stopped_message(stage: str) -> str:
    return f"stopped by --max-minutes during {stage}: run the same command to resume"


class StoppedByDeadline(Exception):
    """A training run stopped at a checkpoint because the call's `--max-minutes` ran out; rerun to resume."""

    def __init__(self, stage: str) -> None:
        super().__init__(stopped_message(stage))
        self.stage = stage


class Deadline:
    """One time limit for a whole call, shared by every training run it starts (0 minutes: none).

    Each run gets a Trainer callback for the minutes left (`callbacks()`): past the limit it saves a
    checkpoint and stops after the current step, so every call trains at least one step and a rerun resumes
    from there. `check(stage)` raises `StoppedByDeadline` once a run was stopped that way."""

    def __init__(self, minutes: float) -> None:
        self.seconds = minutes * 60
        self.started = time.monotonic()
        self._budgets: list = []

    def callbacks(self) -> list:
        if not self.seconds:
            return []
        from kolong.training.common import time_budget

        self._budgets.append(time_budget(max(0.0, self.seconds - (time.monotonic() - self.started))))
        return [self._budgets[-1]]

    @property
    def stopped(self) -> bool:
        return any(budget.stopped for budget in self._budgets)

    def check(self, stage: str) -> None:
        if self.stopped:
            raise StoppedByDeadline(stage)


def fresh_start(output_dir: str | Path) -> bool:
    """The `overwrite` of a stage's own training directory: start afresh unless an earlier call (stopped by its
    deadline or killed) left a checkpoint there to resume from."""
    return not any(Path(output_dir).glob("checkpoint-*"))
