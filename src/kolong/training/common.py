"""What every training recipe (QA, classification, MLM, seq2seq) sets up the same way over the HF Trainer."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from kolong.errors import ConfigError, OutputExistsError, warn
from kolong.io import follow_umask
from kolong.training.guards import announce, stop_on_non_finite, stop_on_signal
from kolong.training.run_record import (
    RUN_FILE,
    check_same_run,
    finished_metrics,
    mark_finished,
    record_run,
    refuse_finishing_again,
)


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def use_bf16(option: str) -> bool:
    """auto (on where the GPU supports it) | yes | no."""
    import torch

    if option == "yes":
        return True
    if option == "no":
        return False
    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def device_settings(bf16: str) -> dict:
    """TrainingArguments that depend on the device: precision, pinned memory and non-blocking copies of each
    batch to the GPU, CPU-only mode.

    A blocking copy from pinned memory makes the host wait for the work queued before it: one wait per
    tensor of every batch (most of the waits per step in a trace of `kolong pretrain mlm` on CUDA)."""
    gpu = has_gpu()
    settings = {
        "bf16": use_bf16(bf16),
        "dataloader_pin_memory": gpu,
        # On CPU, accelerate only forms the torchrun process group (gloo) when told the run is CPU-only.
        "use_cpu": not gpu,
    }
    if gpu:
        settings["accelerator_config"] = {"non_blocking": True}
    return settings


REGIONAL_GRAPHS = 64  # lengths x modes x (first layer, the rest), with room to spare


@contextlib.contextmanager
def trainer_compile_settings(regional: bool = False):
    """Trainers built inside compile their model with static shapes (`torch.compile(dynamic=False)`), and with
    `regional` layer by layer, unless the user's ACCELERATE_DYNAMO_* variables say otherwise.

    With dynamo's default a second batch shape (a curriculum's next length, the last evaluation batch) turns the
    lengths symbolic, and FlexAttention's score_mods failed to lower with symbolic lengths (CUDA, torch 2.11):
    PyTorch advises static shapes for it. Each shape is then a graph of its own. `regional`: accelerate's
    regional compilation, each block of a repeated stack (the encoder's layers) compiled on its own, so the
    first layer's graph serves the rest, and the modules around them apart (a shorter first step than compiled
    whole: docs/pretraining.md). HF's Trainer sets neither;
    accelerate reads these variables when it makes its accelerator (made, and run, inside the context).

    Layers compiled one by one share one code object, whose graphs dynamo counts together: one for each shape
    and mode, two where the first layer builds what the others reuse (packed documents' block mask on the
    FlexAttention path, T5's shared bias), so a curriculum of five lengths makes 10, past dynamo's recompile
    limit (8), after which the deeper layers would run eagerly with a warning (a whole model: one graph a
    length). Inside the context, a regional run may compile REGIONAL_GRAPHS."""
    import torch

    wanted = {"ACCELERATE_DYNAMO_USE_DYNAMIC": "false"}
    if regional:
        wanted["ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"] = "true"
    set_here = [name for name in wanted if name not in os.environ]
    os.environ.update({name: wanted[name] for name in set_here})
    limit = max(torch._dynamo.config.recompile_limit, REGIONAL_GRAPHS if regional else 0)
    try:
        with torch._dynamo.config.patch(recompile_limit=limit):
            yield
    finally:
        for name in set_here:
            os.environ.pop(name, None)


def fresh_compile_state() -> None:
    """Forget what torch.compile learnt from earlier runs in this process; called before each compiled run.

    Dynamo keys its caches on code, not on models: every run's new model adds guards to the same `forward`,
    and after `recompile_limit` (8) of them that forward runs eagerly without a word; a run after one of another
    length meets shapes already marked
    dynamic (other kernels, and code that does not trace with symbolic shapes). Experiments and benchmarks
    train many models in one process. Other compiled code in the process compiles again when next called."""
    import torch

    torch._dynamo.reset()


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why `checkpoint` cannot be resumed from (a run killed while saving it), or None if it is complete.

    The Trainer writes trainer_state.json last, so a checkpoint is complete when that file parses and every
    weights file is whole (a safetensors header that describes the file's full length)."""
    state = checkpoint / "trainer_state.json"
    if not state.is_file():
        return "no trainer_state.json"
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "trainer_state.json is cut short"
    weights = [*checkpoint.glob("*.safetensors"), *checkpoint.glob("*.bin")]
    if not weights:
        return "no model weights"
    for file in weights:
        if file.suffix == ".safetensors" and not safetensors_complete(file):
            return f"{file.name} is cut short"
    return None


def safetensors_complete(file: Path) -> bool:
    """Whether a .safetensors file is as long as its header says (8-byte length, JSON header, data)."""
    try:
        with open(file, "rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(size))
    except (OSError, ValueError):
        return False
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    return file.stat().st_size == 8 + size + max(ends, default=0)


def resume_point(output_dir: Path, overwrite: bool) -> str | None:
    """The last complete checkpoint in `output_dir` to resume from; incomplete newer ones (a run killed
    while saving) are removed with a warning, and so are incomplete ones alone in the directory (a run
    killed during its first save: it starts afresh). Refuses a non-empty directory without a complete
    checkpoint that holds anything else."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    if not output_dir.is_dir():
        return None
    for stale in [*output_dir.glob(".final-*"), *output_dir.glob(".*.tmp-*")]:  # a run killed while saving
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
    if overwrite or not any(path.name != RUN_FILE for path in output_dir.iterdir()):
        return None  # empty, or holding only the record of a run stopped before its first checkpoint
    pattern = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
    found = sorted(
        (int(match.group(1)), path)
        for path in output_dir.iterdir()
        if path.is_dir() and (match := pattern.match(path.name))
    )
    broken, resumed = [], None
    for _, checkpoint in reversed(found):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            resumed = checkpoint
            break
        broken.append((checkpoint, problem))
    # with no complete checkpoint, only a directory of nothing but incomplete ones is the run's own to clear
    if resumed is not None or (
        broken and len(broken) == sum(1 for p in output_dir.iterdir() if p.name != RUN_FILE)
    ):
        then = f"resuming from {resumed.name}" if resumed else "no complete one to resume: starting afresh"
        for path, reason in broken:
            warn(f"removing incomplete checkpoint {path} ({reason}); {then}")
            shutil.rmtree(path, ignore_errors=True)
        return None if resumed is None else str(resumed)
    detail = f" ({', '.join(f'{p.name}: {r}' for p, r in broken)})" if broken else ""
    raise OutputExistsError(
        f"output directory {output_dir} is not empty and holds no complete checkpoint to resume{detail}; "
        "pass --overwrite to train afresh there"
    )


def save_final(trainer, tokenizer, output_dir: Path) -> None:
    """Model and tokenizer files written beside `output_dir`'s checkpoints, each moved in whole (one writer).

    Every process calls `Trainer.save_model` (FSDP and DeepSpeed gather the weights collectively; only the
    main process writes), so the staging directory has one name that all of them know."""
    staging = Path(output_dir) / ".final-staging"
    main = trainer.is_world_process_zero()
    if main:
        shutil.rmtree(staging, ignore_errors=True)  # left by a run killed while saving
    trainer.save_model(str(staging))
    if not main:
        return
    try:
        tokenizer.save_pretrained(str(staging))
        follow_umask(staging)
        for item in staging.iterdir():
            os.replace(item, output_dir / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def recorded(args) -> dict:
    """A recipe's arguments as written into its results file (JSON-safe)."""
    return {key: value for key, value in dataclasses.asdict(args).items() if key != "extra"} | {
        "training_arguments": dict(args.extra)
    }


def save_run(trainer, tokenizer, output_dir: Path, results_file: str, args, metrics: dict, **extra) -> None:
    """Every recipe's last step: the model and tokenizer (`save_final`), then `results_file` with the
    arguments and metrics (and `extra` entries), written whole, by the main process only."""
    from kolong.io import atomic_write_json

    save_final(trainer, tokenizer, output_dir)
    if trainer.is_world_process_zero():
        atomic_write_json(
            output_dir / results_file, {"arguments": recorded(args), "metrics": metrics, **extra}
        )
        mark_finished(output_dir, results_file, trainer.state.global_step, trainer.state.max_steps)


class ListDataset:
    """A list as a map-style dataset (the Trainer only needs len and indexing)."""

    def __init__(self, items: list):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


def run_train_loss(trainer, output) -> float:
    """Mean training loss of the whole run, across resumes: the logged losses (each the mean over the steps
    since the previous log) weighted by the steps they cover; the session's own mean when nothing was
    logged. (The Trainer's `training_loss` only covers the steps of the current session.)"""
    covered, total, previous = 0, 0.0, 0
    for entry in trainer.state.log_history:
        if "loss" in entry and "step" in entry:
            steps = entry["step"] - previous
            covered, total, previous = covered + steps, total + steps * entry["loss"], entry["step"]
    return total / covered if covered else output.training_loss


def quiet_trainer(trainer, quiet: bool) -> None:
    """Drop the Trainer's progress bar and log lines (a caller that reports progress itself)."""
    if quiet:
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)


def step_lines(emit: Callable[[str], None] | None = None):
    """A Trainer callback for a run whose output goes to a file or a pipe (where the Trainer shows no bar): a line
    when training starts, each tenth of its steps and at least every 30 s (`prediction.progress`), so a slow
    first step never reads as a hang. `emit`: where the lines go instead of stderr (the demo's status)."""
    import contextlib

    from transformers import TrainerCallback

    from kolong.training.prediction import progress

    class StepLines(TrainerCallback):
        def __init__(self) -> None:
            self.stack = contextlib.ExitStack()
            self.advance = None

        def on_train_begin(self, args, state, control, **kwargs):
            if state.max_steps > 0 and args.local_process_index == 0:
                steps = progress(state.max_steps, "step", "training", emit=emit)
                self.advance = self.stack.enter_context(steps)
                if state.global_step:  # resumed
                    self.advance(state.global_step)

        def on_step_end(self, args, state, control, **kwargs):
            if self.advance is not None:
                self.advance(1)

        def on_train_end(self, args, state, control, **kwargs):
            self.stack.close()
            self.advance = None

    return StepLines()


def one_train_loss():
    """A Trainer callback, first in line, that keeps the Trainer's own `train_loss` (the mean over the steps since
    the run last started) out of the summary it prints at the end, where kolong's closing line gives the run's (over resumes):
    one figure by that name, not two that differ. The Trainer's log history keeps its value."""
    from transformers import TrainerCallback

    class OneTrainLoss(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "train_runtime" in logs:
                logs.pop("train_loss", None)

    return OneTrainLoss()


def checkpoint_modes():
    """A Trainer callback giving each checkpoint, once saved, the modes the umask gives (`follow_umask`)."""
    from transformers import TrainerCallback

    class CheckpointModes(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and checkpoint.is_dir():
                follow_umask(checkpoint)

    return CheckpointModes()


def evaluated_steps():
    """A Trainer callback listing the steps this process evaluated, in order (`final_evaluation`)."""
    from transformers import TrainerCallback

    class EvaluatedSteps(TrainerCallback):
        def __init__(self):
            self.steps = []

        def on_evaluate(self, args, state, control, **kwargs):
            self.steps.append(state.global_step)

    return EvaluatedSteps()


def final_evaluation(trainer) -> dict:
    """The evaluation metrics of the model training ended with (the best checkpoint's when
    `load_best_model_at_end`): taken from the log when this process's last evaluation was of that very step
    (so a recipe's record of the last predictions is that step's too), measured anew otherwise. The Trainer's
    last scheduled evaluation is usually of that step: evaluating again would double the run's evaluation time
    for the same numbers."""
    state = trainer.state
    loaded = state.global_step
    best = state.best_model_checkpoint
    if trainer.args.load_best_model_at_end and best and Path(best).is_dir():
        loaded = int(Path(best).name.rsplit("-", 1)[-1])
    seen = getattr(trainer, "evaluated_steps", [])
    if seen and seen[-1] == loaded:
        for entry in reversed(state.log_history):
            if entry.get("step") == loaded and any(key.startswith("eval_") for key in entry):
                return {key: value for key, value in entry.items() if key != "step"}
    return trainer.evaluate()


def train_or_finish(trainer, resume_from: str | None, args=None):
    """`trainer.train(resume_from_checkpoint=resume_from)`, except when that checkpoint already ends the run
    (a run killed after its last checkpoint, before its final save): resuming there, the Trainer takes one
    step past max_steps, so the checkpoint's weights and state are loaded and training is skipped. A run that
    finished and kept its results is refused instead (`run_record`). A fresh run first records `args`, its
    recipe's arguments, in the output directory (written only now, once every input was accepted)."""
    from transformers import TrainerState
    from transformers.trainer_utils import TrainOutput

    from kolong.training.run_log import dataset_size, log_lines, training_record

    trainer.add_callback(checkpoint_modes())
    evaluations = evaluated_steps()
    trainer.add_callback(evaluations)
    trainer.evaluated_steps = evaluations.steps  # read by final_evaluation
    trainer.add_callback(stop_on_non_finite())
    trainer.add_callback(
        training_record(getattr(trainer, "kolong_training_data", None) or dataset_size(trainer))
    )
    trainer.callback_handler.callbacks.insert(0, one_train_loss())  # before the Trainer's printer
    if trainer.args.disable_tqdm and not getattr(args, "quiet", False):
        from transformers.trainer_callback import PrinterCallback

        trainer.add_callback(step_lines())
        if trainer.pop_callback(PrinterCallback) is not None:  # its dicts of strings, said as lines instead
            trainer.add_callback(log_lines())
    signals = stop_on_signal()
    trainer.add_callback(signals)
    if resume_from is None and args is not None:
        record_run(Path(trainer.args.output_dir), recorded(args))  # replaces any other run's (--overwrite)
    if resume_from:
        state_file = Path(resume_from) / "trainer_state.json"
        state = json.loads(state_file.read_text(encoding="utf-8"))
        target = trainer.args.max_steps if trainer.args.max_steps > 0 else state.get("max_steps") or 0
        if target and state.get("global_step", 0) >= target:
            refuse_finishing_again(Path(trainer.args.output_dir), target)
            trainer.state = TrainerState.load_from_json(str(state_file))
            best = trainer.state.best_model_checkpoint
            chosen = (
                best if trainer.args.load_best_model_at_end and best and Path(best).is_dir() else resume_from
            )
            _load_weights(trainer.model, Path(chosen))
            return TrainOutput(trainer.state.global_step, float("nan"), {})
        announce(
            f"resuming from {Path(resume_from).name} (step {state.get('global_step', 0)} of {target or '?'})"
        )
    with signals.installed():
        output = trainer.train(resume_from_checkpoint=resume_from)
    signals.raise_if_stopped(trainer)
    return output


def _load_weights(model, checkpoint: Path) -> None:
    from safetensors.torch import load_file

    shards = sorted(checkpoint.glob("*.safetensors"))
    if not shards:
        raise OutputExistsError(f"{checkpoint} holds no .safetensors weights to finish the run from")
    weights = {}
    for shard in shards:
        weights.update(load_file(shard))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = {name for name, _ in model.named_parameters(remove_duplicate=False)} - {
        name for name, _ in model.named_parameters()
    }
    if set(missing) - tied or unexpected:
        raise OutputExistsError(f"{checkpoint} does not hold this model's weights; pass --overwrite")


def finished_run(args) -> dict | None:
    """The results of the run `args` ask for when `args.output_dir` holds it finished (`run_record`), else None:
    a recipe then returns them at once."""
    return finished_metrics(args, recorded(args))


def resume_checkpoint(args) -> str | None:
    """The checkpoint to resume from: `--resume_from_checkpoint` if given, else the output directory's last
    (unless `--overwrite`); refuses a non-empty output directory that holds no checkpoint."""
    if args.resume_from_checkpoint:
        if args.overwrite:
            raise ConfigError("--resume_from_checkpoint and --overwrite contradict each other; drop one")
        chosen = Path(args.resume_from_checkpoint)
        if not (chosen / "trainer_state.json").is_file():
            raise ConfigError(
                f"--resume_from_checkpoint {chosen}: not a Trainer checkpoint (no trainer_state.json there)"
            )
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)
        check_same_run(Path(args.output_dir), recorded(args))
        return str(chosen)
    output = Path(args.output_dir)
    if output.exists() and not output.is_dir():
        raise ConfigError(f"--output_dir {output} is a file; give a directory")
    resumed = resume_point(output, args.overwrite)
    if resumed is not None:
        check_same_run(output, recorded(args))
    return resumed


def time_budget(seconds: float):
    """A Trainer callback that saves a checkpoint and stops once `seconds` have passed, so a long run fits
    a job of limited time and the next run resumes it (`resume_checkpoint`); `.stopped` tells."""
    import time

    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        def __init__(self) -> None:
            self.started, self.stopped = time.monotonic(), False

        def on_step_end(self, args, state, control, **kwargs):
            if time.monotonic() - self.started > seconds and state.global_step < state.max_steps:
                control.should_save = control.should_training_stop = self.stopped = True
            return control

    return TimeBudget()


def stopped_by_budget(callbacks: list | None) -> bool:
    """Whether a `time_budget` among `callbacks` ended this call before the run's last step: the recipe
    then returns at that checkpoint, without evaluating or saving a final model, for a rerun to resume."""
    return any(getattr(callback, "stopped", False) for callback in callbacks or [])


def train_eval_items(read, default_path: Path, args) -> tuple[list, list]:
    """A KLUE-file recipe's data: `read(--train)` (default: the shared dev set), and `read(--eval)` or a seeded
    `--eval-fraction` of the training items held out; `--limit` caps training (evaluation: a quarter of it)."""
    from kolong.data.examples import hold_out

    if not args.train and not Path(default_path).is_file():
        from kolong.data.shared import missing

        raise missing(Path(default_path))
    training = read(args.train or default_path)
    if args.eval:
        evaluation = read(args.eval)
    else:
        training, evaluation = hold_out(training, args.eval_fraction, args.seed)
    if args.limit is not None:
        training, evaluation = training[: args.limit], evaluation[: max(1, args.limit // 4)]
    return training, evaluation
