"""MLM pre-training of kolong's encoder over the HF `Trainer`: what `kolong pretrain mlm` runs.

Everything that can be wrong is checked before the first step: the preset, the corpus (built by
`kolong data corpus`), the tokenizer against the corpus and the model config, the output directory.
The run then writes checkpoints to `output_dir/checkpoint-N` and resumes from the last one when
started again (exactly: the Trainer restores the optimiser, the scheduler, the data position and the
RNG states, and kolong's masking draws from torch's generator). Logs carry the training loss, eval
loss and perplexity on the held-out split, and training throughput in tokens/s. Under `torchrun` or
`accelerate launch` the Trainer runs data-parallel (gloo on CPU, NCCL on GPU).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path

from kolong.errors import CheckpointError, ConfigError, DataError
from kolong.io import writes_output
from kolong.plots.figures import save_figure
from kolong.training import common
from kolong.training.arguments import training_arguments
from kolong.training.presets import preset
from kolong.training.pretraining_arguments import PretrainArguments


def _split_overrides(overrides: dict, model_fields: dict, training_fields: dict) -> None:
    from kolong.models import KolongConfig

    config_fields = set(KolongConfig.__dataclass_fields__)
    for key, value in overrides.items():
        if key in training_fields:
            training_fields[key] = value
        elif key in config_fields:
            model_fields[key] = value
        else:
            raise ValueError(f"override {key!r} is neither a KolongConfig field nor a training field "
                             f"({', '.join(sorted(training_fields))})")  # fmt: skip


def prepare(args: PretrainArguments):
    """Everything before training: (model, tokenizer, datasets, collator, training settings); raises on bad input."""
    from kolong.attention.options import AttentionOptions
    from kolong.checkpoints import load_config, load_model, load_tokenizer
    from kolong.data.corpus import load_corpus
    from kolong.models import KolongConfig, KolongForMaskedLM, KolongForPreTraining
    from kolong.training.curriculum import batch_schedule, parse_length_curriculum
    from kolong.training.mlm_collator import MaskingCollator

    settings = preset(args.preset)
    model_fields, training = settings["model"], settings["training"]
    _split_overrides(args.overrides, model_fields, training)
    for name, preset_name in (
        ("max_steps", "max_steps"),
        ("batch_size", "batch_size"),
        ("learning_rate", "learning_rate"),
        ("warmup_ratio", "warmup"),
    ):
        if getattr(args, name) is not None:
            training[preset_name] = getattr(args, name)  # fmt: skip

    datasets, metadata = load_corpus(args.corpus)
    tokenizer_path = args.tokenizer or metadata["tokenizer"]
    tokenizer = load_tokenizer(tokenizer_path, role="tokenizer")
    if len(tokenizer) != metadata["vocab_size"]:
        raise DataError(
            f"tokenizer {tokenizer_path} has {len(tokenizer)} tokens but the corpus {args.corpus} was built with "
            f"{metadata['vocab_size']} ({metadata['tokenizer']}); rebuild the corpus with this tokenizer"
        )
    if len(datasets["train"]) == 0:
        raise DataError(f"the corpus {args.corpus} has no training blocks")

    from transformers import set_seed

    if args.objective not in ("mlm", "mlm+sop"):
        raise ValueError(f"objective {args.objective!r} is not one of mlm, mlm+sop")
    model_class = KolongForPreTraining if args.objective == "mlm+sop" else KolongForMaskedLM

    set_seed(args.seed)  # the fresh model's initial weights follow the run's seed
    if args.model:
        model_type = load_config(args.model).model_type
        if model_type != KolongConfig.model_type:
            from kolong.models.encoder.convert import SUPPORTED

            advice = (f"convert it first (kolong convert {args.model} --head masked-lm -o KOLONG)"
                      if model_type in SUPPORTED else f"kolong convert takes {', '.join(SUPPORTED)}")  # fmt: skip
            raise CheckpointError(
                f"--model {args.model} is a {model_type!r} checkpoint; `kolong pretrain mlm` continues kolong "
                f"encoders: {advice}"
            )
        model = load_model(args.model, model_class)
        if model.config.vocab_size != len(tokenizer):
            raise DataError(
                f"model {args.model} has vocab_size {model.config.vocab_size} but tokenizer {tokenizer_path} has "
                f"{len(tokenizer)} tokens"
            )
    else:
        derived = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
        taken = sorted(set(derived) & set(model_fields))
        if taken:
            raise ConfigError(f"--set {taken[0]}: set from the corpus's tokenizer; it cannot be overridden")
        positions = model_fields.pop("max_position_embeddings", max(metadata["max_length"], 512))
        if positions < metadata["max_length"]:
            raise ConfigError(
                f"--set max_position_embeddings={positions} is shorter than the corpus's blocks "
                f"({metadata['max_length']} tokens)"
            )
        config = KolongConfig(
            **derived,
            max_position_embeddings=positions,
            position_encoding=args.position_encoding,
            position_kwargs=args.position_kwargs,
            # only the ~15% labelled positions go through the vocabulary projection
            **{"sparse_prediction": True, **model_fields},
        )
        model = model_class(config)
    model.set_attn_implementation(args.attn_implementation)
    model.set_attention_options(AttentionOptions.parse(args.attention_options))
    sentence_order = args.objective == "mlm+sop"
    packing = args.packing if args.packing != "auto" else ("concatenate" if sentence_order else "documents")
    if sentence_order and (packing != "concatenate" or args.curriculum):
        raise ConfigError("--objective mlm+sop pairs the two halves of whole blocks: it needs --packing "
                          "concatenate and no --curriculum")  # fmt: skip
    if packing != "concatenate" and model.config.position_encoding == "memn2n":
        raise ConfigError("--position-encoding memn2n weighs positions by the whole row's length: packed documents "
                          "need --packing concatenate")  # fmt: skip
    schedule = []
    if args.curriculum:
        stages = parse_length_curriculum(args.curriculum, metadata["max_length"])
        schedule = batch_schedule(stages, training["max_steps"], args.gradient_accumulation_steps)
    rank = int(os.environ.get("RANK", "0"))  # each data-parallel process masks its own batches differently
    collator = MaskingCollator.for_tokenizer(
        tokenizer, granularity=args.masking, mlm_probability=args.mlm_probability, seed=args.seed + 7919 * rank,
        sentence_order=sentence_order, packing=packing, max_length=metadata["max_length"], schedule=schedule,
        host_facts=True,  # kolong's MLM models read nothing back from the device with them
    )  # fmt: skip
    # numpy rows: the collator stacks them without a Python loop over tokens
    train, evaluation = (datasets[split].with_format("numpy") for split in ("train", "validation"))
    if len(evaluation) == 0:
        evaluation = None
    elif len(evaluation) > args.eval_blocks:
        evaluation = evaluation.select(range(args.eval_blocks))
    return model, tokenizer, train, evaluation, collator, training, metadata


def make_trainer_class():
    from transformers import Trainer

    class MLMTrainer(Trainer):
        """Adds perplexity to evaluations and training throughput (tokens/s) to the logs."""

        def __init__(self, *args, tokens_per_step: int = 0, **kwargs):
            super().__init__(*args, **kwargs)
            self._tokens_per_step = tokens_per_step
            self._last_log = (time.perf_counter(), 0)

        def evaluate(self, *args, **kwargs):
            import torch

            # The same masks at every evaluation (comparable numbers), drawn from a forked generator so
            # that evaluating does not shift the training run's random stream.
            collator = self.data_collator
            collator.use_stream("eval", restart=True)
            try:
                with torch.random.fork_rng(devices=[]):
                    metrics = super().evaluate(*args, **kwargs)
            finally:
                collator.use_stream("train")
            if "eval_loss" in metrics:
                metrics["eval_perplexity"] = math.exp(min(metrics["eval_loss"], 50.0))
                self.state.log_history[-1]["eval_perplexity"] = metrics["eval_perplexity"]
            return metrics

        def log(self, logs, *args, **kwargs):
            if "loss" in logs:
                now, step = time.perf_counter(), self.state.global_step
                then, last_step = self._last_log
                if step > last_step:
                    logs["tokens_per_second"] = (step - last_step) * self._tokens_per_step / (now - then)
                self._last_log = (now, step)
            super().log(logs, *args, **kwargs)

    return MLMTrainer


def _resume_masking_callback(collator):
    from transformers import TrainerCallback

    class ResumeMasking(TrainerCallback):
        """On resume, the Trainer skips the batches already trained on without collating them: move the
        collator's batch count past them so batch k is masked as in an uninterrupted run."""

        def on_train_begin(self, args, state, control, **kwargs):
            collator.calls = state.global_step * args.gradient_accumulation_steps

        def on_epoch_begin(self, args, state, control, **kwargs):
            # DataLoader workers collate with copies of the collator made when the epoch's iterator starts
            collator.calls = state.global_step * args.gradient_accumulation_steps

    return ResumeMasking()


@writes_output("args", "output_dir")
def pretrain_mlm(args: PretrainArguments, callbacks: list | None = None) -> dict:
    """Pre-train, evaluate, save model + tokenizer + logs to `args.output_dir`; returns the final metrics."""
    output_dir = Path(args.output_dir)
    resume_from = common.resume_checkpoint(args)
    if (done := common.finished_run(args)) is not None:
        return done
    model, tokenizer, train, evaluation, collator, training, metadata = prepare(args)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    tokens_per_step = (
        training["batch_size"] * args.gradient_accumulation_steps * world * metadata["max_length"]
    )

    resolved = dataclasses.replace(
        args, max_steps=training["max_steps"], batch_size=training["batch_size"],
        eval_batch_size=training["batch_size"], learning_rate=training["learning_rate"],
        warmup_ratio=training["warmup"],
    )  # fmt: skip
    training_args = training_arguments(
        resolved,
        evaluating=evaluation is not None,
        lr_scheduler_type="linear",
        eval_on_start=evaluation is not None and resume_from is None,  # the curve starts at step 0
        remove_unused_columns=False,  # the collator reads eojeol_ids / morpheme_ids
        prediction_loss_only=True,
        **throughput_settings(args, len(train), training["batch_size"] * args.gradient_accumulation_steps),
    )
    if training_args.torch_compile:
        common.fresh_compile_state()
    # read as the Trainer makes its accelerator, and as it compiles (regional: layer by layer)
    with common.trainer_compile_settings(regional=args.compile == "regions"):
        trainer = make_trainer_class()(
            model=model,
            args=training_args,
            train_dataset=train,
            eval_dataset=evaluation,
            data_collator=collator,
            processing_class=tokenizer,
            callbacks=[_resume_masking_callback(collator), *(callbacks or [])],
            tokens_per_step=tokens_per_step,
        )
        common.quiet_trainer(trainer, args.quiet)
        output = common.train_or_finish(trainer, resume_from, args)
        if common.stopped_by_budget(callbacks):
            return {"finished": False, "steps": trainer.state.global_step}
        metrics = {"train_loss": common.run_train_loss(trainer, output), "steps": trainer.state.global_step}
        if evaluation is not None:
            metrics.update(
                {
                    k: v
                    for k, v in common.final_evaluation(trainer).items()
                    if k in ("eval_loss", "eval_perplexity")
                }
            )
    history = trainer.state.log_history
    common.save_run(
        trainer, tokenizer, output_dir, "kolong_pretrain_results.json", args, metrics, log_history=history
    )
    if trainer.is_world_process_zero():
        plot_losses(
            history, output_dir / "loss.png", title=f"{args.preset} / {model.config.position_encoding}"
        )
    return metrics


def throughput_settings(args: PretrainArguments, train_rows: int = 0, batch_rows: int = 0) -> dict:
    """TrainingArguments that keep a GPU busy (`args.extra` still wins): fused AdamW, masking in
    DataLoader workers, torch.compile, and no per-step host synchronisation to filter NaN losses.

    A compiled run drops each epoch's short last batch (when the split holds a whole batch): a new batch
    shape would recompile the model, the second time with dynamic shapes for the rest of the run.
    Workers are not persistent: the collator numbers each epoch's batches from the epoch's start (seeded
    masks, exact resume), which workers kept from the last epoch would not."""
    from kolong.training.common import has_gpu

    gpu = has_gpu()
    compiled = args.compile in ("yes", "regions") or (args.compile == "auto" and gpu)
    settings = {
        "optim": "adamw_torch_fused" if gpu else "adamw_torch",
        "dataloader_num_workers": min(4, max(1, (os.cpu_count() or 2) - 1)) if gpu else 0,
        "torch_compile": compiled,
        "logging_nan_inf_filter": False,
    }
    if compiled and 0 < batch_rows <= train_rows:
        settings["dataloader_drop_last"] = True
    return settings


def plot_losses(history: list[dict], output: Path, title: str = "") -> Path | None:
    """Training and held-out MLM loss against step."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(h["step"], h["loss"]) for h in history if "loss" in h]
    held_out = [(h["step"], h["eval_loss"]) for h in history if "eval_loss" in h]
    if not train and not held_out:
        return None
    figure, axis = plt.subplots(figsize=(6, 4))
    for points, label in ((train, "training loss"), (held_out, "held-out loss")):
        if points:
            axis.plot(
                *zip(*points, strict=True), label=label, marker="o" if label.startswith("held") else None
            )
    axis.set_xlabel("step")
    axis.set_ylabel("MLM loss")
    axis.set_title(title)
    axis.legend()
    return save_figure(figure, output)


def read_log(output_dir: str | Path) -> dict:
    return json.loads((Path(output_dir) / "kolong_pretrain_results.json").read_text(encoding="utf-8"))
