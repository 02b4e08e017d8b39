"""Extractive QA fine-tuning and prediction over the HF `Trainer` (so torchrun / accelerate scale it).

`finetune_qa` is what `kolong finetune qa` runs; `predict_qa` is `kolong predict qa`. Evaluation during
training decodes answers over all windows and scores them with the official KorQuAD metric, so early
stopping and "best model" use eval F1, not a token-level proxy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kolong.checkpoints import load_model, load_tokenizer
from kolong.data.qa_features import (
    STRATEGIES,
    QAFeatures,
    WindowCollator,
    build_features,
    check_stride,
    compiles_per_length,
    default_stride,
    prediction_windows,
    record_windows,
    stack_logits,
    window_batches,
)
from kolong.data.shared import KORQUAD_DEV, shared_file
from kolong.data.squad import gold_answers, read_squad
from kolong.errors import ConfigError, DataError
from kolong.evaluation.korquad import score_intervals, score_questions
from kolong.evaluation.qa_postprocess import decode_answers
from kolong.extension.reach import max_length_for, model_max_length
from kolong.io import atomic_write_json, writes_output
from kolong.training import common
from kolong.training.arguments import (
    QAFinetuneArguments,
    QAPredictArguments,
    training_arguments,
)
from kolong.training.length_tuning import attention_dropout_past_original
from kolong.training.prediction import first, progress
from kolong.training.run_log import titles_record

# Windows `finetune qa` trains on when no --max-length is given, for a model that reads more: a whole
# KorQuAD article is 1,000-2,000 tokens, and longer windows cost memory quadratically (docs/qa.md).
DEFAULT_MAX_LENGTH = 2048


def _dataset(features: QAFeatures, with_labels: bool):
    from datasets import Dataset

    return Dataset.from_dict(features.model_inputs(with_labels)).with_format("torch")


def make_qa_trainer_class():
    from transformers import Trainer

    class QATrainer(Trainer):
        """A Trainer whose `evaluate` decodes answers over all windows and reports official EM/F1."""

        def __init__(self, *args, eval_examples=None, eval_features=None, decode_options=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.eval_examples = eval_examples
            self.eval_features = eval_features
            self.decode_options = decode_options or {}

        def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"):
            if self.eval_examples is None:
                return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
            output = self.predict(self.eval_dataset, metric_key_prefix=metric_key_prefix)
            start_logits, end_logits = output.predictions[:2]
            predictions, _ = decode_answers(
                self.eval_examples, self.eval_features, start_logits, end_logits, **self.decode_options
            )
            self.last_predictions = predictions
            scores = score_questions(gold_answers(self.eval_examples), predictions)
            metrics = {f"{metric_key_prefix}_{k}": v for k, v in scores.items() if k in ("exact_match", "f1")}
            metrics.update({k: v for k, v in output.metrics.items() if k.endswith(("runtime", "per_second"))})
            self.log(metrics)
            self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
            return metrics

    return QATrainer


def windows(
    tokenizer, examples: list, args, max_length: int, what: str, report: Callable[[str], None], stride: int
) -> QAFeatures:
    """`build_features` of `examples` with `args`' strategy, stride and padding, reported before and after:
    tokenising thousands of long documents takes minutes on a CPU."""
    started = time.perf_counter()
    characters = sum(len(e.context) for e in examples)
    report(f"{what}: {len(examples):,} questions ({characters:,} context characters) into windows of up to "
           f"{max_length} tokens")  # fmt: skip
    features = build_features(tokenizer, examples, max_length, args.strategy, stride, args.pad_to_max_length)
    report(f"{what}: {len(features):,} windows in {time.perf_counter() - started:.1f} s")
    return features


@writes_output("args", "output_dir")
def finetune_qa(
    args: QAFinetuneArguments,
    wrap_trainer=None,
    callbacks: list | None = None,
    report: Callable[[str], None] = lambda message: None,
) -> dict:
    """Fine-tune, evaluate, save model + tokenizer to `args.output_dir`; returns the final metrics.

    `wrap_trainer(cls) -> subclass` changes the Trainer (`kolong distill` adds its loss); `callbacks` are
    added to the Trainer's (a `time_budget` among them may end the call early: see `common.stopped_by_budget`);
    `report` receives a line at each stage of the preparation (the command prints them)."""
    from transformers import AutoModelForQuestionAnswering, EarlyStoppingCallback, default_data_collator

    if args.strategy not in STRATEGIES:
        raise DataError(f"unknown strategy {args.strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if args.early_stopping_patience and not args.eval:
        raise DataError("--early-stopping-patience needs --eval data")
    output_dir = Path(args.output_dir)
    resume_from = common.resume_checkpoint(args)
    if (done := common.finished_run(args)) is not None:
        return done

    tokenizer = load_tokenizer(args.model)  # a bad path or tokenizer is named, never a traceback
    # start and end logits: a checkpoint with another head (a tagger's 13 labels) would size qa_outputs by it
    model = load_model(args.model, AutoModelForQuestionAnswering, num_labels=2)
    max_length = max_length_for(model, args.max_length, DEFAULT_MAX_LENGTH, args.model)
    stride = default_stride(max_length) if args.doc_stride is None else args.doc_stride
    if args.strategy == "sliding-window":
        check_stride(max_length, stride)
    if args.max_length is None:
        report(f"windows of {max_length} tokens (the model's positions, at most {DEFAULT_MAX_LENGTH:,}; "
               "--max-length to change)")  # fmt: skip
    record_windows(model, tokenizer, max_length, stride)  # in every checkpoint and the final model
    attention_dropout_past_original(model, max_length, args.keep_attention_dropout, report)

    train_set = read_squad(args.train, args.on_bad_example)
    train_examples = train_set.examples[: args.max_train_samples]
    train_features = windows(tokenizer, train_examples, args, max_length, "training", report, stride)
    eval_examples = eval_features = None
    if args.eval:
        eval_examples = read_squad(args.eval, args.on_bad_example, split="validation").examples
        eval_examples = eval_examples[: args.max_eval_samples]
        eval_features = windows(tokenizer, eval_examples, args, max_length, "evaluation", report, stride)
    padding = args.pad_to_max_length

    training_args = training_arguments(args, evaluating=bool(args.eval), metric="f1" if args.eval else None)
    callbacks = list(callbacks or [])
    if args.early_stopping_patience:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=args.early_stopping_patience))
    collator = (
        default_data_collator
        if padding
        else WindowCollator(tokenizer, max_length, compiles_per_length(model, training_args.device))
    )
    trainer_class = make_qa_trainer_class()
    trainer = (wrap_trainer(trainer_class) if wrap_trainer else trainer_class)(
        model=model,
        args=training_args,
        train_dataset=_dataset(train_features, with_labels=True),
        eval_dataset=_dataset(eval_features, with_labels=False) if eval_features is not None else None,
        data_collator=collator,
        processing_class=tokenizer,
        callbacks=callbacks,
        eval_examples=eval_examples,
        eval_features=eval_features,
        decode_options={"n_best": args.n_best, "max_answer_length": args.max_answer_length},
    )
    common.quiet_trainer(trainer, args.quiet)
    trainer.kolong_training_data = titles_record(train_examples, len(train_features))
    train_output = common.train_or_finish(trainer, resume_from, args)
    if common.stopped_by_budget(callbacks):
        return {"finished": False, "steps": trainer.state.global_step}
    metrics = {
        "train_loss": common.run_train_loss(trainer, train_output),
        "train_examples": len(train_examples),
        "train_windows": len(train_features),
        "skipped_examples": [qid for qid, _ in train_set.skipped],
        "resumed_from": resume_from,
    }
    if args.eval:
        metrics.update(common.final_evaluation(trainer))
        metrics["intervals"] = score_intervals(
            gold_answers(eval_examples), trainer.last_predictions, seed=args.seed
        )
    common.save_run(trainer, tokenizer, output_dir, "kolong_qa_results.json", args, metrics)
    return metrics


def predict_logits(
    model, features: QAFeatures, batch_size: int, compile: bool = False, tokenizer=None
) -> tuple[np.ndarray, np.ndarray]:
    """Start/end logits of every window, through `Trainer.predict` (device placement, fp16/bf16, DDP); a
    quantized model (`kolong quantize`), which the Trainer refuses even to predict, and a compiled one in a
    plain loop. Windows of different lengths (`build_features(padding=False)`) need the `tokenizer`: each
    batch is padded to its longest window, and the logits come back (windows, longest window)."""
    import tempfile

    from transformers import Trainer, TrainingArguments, default_data_collator

    plainly = getattr(model, "is_quantized", False) or compile
    device = model.device if plainly or not common.has_gpu() else "cuda"  # where the Trainer would put it
    coarse = compiles_per_length(model, device)
    collate = (
        WindowCollator(tokenizer, model_max_length(model), coarse) if tokenizer else default_data_collator
    )
    if plainly:
        import torch

        runner = torch.compile(model) if compile else model
        return _predict_plainly(runner, model.device, features, batch_size, collate)

    from transformers import TrainerCallback

    class Advance(TrainerCallback):  # kolong's progress (a bar, or lines in a log) in place of HF's bar
        def on_prediction_step(self, args, state, control, **kwargs):
            advance(batch_size)

    with (
        tempfile.TemporaryDirectory(prefix="kolong-predict-") as scratch,
        progress(len(features), "window") as advance,
    ):
        args = TrainingArguments(
            output_dir=scratch,
            per_device_eval_batch_size=batch_size,
            report_to="none",
            dataloader_pin_memory=common.has_gpu(),
            disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=args, data_collator=collate, callbacks=[Advance()])
        output = trainer.predict(_dataset(features, with_labels=False))
    return output.predictions[0], output.predictions[1]  # batches of different lengths: padded with -100


def _predict_plainly(model, device, features, batch_size: int, collate) -> tuple[np.ndarray, np.ndarray]:
    import torch

    starts, ends = [], []
    with torch.inference_mode(), progress(len(features), "window") as advance:
        for batch in window_batches(features, batch_size, collate):
            advance(len(batch["input_ids"]))
            output = model(**{name: tensor.to(device) for name, tensor in batch.items()})
            starts.append(output.start_logits.float().cpu().numpy())
            ends.append(output.end_logits.float().cpu().numpy())
    return stack_logits(starts), stack_logits(ends)


def predict_qa(args: QAPredictArguments, report: Callable[[str], None] = lambda message: None) -> dict:
    """Write {id: answer} (and optionally the n-best lists) for every question of `args.data`; existing
    output files are refused unless `args.overwrite`, and both are written whole or not at all."""
    import contextlib

    from kolong.io import atomic_output_file

    outputs = [path for path in (args.output, args.nbest_output) if path]
    if len({Path(path).absolute() for path in outputs}) < len(outputs):
        raise ConfigError("--output and --nbest_output name the same file")
    with contextlib.ExitStack() as stack:
        # checked and locked before the slow part
        staged = [stack.enter_context(atomic_output_file(path, args.overwrite)) for path in outputs]
        predictions, nbest, summary = _predict(args, report)
        atomic_write_json(staged[0], predictions)
        if args.nbest_output:
            atomic_write_json(staged[1], nbest)
    return summary


def _predict(args: QAPredictArguments, report: Callable[[str], None]) -> tuple[dict, dict, dict]:
    from transformers import AutoModelForQuestionAnswering

    data = shared_file(KORQUAD_DEV, args.shared_data) if args.data == "korquad" else args.data
    dataset = read_squad(data, args.on_bad_example, split="validation", questions_only=True)
    dataset.examples = first(dataset.examples, args.max_predict_samples, "questions")
    tokenizer = load_tokenizer(args.model)
    model = load_model(
        args.model, AutoModelForQuestionAnswering, all_weights="fine-tune it first with `kolong finetune qa`"
    ).eval()
    max_length, stride = prediction_windows(model, tokenizer, args.max_length, args.doc_stride, args.model)
    features = windows(tokenizer, dataset.examples, args, max_length, "prediction", report, stride)
    start_logits, end_logits = predict_logits(model, features, args.batch_size, args.compile, tokenizer)
    predictions, nbest = decode_answers(
        dataset.examples,
        features,
        start_logits,
        end_logits,
        n_best=args.n_best,
        max_answer_length=args.max_answer_length,
        allow_no_answer=args.allow_no_answer,
        null_threshold=args.null_threshold,
    )
    return (
        predictions,
        nbest,
        {
            "questions": len(dataset),
            "windows": len(features),
            "max_length": max_length,
            "skipped_examples": len(dataset.skipped),
        },
    )
