"""Sentence and pair classification / regression fine-tuning over the HF `Trainer`: `kolong finetune cls`.

Works for any checkpoint with a sequence-classification head in transformers (BERT, RoBERTa, ELECTRA,
...) and for kolong's encoder. Classification reports accuracy and macro F1 (scikit-learn),
regression Pearson and Spearman correlations (scipy); the best checkpoint by the main metric is kept.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from kolong.data.classification import ClassificationData, load_classification_data
from kolong.io import atomic_write_json


@dataclass
class ClassificationArguments:
    """Arguments of `kolong finetune cls` (each is also a CLI option)."""

    model: str
    """Checkpoint to fine-tune (a classification head is created if it has none)."""
    data: str
    """nsmc | klue-nli | klue-sts | kornli | korsts | a .tsv/.csv/.jsonl file."""
    output_dir: str
    eval_data: str | None = None
    """Evaluation file for a FILE dataset (default: 20% of it, seeded)."""
    shared_data: str = "../shared/data"
    max_length: int = 128
    epochs: float = 3.0
    learning_rate: float = 5e-5
    batch_size: int = 32
    eval_batch_size: int = 64
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_steps: int = -1
    limit: int | None = None
    """Use at most this many training examples (NSMC: reviews per class and split, see kolong.data.nsmc)."""
    seed: int = 42
    bf16: str = "auto"
    eval_every: str = "epoch"
    """epoch | N (steps)."""
    early_stopping_patience: int | None = None
    logging_steps: int = 20
    overwrite: bool = False
    save_total_limit: int = 2
    extra: dict = field(default_factory=dict)


def classification_metrics(predictions: np.ndarray, labels: np.ndarray, regression: bool) -> dict[str, float]:
    if regression:
        from scipy.stats import pearsonr, spearmanr

        predictions = predictions.reshape(-1)
        if np.ptp(predictions) == 0 or np.ptp(labels) == 0:  # correlation undefined for a constant
            return {"pearson": 0.0, "spearman": 0.0}
        return {
            "pearson": float(pearsonr(predictions, labels)[0]),
            "spearman": float(spearmanr(predictions, labels)[0]),
        }
    from sklearn.metrics import accuracy_score, f1_score

    chosen = predictions.argmax(axis=-1)
    return {
        "accuracy": float(accuracy_score(labels, chosen)),
        "macro_f1": float(f1_score(labels, chosen, average="macro")),
    }


def _encode(tokenizer, data: ClassificationData, max_length: int):
    from datasets import Dataset

    def encode(examples):
        texts = [e.text for e in examples]
        pairs = [e.pair for e in examples] if any(e.pair for e in examples) else None
        encoded = tokenizer(texts, pairs, truncation=True, max_length=max_length)
        encoded["labels"] = [e.label for e in examples]
        return Dataset.from_dict(dict(encoded))

    return encode(data.train), encode(data.eval)


def finetune_cls(args: ClassificationArguments) -> dict:
    from transformers import (
        AutoModelForSequenceClassification,
        DataCollatorWithPadding,
        EarlyStoppingCallback,
        Trainer,
        TrainingArguments,
    )

    from kolong.checkpoints import load_config, load_tokenizer
    from kolong.training.common import device_settings, resume_point
    from kolong.training.qa import check_length

    output_dir = Path(args.output_dir)
    resume_from = resume_point(output_dir, args.overwrite)
    data = load_classification_data(args.data, args.eval_data, args.shared_data, args.seed, args.limit)
    tokenizer = load_tokenizer(args.model)
    load_config(args.model)  # names a bad path before transformers does
    label_settings = (
        dict(num_labels=1, problem_type="regression")
        if data.is_regression
        else dict(num_labels=len(data.labels), id2label=dict(enumerate(data.labels)),
                  label2id={name: i for i, name in enumerate(data.labels)}, problem_type="single_label_classification")
    )  # fmt: skip
    model = AutoModelForSequenceClassification.from_pretrained(args.model, **label_settings)
    check_length(model, args.max_length, args.model)
    train, evaluation = _encode(tokenizer, data, args.max_length)
    if data.is_regression:
        from datasets import Value

        train, evaluation = (part.cast_column("labels", Value("float32")) for part in (train, evaluation))

    main_metric = "pearson" if data.is_regression else "accuracy"
    by_steps = args.eval_every != "epoch"
    strategy = "steps" if by_steps else "epoch"
    settings = dict(
        output_dir=str(output_dir),
        num_train_epochs=args.epochs,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.eval_batch_size,
        warmup_steps=args.warmup_ratio,
        weight_decay=args.weight_decay,
        seed=args.seed,
        data_seed=args.seed,
        eval_strategy=strategy,
        save_strategy=strategy,
        eval_steps=int(args.eval_every) if by_steps else None,
        save_steps=int(args.eval_every) if by_steps else 500,
        save_total_limit=args.save_total_limit,
        load_best_model_at_end=True,
        metric_for_best_model=main_metric,
        greater_is_better=True,
        logging_steps=args.logging_steps,
        report_to="none",
        **device_settings(args.bf16),
    )
    callbacks = [EarlyStoppingCallback(args.early_stopping_patience)] if args.early_stopping_patience else []
    trainer = Trainer(
        model=model,
        args=TrainingArguments(**{**settings, **args.extra}),
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
        compute_metrics=lambda p: classification_metrics(p.predictions, p.label_ids, data.is_regression),
        callbacks=callbacks,
    )
    output = trainer.train(resume_from_checkpoint=resume_from)
    metrics = {key.removeprefix("eval_"): value for key, value in trainer.evaluate().items()}
    metrics.update(train_loss=output.training_loss, train_examples=len(data.train), eval_examples=len(data.eval),
                   data=data.name)  # fmt: skip
    if trainer.is_world_process_zero():
        trainer.save_model(str(output_dir))
        tokenizer.save_pretrained(str(output_dir))
        atomic_write_json(output_dir / "cls_results.json", {"arguments": asdict(args), "metrics": metrics})
    return metrics
