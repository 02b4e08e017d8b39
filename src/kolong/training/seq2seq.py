"""Byte-level text-to-text fine-tuning over the HF `Trainer`: what `kolong finetune seq2seq` runs.

Tasks are cast to text (`kolong.data.text_to_text`: labels as words; KLUE-NER as the sentence regenerated
with ``<entity:TAG>`` markup); evaluation generates (greedy or beam search, with a maximum length) and
scores the generated text; a generation that is not a valid answer is counted as malformed (and wrong),
never an error. Resumes from the last checkpoint in the output directory (unless `overwrite`), and writes
its final files (model, tokenizer, results, predictions) so that each appears whole or not at all.
"""

from __future__ import annotations

import json
from pathlib import Path

from kolong.checkpoints import load_byte_model
from kolong.data.text_to_text import Seq2SeqTask, TextPair, load_task, read_text_pairs, score_generations
from kolong.errors import DataError
from kolong.io import atomic_write_text, writes_output
from kolong.training.arguments import (
    Seq2SeqFinetuneArguments,
    SpanPretrainArguments,
    check_eval_every,
    training_arguments,
)
from kolong.training.common import (
    quiet_trainer,
    resume_checkpoint,
    run_train_loss,
    save_run,
    stopped_by_budget,
    train_or_finish,
)
from kolong.training.span import pretrain_span

# Kept importable from here: the recipe's task types, and its span pre-training sibling.
__all__ = [
    "Seq2SeqFinetuneArguments", "Seq2SeqTask", "SpanPretrainArguments", "TextPair", "finetune_seq2seq",
    "load_task", "pretrain_span", "read_text_pairs", "score_generations",
]  # fmt: skip


def _encode(tokenizer, pairs: list[TextPair], max_source_length: int, max_target_length: int, part: str):
    from datasets import Dataset

    from kolong.training.prediction import cut_count, warn_cut

    texts = {"source": [p.source for p in pairs], "target": [p.target for p in pairs]}
    sources = tokenizer(texts["source"], truncation=True, max_length=max_source_length)
    targets = tokenizer(texts["target"], truncation=True, max_length=max_target_length)
    for side, encoded, limit, consequence in (
        ("source", sources, max_source_length, "the model reads their first bytes only"),
        ("target", targets, max_target_length, "the model learns to stop there"),
    ):
        cut = cut_count(encoded, tokenizer, texts[side], None, limit)
        warn_cut(cut, len(pairs), f"{part} {side}s", f"--max-{side}-length {limit} tokens", consequence)
    return Dataset.from_dict(
        {
            "input_ids": sources["input_ids"],
            "attention_mask": sources["attention_mask"],
            "labels": targets["input_ids"],
        }
    )


def make_text_to_text_trainer_class():
    from transformers import Seq2SeqTrainer

    class TextToTextTrainer(Seq2SeqTrainer):
        """A Seq2SeqTrainer whose `evaluate` generates, decodes and scores the task (malformed counted)."""

        def __init__(self, *args, task=None, eval_pairs=None, generation=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.task = task
            self.eval_pairs = eval_pairs
            self.generation = generation or {}
            self.last_generations: list[str] = []

        def evaluate(
            self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval", **gen_kwargs
        ):
            import numpy as np

            output = self.predict(
                eval_dataset if eval_dataset is not None else self.eval_dataset,
                ignore_keys=ignore_keys,
                metric_key_prefix=metric_key_prefix,
                **{**self.generation, **gen_kwargs},
            )
            ids = np.where(output.predictions < 0, self.processing_class.pad_token_id, output.predictions)
            self.last_generations = self.processing_class.batch_decode(ids.tolist(), skip_special_tokens=True)
            scores = score_generations(self.task, self.eval_pairs, self.last_generations)
            metrics = {f"{metric_key_prefix}_{k}": v for k, v in scores.items()}
            metrics.update(
                {k: v for k, v in output.metrics.items() if k.endswith(("loss", "runtime", "per_second"))}
            )
            self.log(metrics)
            self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
            return metrics

    return TextToTextTrainer


@writes_output("args", "output_dir")
def finetune_seq2seq(args: Seq2SeqFinetuneArguments, callbacks: list | None = None) -> dict:
    """Fine-tune a byte model on a text-to-text task, evaluate by generation, save model and predictions.

    `callbacks` are added to the Trainer's (a `time_budget` among them may end the call early)."""
    from transformers import DataCollatorForSeq2Seq, EarlyStoppingCallback

    check_eval_every(args.eval_every)
    if args.num_beams < 1:
        raise DataError(f"--num-beams must be at least 1, got {args.num_beams}")
    output_dir = Path(args.output_dir)
    resume_from = resume_checkpoint(args)
    task = load_task(args.task, args.train, args.eval, args.seed, args.eval_fraction, args.limit)
    model, tokenizer = load_byte_model(args.model, args.init, args.seed)
    max_new_tokens = args.max_new_tokens or (16 if task.kind == "classification" else args.max_target_length)
    generation = {"max_new_tokens": max_new_tokens, "num_beams": args.num_beams, "do_sample": False}

    training_args = training_arguments(
        args, evaluating=True, metric=task.main_metric, seq2seq=True, predict_with_generate=True
    )
    callbacks = list(callbacks or [])
    if args.early_stopping_patience:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=args.early_stopping_patience))
    trainer = make_text_to_text_trainer_class()(
        model=model,
        args=training_args,
        train_dataset=_encode(
            tokenizer, task.train, args.max_source_length, args.max_target_length, "training"
        ),
        eval_dataset=_encode(
            tokenizer, task.eval, args.max_source_length, args.max_target_length, "evaluation"
        ),
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        processing_class=tokenizer,
        callbacks=callbacks,
        task=task,
        eval_pairs=task.eval,
        generation=generation,
    )
    quiet_trainer(trainer, args.quiet)
    output = train_or_finish(trainer, resume_from)
    if stopped_by_budget(callbacks):
        return {"finished": False, "steps": trainer.state.global_step}
    metrics = {
        "task": task.name,
        "train_loss": run_train_loss(trainer, output),
        "steps": trainer.state.global_step,
        # this session's rate (absent when a resumed run had nothing left to train)
        "train_samples_per_second": output.metrics.get("train_samples_per_second"),
        "train_examples": len(task.train),
        "eval_examples": len(task.eval),
        "decoding": "greedy" if args.num_beams == 1 else f"beam search ({args.num_beams} beams)",
        "max_new_tokens": max_new_tokens,
        "resumed_from": resume_from,
    }
    metrics.update(trainer.evaluate())
    if task.kind == "classification":
        majority = max(sum(p.target == label for p in task.eval) for label in task.labels)
        metrics["eval_majority_class_accuracy"] = 100.0 * majority / len(task.eval)
    save_run(trainer, tokenizer, output_dir, "kolong_seq2seq_results.json", args, metrics)
    if trainer.is_world_process_zero():
        lines = [
            json.dumps(
                {"id": p.id, "input": p.source, "target": p.target, "prediction": g}, ensure_ascii=False
            )
            for p, g in zip(task.eval, trainer.last_generations, strict=True)
        ]
        atomic_write_text(output_dir / "predictions.jsonl", "\n".join(lines) + "\n")
    return metrics
