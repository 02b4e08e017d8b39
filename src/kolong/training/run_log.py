"""What a training run says while it runs and keeps when it ends: one readable line per Trainer log entry (in place of
the Trainer's dicts of strings) and the run's training record in `kolong_run.json` (wall time, steps, examples,
peak memory, the data it was given)."""

from __future__ import annotations

# Log entries the Trainer adds about itself, not about the model: its speed and the epoch (the step is said).
_ABOUT_THE_RUN = ("runtime", "samples_per_second", "steps_per_second", "epoch", "total_flos")


def log_line(logs: dict, step: int, max_steps: int) -> str | None:
    """One readable line for a Trainer log entry, in place of the dict of strings the Trainer prints: a training
    log ("step N/MAX: loss L, learning rate R, grad norm G"), an evaluation ("evaluation at step N/MAX: loss L,
    accuracy A (S s)"); None for the closing summary, which the recipe's own line gives."""
    if "train_runtime" in logs:
        return None
    evaluation = any(key.startswith("eval_") for key in logs)
    values = {key.removeprefix("eval_"): value for key, value in logs.items()}
    shown = [f"{key.replace('_', ' ') if key in ('learning_rate', 'grad_norm') else key} {_number(value)}"
             for key, value in values.items() if not key.endswith(_ABOUT_THE_RUN) and key != "step"]  # fmt: skip
    if not shown:
        return None
    where = f"step {step:,}" + (f"/{max_steps:,}" if max_steps > 0 else "")
    runtime = values.get("runtime")
    took = f" ({float(runtime):,.1f} s)" if isinstance(runtime, (int, float)) else ""
    return f"{'evaluation at ' + where if evaluation else where}: {', '.join(shown)}{took}"


def _number(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def log_lines():
    """A Trainer callback that says each log entry as one `log_line` on stderr, where the Trainer's printer would
    print its dict; it replaces that printer (`train_or_finish`)."""
    from transformers import TrainerCallback

    from kolong.training.guards import announce

    class LogLines(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            line = log_line(logs or {}, state.global_step, state.max_steps)
            if line and state.is_world_process_zero:
                announce(line)

    return LogLines()


def training_record(data: dict | None = None):
    """A Trainer callback that writes what training took into `kolong_run.json` when a session ends: wall seconds
    (summed over resumed sessions), sessions, steps, examples seen, peak memory, and the data it was given
    (`data`: counts and a hash of what it trained on, as a recipe names them)."""
    import time

    from transformers import TrainerCallback

    from kolong.measure import process_peak_mb
    from kolong.training.run_record import record_training, recorded_training

    class TrainingRecord(TrainerCallback):
        def __init__(self) -> None:
            self.started = None

        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_train_end(self, args, state, control, **kwargs):
            if self.started is None or not state.is_world_process_zero:
                return
            before = recorded_training(args.output_dir)
            seconds = before.get("wall_seconds", 0.0) + time.perf_counter() - self.started
            per_step = args.train_batch_size * args.gradient_accumulation_steps * max(1, args.world_size)
            cuda = args.device.type == "cuda"
            peaks = [p for p in (before.get("peak_memory_mb"), process_peak_mb(cuda)) if p is not None]
            record_training(args.output_dir, {
                "wall_seconds": round(seconds, 1), "sessions": before.get("sessions", 0) + 1,
                "steps": state.global_step, "examples": state.global_step * per_step,
                "examples_per_step": per_step, "peak_memory_mb": round(max(peaks)) if peaks else None,
                "peak_memory_of": "CUDA allocator" if cuda else "process resident set (VmHWM)",
                "device": str(args.device), "data": data or before.get("data"),
            })  # fmt: skip

    return TrainingRecord()


def titles_record(examples, features: int) -> dict:
    """What a QA run trained on, for its record: questions, windows, and its articles' titles by count and a short
    hash (two runs' records say whether they read the same articles)."""
    import hashlib

    titles = sorted({example.title for example in examples})
    digest = hashlib.sha256("\n".join(titles).encode()).hexdigest()[:16]
    return {
        "questions": len(examples),
        "train_features": features,
        "articles": len(titles),
        "titles_sha256": digest,
    }


def dataset_size(trainer) -> dict | None:
    """What a recipe that names nothing more trained on: its training set's size (features: windows, rows)."""
    dataset = getattr(trainer, "train_dataset", None)
    try:
        return {"train_features": len(dataset)} if dataset is not None else None
    except TypeError:  # an iterable dataset has no length
        return None
