"""Sentence and pair classification / regression fine-tuning over the HF `Trainer`: `kolong finetune cls`.

Works for any checkpoint with a sequence-classification head in transformers (BERT, RoBERTa, ELECTRA,
...) and for kolong's encoder. Classification reports accuracy and macro F1 (scikit-learn),
regression Pearson and Spearman correlations (scipy); the best checkpoint by the main metric is kept.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kolong.data.classification import ClassificationData, load_classification_data
from kolong.io import atomic_write_json, writes_output
from kolong.training.arguments import (
    ClassificationArguments,
    recorded,
    training_arguments,
)
from kolong.training.common import (
    quiet_trainer,
    resume_checkpoint,
    run_train_loss,
    save_final,
    train_or_finish,
)


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


@writes_output("args", "output_dir")
def finetune_cls(args: ClassificationArguments) -> dict:
    from transformers import (
        AutoModelForSequenceClassification,
        DataCollatorWithPadding,
        EarlyStoppingCallback,
        Trainer,
    )

    from kolong.checkpoints import load_model, load_tokenizer
    from kolong.training.qa import check_length

    output_dir = Path(args.output_dir)
    resume_from = resume_checkpoint(args)
    data = load_classification_data(args.data, args.eval_data, args.shared_data, args.seed, args.limit)
    tokenizer = load_tokenizer(args.model)
    label_settings = (
        dict(num_labels=1, problem_type="regression")
        if data.is_regression
        else dict(num_labels=len(data.labels), id2label=dict(enumerate(data.labels)),
                  label2id={name: i for i, name in enumerate(data.labels)}, problem_type="single_label_classification")
    )  # fmt: skip
    model = load_model(args.model, AutoModelForSequenceClassification, **label_settings)
    check_length(model, args.max_length, args.model)
    train, evaluation = _encode(tokenizer, data, args.max_length)
    if data.is_regression:
        from datasets import Value

        train, evaluation = (part.cast_column("labels", Value("float32")) for part in (train, evaluation))

    main_metric = "pearson" if data.is_regression else "accuracy"
    callbacks = [EarlyStoppingCallback(args.early_stopping_patience)] if args.early_stopping_patience else []
    trainer = Trainer(
        model=model,
        args=training_arguments(args, evaluating=True, metric=main_metric),
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
        compute_metrics=lambda p: classification_metrics(p.predictions, p.label_ids, data.is_regression),
        callbacks=callbacks,
    )
    quiet_trainer(trainer, args.quiet)
    output = train_or_finish(trainer, resume_from)
    metrics = {key.removeprefix("eval_"): value for key, value in trainer.evaluate().items()}
    metrics.update(train_loss=run_train_loss(trainer, output), train_examples=len(data.train),
                   eval_examples=len(data.eval), data=data.name)  # fmt: skip
    save_final(trainer, tokenizer, output_dir)
    if trainer.is_world_process_zero():
        atomic_write_json(output_dir / "cls_results.json", {"arguments": recorded(args), "metrics": metrics})
    return metrics
