"""A run directory knows the arguments it was trained with (`kolong_run.json`), and whether it finished.

A rerun on the same directory resumes the same run: an argument that changes what is trained (the model, the
data, lengths and stride, the optimiser and schedule, the seed) is refused in one line that names it, with
`--overwrite` as the way to start afresh. What may change between a run and its resumption: the step or epoch
budget, logging and reporting, evaluation's batch size and decoding, where the data lives, and the machine's
own choices (compile, attention options). A finished run is never finished again by a rerun that trains
nothing: the same command again returns its results (nothing retrained, nothing rewritten), and a smaller
budget is refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kolong.errors import ConfigError, OutputExistsError, warn

RUN_FILE = "kolong_run.json"

# kolong's fields a resumed run may change
MAY_CHANGE = frozenset({
    "output_dir", "overwrite", "resume_from_checkpoint", "epochs", "max_steps", "early_stopping_patience",
    "logging_steps", "quiet", "eval_every", "save_steps", "save_total_limit", "eval_batch_size", "n_best",
    "max_answer_length", "num_beams", "max_new_tokens", "shared_data", "compile", "attention_options",
})  # fmt: skip
# HF TrainingArguments fields (by prefix) a resumed run may change
HF_MAY_CHANGE = (
    "output_dir", "overwrite_output_dir", "resume_from_checkpoint", "num_train_epochs", "max_steps", "logging_",
    "log_", "report_to", "run_name", "disable_tqdm", "dataloader_", "per_device_eval_batch_size", "eval_",
    "save_", "push_to_hub", "hub_", "torch_compile", "include_", "skip_memory_metrics", "ddp_", "tf32",
)  # fmt: skip


def _main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _read(output_dir: Path) -> dict | None:
    path = Path(output_dir) / RUN_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as error:
        raise ConfigError(f"{path}: unreadable ({error}); pass --overwrite to train afresh there") from None


def _write(output_dir: Path, record: dict) -> None:
    from kolong.io import atomic_write_json

    if _main_process():
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_json(Path(output_dir) / RUN_FILE, record)


BUDGET = ("epochs", "max_steps")
HF_BUDGET = ("num_train_epochs", "max_steps")


def _plain(value):
    """JSON's view of a value (tuples as lists, paths as strings), so a recorded and a live value compare."""
    return json.loads(json.dumps(value, default=str))


def record_training(output_dir: Path, training: dict) -> None:
    """Add what a training session measured to the run's record (`training`: wall time, steps, examples, peak
    memory, the data), next to its arguments: the figures docs quote about training come from here."""
    record = _read(Path(output_dir)) or {}
    _write(output_dir, {**record, "training": _plain(training)})


def recorded_training(output_dir: Path) -> dict:
    """The training figures a run's record holds so far ({} for a run that has not trained)."""
    return (_read(Path(output_dir)) or {}).get("training", {})


def record_run(output_dir: Path, arguments: dict) -> None:
    """A fresh run's record: its arguments (`common.recorded(args)`)."""
    _write(output_dir, {"arguments": _plain(arguments)})


def changed_settings(recorded: dict, now: dict) -> list[str]:
    """'--flag: NOW now, THEN there' for each argument that changes what is trained."""
    recorded, now = _plain(recorded), _plain(now)
    found = []
    for key in sorted(set(recorded) | set(now)):
        if key == "training_arguments" or key in MAY_CHANGE or recorded.get(key) == now.get(key):
            continue
        if key not in recorded and now.get(key) in (
            False,
            None,
        ):  # an option newer than the record, at its default
            continue
        found.append(f"--{key.replace('_', '-')}: {now.get(key)!r} now, {recorded.get(key)!r} there")
    hf_then, hf_now = recorded.get("training_arguments") or {}, now.get("training_arguments") or {}
    for key in sorted(set(hf_then) | set(hf_now)):
        if key.startswith(HF_MAY_CHANGE) or hf_then.get(key) == hf_now.get(key):
            continue
        found.append(f"--{key}: {hf_now.get(key, 'unset')!r} now, {hf_then.get(key, 'unset')!r} there")
    return found


def check_same_run(output_dir: Path, arguments: dict) -> None:
    """Refuse to resume `output_dir`'s run with arguments that change what it trains; a run recorded before
    kolong kept records gets one now."""
    record = _read(output_dir)
    if record is None:
        record_run(output_dir, arguments)
        return
    changed = changed_settings(record.get("arguments", {}), arguments)
    if changed:
        raise ConfigError(
            f"output directory {output_dir} holds a run with other settings ({'; '.join(changed)}): resume it "
            "with its own, give another --output-dir, or pass --overwrite to train afresh there"
        )


def mark_finished(output_dir: Path, results_file: str, step: int, planned: int) -> None:
    """Record that the run wrote its results to `results_file` at `step` of the `planned` steps (fewer when a
    callback stopped it: early stopping, or a caller's own)."""
    record = _read(output_dir) or {}
    _write(output_dir, {**record, "finished": {"step": step, "planned": planned, "results": results_file}})


def finished_results(output_dir: Path, whole: bool = False) -> tuple[int, str] | None:
    """(step, results file) of a run that wrote results still there (with `whole`, only one that ran all its
    planned steps), else None."""
    finished = (_read(output_dir) or {}).get("finished")
    if not finished or not (Path(output_dir) / finished["results"]).is_file():
        return None
    if whole and finished["step"] < finished.get("planned", 0):
        return None
    return finished["step"], finished["results"]


def refuse_finishing_again(output_dir: Path, step: int) -> None:
    """A rerun whose budget ends at or before the finished run's last step would train nothing and replace
    the run's results: refused, naming them."""
    done = finished_results(output_dir)
    if done is not None:
        raise OutputExistsError(
            f"output directory {output_dir} holds a run finished at step {done[0]} (results in {done[1]}), and "
            f"this budget ends at step {step}: nothing to train. Raise --max-steps or --epochs to continue it, "
            "or pass --overwrite to train afresh there"
        )


def finished_metrics(args, arguments: dict) -> dict | None:
    """The metrics of the finished run in `args.output_dir` when `args` (whose record is `arguments`) ask for
    that run again with the same budget: nothing is trained or written again, and the caller returns them. A
    `--max-steps` at or below the step it finished at is refused; other changes are checked as on resume."""
    output = Path(args.output_dir)
    if args.overwrite or args.resume_from_checkpoint or not output.is_dir():
        return None
    done = finished_results(output, whole=True)  # a run stopped short resumes from its checkpoint instead
    if done is None:
        return None
    step, results = done
    then, now = _plain((_read(output) or {}).get("arguments", {})), _plain(arguments)
    same_budget = all(then.get(key) == now.get(key) for key in BUDGET) and all(
        (then.get("training_arguments") or {}).get(key) == (now.get("training_arguments") or {}).get(key)
        for key in HF_BUDGET
    )
    if not same_budget:
        if 0 < args.max_steps <= step:
            refuse_finishing_again(output, args.max_steps)
        return None  # a larger budget: the run continues from its last checkpoint
    check_same_run(output, arguments)
    warn(f"{output} holds this run, finished at step {step}: its results ({results}) stay as they are and "
         "nothing is trained again (--overwrite trains afresh)")  # fmt: skip
    try:
        return json.loads((output / results).read_text(encoding="utf-8")).get("metrics", {})
    except (OSError, json.JSONDecodeError) as error:
        raise ConfigError(
            f"{output / results}: unreadable ({error}); pass --overwrite to train afresh"
        ) from None
