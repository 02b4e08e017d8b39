"""Trainer callbacks that guard a run: a diverged run stops, and Ctrl-C (or a job's SIGTERM) stops at a
checkpoint the same command resumes from."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import sys
import threading
from pathlib import Path

from kolong.errors import InterruptedRunError, TrainingDivergedError


def announce(message: str) -> None:
    """A line for the user on stderr, from the main process only (stdout stays the results)."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(message, file=sys.stderr, flush=True)


def _last_checkpoint(output_dir: str) -> str | None:
    kept = [p.name for p in Path(output_dir).glob("checkpoint-*") if p.is_dir() and p.name[11:].isdigit()]
    return max(kept, key=lambda name: int(name[11:]), default=None)


def stop_on_non_finite():
    """A Trainer callback that stops a diverged run: a logged loss or gradient norm that is not finite (HF's
    `logging_nan_inf_filter` hides NaN losses from the log, not from the gradient norm), or weights that are
    not, found when a checkpoint is written (that checkpoint is removed: the last one left holds finite
    weights). Raises `TrainingDivergedError` naming the step and what to change."""
    import torch
    from transformers import TrainerCallback

    def diverged(args, state, what: str):
        dtype = "fp16" if args.fp16 else "bf16" if args.bf16 else "fp32"
        last = _last_checkpoint(args.output_dir)
        raise TrainingDivergedError(
            f"training diverged at step {state.global_step} ({what}): lower --learning-rate (now "
            f"{args.learning_rate:g}), add warm-up (--warmup), or train in "
            f"{'bf16 or fp32' if dtype == 'fp16' else 'fp32'} (now {dtype}); "
            + (f"the last checkpoint, {last}, holds finite weights" if last else "no checkpoint was kept")
        )

    class StopOnNonFinite(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            bad = {key: value for key, value in (logs or {}).items()
                   if key in ("loss", "grad_norm") and isinstance(value, float) and not math.isfinite(value)}  # fmt: skip
            if bad:
                diverged(args, state, ", ".join(f"{key} {value}" for key, value in bad.items()))

        def on_save(self, args, state, control, model=None, **kwargs):
            if model is None or all(
                torch.isfinite(p).all() for p in model.parameters() if p.is_floating_point()
            ):
                return
            if state.is_world_process_zero:
                shutil.rmtree(Path(args.output_dir) / f"checkpoint-{state.global_step}", ignore_errors=True)
            diverged(args, state, "weights that are not finite")

    return StopOnNonFinite()


def stop_on_signal():
    """A Trainer callback for Ctrl-C and a job's SIGTERM: the first one lets the current step finish, writes a
    checkpoint and stops; `raise_if_stopped` then raises `InterruptedRunError` naming the checkpoint and how to
    resume. A second signal stops at once, as without kolong. Handlers are installed only around training
    (`installed`) and only from the main thread (where Python delivers signals)."""
    from transformers import TrainerCallback

    class StopOnSignal(TrainerCallback):
        def __init__(self) -> None:
            self.received: str | None = None
            self.previous: dict = {}

        def _handle(self, number, frame):
            if self.received is not None:  # a second signal: the default behaviour, at once
                self._restore()
                raise KeyboardInterrupt
            self.received = signal.Signals(number).name
            announce(
                f"\n{self.received}: writing a checkpoint after this step, then stopping (again: stop at once)"
            )

        def _restore(self) -> None:
            for number, handler in self.previous.items():
                signal.signal(number, handler)
            self.previous = {}

        @contextlib.contextmanager
        def installed(self):
            if threading.current_thread() is threading.main_thread():
                for number in (signal.SIGINT, signal.SIGTERM):
                    self.previous[number] = signal.signal(number, self._handle)
            try:
                yield
            finally:
                self._restore()

        def on_step_end(self, args, state, control, **kwargs):
            if self.received is not None:
                control.should_save = control.should_training_stop = True
            return control

        def raise_if_stopped(self, trainer) -> None:
            if self.received is None:
                return
            step = trainer.state.global_step
            command = " ".join(sys.argv[1:]) if sys.argv and "kolong" in Path(sys.argv[0]).name else ""
            raise InterruptedRunError(
                f"stopped by {self.received} at step {step}: checkpoint-{step} is written in "
                f"{trainer.args.output_dir}; run the same command to resume"
                + (f" (kolong {command})" if command else "")
            )

    return StopOnSignal()
