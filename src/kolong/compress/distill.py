"""`kolong distill qa | cls`: a student with fewer layers learns from a fine-tuned teacher (DistilBERT,
TinyBERT), keeping the teacher's width, position scheme, length and head.

The student starts as the teacher with a subset of its layers: layer i copies teacher layer
round(i * L_t / L_s) (every other layer when halving, DistilBERT's initialisation); embeddings, position
tables (per-layer Shaw / T5 tables are picked the same way) and the head are copied whole. It is then
fine-tuned by the `finetune qa` / `finetune cls` recipe with the loss

    L = w_task * L_task + w_soft * T^2 * KL(softmax(z_t / T) || softmax(z_s / T)) + w_hidden * L_hidden

where z are the head's logits (QA: the start and the end distributions, averaged), T the temperature
(Hinton et al. 2015) and L_hidden the mean squared error between each student layer's output and the
output of the last teacher layer it stands for (teacher layer (i + 1) * L_t / L_s - 1, TinyBERT's uniform
map; the embedding outputs too).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path

from kolong.errors import CheckpointError, ConfigError
from kolong.io import atomic_write_json
from kolong.training.arguments import ClassificationArguments, QAFinetuneArguments
from kolong.training.common import recorded
from kolong.training.options import REQUIRED, option


@dataclass(kw_only=True)
class DistillationFields:
    teacher: str = option(REQUIRED, "Fine-tuned teacher checkpoint (its head, scheme and length are kept).")
    student_layers: int = option(0, "Layers of the student (0: half the teacher's, rounded up).", min=0)
    temperature: float = option(2.0, "Softmax temperature of the soft targets.")
    task_weight: float = option(1.0, "Weight of the task loss on gold labels.", min=0)
    soft_weight: float = option(1.0, "Weight of the soft-target KL divergence.", min=0)
    hidden_weight: float = option(1.0, "Weight of the hidden-state MSE (0: off).", min=0)


STUDENT = "A student checkpoint to start from (default: the teacher's layers, picked)."


@dataclass(kw_only=True)
class QADistillArguments(DistillationFields, QAFinetuneArguments):
    """`kolong distill qa`: `finetune qa`'s options, with the teacher."""

    model: str | None = option(None, STUDENT, "--student", "--model_name_or_path")


@dataclass(kw_only=True)
class ClassificationDistillArguments(DistillationFields, ClassificationArguments):
    """`kolong distill cls`: `finetune cls`'s options, with the teacher."""

    model: str | None = option(None, STUDENT, "--student", "--model_name_or_path")


def layer_list(model):
    """(name, ModuleList) of the model's stack of encoder layers."""
    from torch import nn

    count = model.config.num_hidden_layers
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == count and name.endswith(("layers", "layer")):
            return name, module
    raise CheckpointError(f"cannot find the {count} encoder layers of {type(model).__name__}")


def picked_layers(teacher_layers: int, student_layers: int) -> list[int]:
    """Teacher layer each student layer starts from: every other one when halving (0, 2, 4, ...)."""
    if not 0 < student_layers < teacher_layers:
        raise ConfigError(
            f"--student-layers must be between 1 and {teacher_layers - 1} (the teacher has {teacher_layers}), "
            f"got {student_layers}"
        )
    return [round(i * teacher_layers / student_layers) for i in range(student_layers)]


def make_student(teacher, student_layers: int):
    """The teacher's class and configuration with `student_layers` layers, initialised from the teacher."""
    import copy

    teacher_layers = teacher.config.num_hidden_layers
    picked = picked_layers(teacher_layers, student_layers)
    config = copy.deepcopy(teacher.config)
    config.num_hidden_layers = student_layers
    if getattr(config, "full_attention_every", 0):
        raise ConfigError("distilling a model that alternates full and local layers is not supported")
    student = type(teacher)(config)
    prefix, _ = layer_list(teacher)
    per_layer = re.compile(rf"^{re.escape(prefix)}\.(\d+)\.(.*)$")
    source = teacher.state_dict()
    state = {}
    for key, target in student.state_dict().items():
        match = per_layer.match(key)
        if match:
            state[key] = source[f"{prefix}.{picked[int(match.group(1))]}.{match.group(2)}"]
        elif source[key].shape == target.shape:
            state[key] = source[key]
        elif source[key].shape[0] == teacher_layers and target.shape[0] == student_layers:
            state[key] = source[key][picked]  # per-layer relative tables
        else:
            raise CheckpointError(
                f"cannot map the teacher's {key} {tuple(source[key].shape)} onto the student"
            )
    student.load_state_dict(state)
    return student, picked


def distilling(trainer_class, teacher, settings: DistillationFields, outputs: tuple[str, ...]):
    """`trainer_class` whose loss mixes the task, the teacher's soft targets and its hidden states."""
    import torch
    import torch.nn.functional as F

    teacher_layers = teacher.config.num_hidden_layers
    temperature = settings.temperature
    labels = ("labels", "start_positions", "end_positions")

    class DistillationTrainer(trainer_class):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if not model.training:  # evaluation scores the student alone
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            hidden = settings.hidden_weight > 0
            student = model(**inputs, output_hidden_states=hidden)
            if next(teacher.parameters()).device != student[outputs[0]].device:
                teacher.to(student[outputs[0]].device)
            with torch.no_grad():
                taught = teacher(
                    **{k: v for k, v in inputs.items() if k not in labels}, output_hidden_states=hidden
                )
            soft = sum(
                F.kl_div(F.log_softmax(student[name] / temperature, -1), F.log_softmax(taught[name] / temperature, -1),
                         reduction="batchmean", log_target=True)
                for name in outputs
            ) / len(outputs) * temperature**2  # fmt: skip
            loss = settings.soft_weight * soft
            if settings.task_weight and student.loss is not None:
                loss = loss + settings.task_weight * student.loss
            if hidden:
                layers = len(student.hidden_states) - 1
                pairs = [(0, 0)] + [(i + 1, (i + 1) * teacher_layers // layers) for i in range(layers)]
                matched = [F.mse_loss(student.hidden_states[s], taught.hidden_states[t]) for s, t in pairs]
                loss = loss + settings.hidden_weight * torch.stack(matched).mean()
            return (loss, student) if return_outputs else loss

    return DistillationTrainer


def _recipe_arguments(args, student_dir: Path):
    base = QAFinetuneArguments if isinstance(args, QADistillArguments) else ClassificationArguments
    values = {f.name: getattr(args, f.name) for f in fields(base)}
    values["model"] = str(student_dir)
    return base(**values)


def _check_student(path: str, wanted: str, task: str) -> None:
    """A student is an encoder, bare or with a masked-LM or the task's own head: another task's head (a
    tagger's classifier) would clash with the one the recipe gives it."""
    from kolong.checkpoints import load_config, require_encoder

    config = load_config(path)
    require_encoder(config, path, f"distill {task}")
    heads = [name for name in config.architectures or [] if "For" in name]
    other = [name for name in heads if not name.endswith((wanted, "ForMaskedLM", "ForPreTraining"))]
    if other:
        raise CheckpointError(
            f"--model {path} is a {other[0]}; a student of `kolong distill {task}` is an encoder without a task "
            f"head, with a masked-LM head or a *{wanted} one"
        )


def distill(args: QADistillArguments | ClassificationDistillArguments) -> dict:
    """Build the student from the teacher and train it with `finetune qa` / `finetune cls` and the
    distillation loss; returns the recipe's metrics with the student's layers and size."""
    from kolong.checkpoints import load_model, load_tokenizer

    qa = isinstance(args, QADistillArguments)
    teacher = load_model(args.teacher, all_weights="fine-tune the teacher first").eval()
    head = type(teacher).__name__
    wanted = "ForQuestionAnswering" if qa else "ForSequenceClassification"
    if not head.endswith(wanted):
        raise CheckpointError(f"{args.teacher} is a {head}; `kolong distill {'qa' if qa else 'cls'}` needs a "
                              f"*{wanted} teacher (fine-tuned with `kolong finetune {'qa' if qa else 'cls'}`)")  # fmt: skip
    if args.model:
        _check_student(args.model, wanted, "qa" if qa else "cls")
        student, picked = load_model(args.model), None
        layers = student.config.num_hidden_layers
    else:
        layers = args.student_layers or (teacher.config.num_hidden_layers + 1) // 2
        student, picked = make_student(teacher, layers)
    if qa:  # here, where the message can name the user's models, not the student's scratch copy below
        from kolong.data.qa_features import trained_windows
        from kolong.extension.reach import check_max_length, max_length_for
        from kolong.training.qa import DEFAULT_MAX_LENGTH

        taught = trained_windows(teacher)  # the student learns on the windows its teacher was fine-tuned on
        if args.max_length is None:
            args.max_length = taught.get("max_seq_len") or max_length_for(
                teacher, None, DEFAULT_MAX_LENGTH, ""
            )
            if args.doc_stride is None and args.max_length == taught.get("max_seq_len"):
                args.doc_stride = taught.get("doc_stride")
        check_max_length(teacher, args.max_length, args.teacher)
        if args.model:  # a student made here has the teacher's positions
            check_max_length(student, args.max_length, args.model)
    for parameter in teacher.parameters():
        parameter.requires_grad_(False)
    tokenizer = load_tokenizer(args.teacher)
    Path(args.output_dir).absolute().parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(
        prefix=".student-", dir=Path(args.output_dir).absolute().parent
    ) as scratch:
        student.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        recipe = _recipe_arguments(args, Path(scratch))
        if qa:
            from kolong.training.qa import finetune_qa

            metrics = finetune_qa(recipe, wrap_trainer=lambda cls: distilling(
                cls, teacher, args, ("start_logits", "end_logits")))  # fmt: skip
        else:
            from kolong.training.classification import finetune_cls

            metrics = finetune_cls(
                recipe, wrap_trainer=lambda cls: distilling(cls, teacher, args, ("logits",))
            )
    metrics.update(
        teacher=args.teacher,
        teacher_layers=teacher.config.num_hidden_layers,
        student_layers=layers,
        initialised_from_teacher_layers=picked,
        teacher_parameters=sum(p.numel() for p in teacher.parameters()),
        student_parameters=sum(p.numel() for p in student.parameters()),
    )
    # The recipe recorded its own arguments, whose model is the scratch copy of the student (deleted by now):
    # the results file names the distillation's arguments and its teacher instead.
    results = Path(args.output_dir) / ("kolong_qa_results.json" if qa else "kolong_cls_results.json")
    if results.is_file():  # written by the main process only
        atomic_write_json(results, {"arguments": recorded(args), "metrics": metrics})
    return metrics
