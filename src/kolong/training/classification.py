"""Sentence and pair classification / regression fine-tuning over the HF `Trainer`: `kolong finetune cls`.

Works for any checkpoint with a sequence-classification head in transformers (BERT, RoBERTa, ELECTRA,
...) and for kolong's encoder. Classification reports accuracy and macro F1 (scikit-learn),
regression Pearson and Spearman correlations (scipy), all in percent as KLUE and KorQuAD report theirs;
the best checkpoint by the main metric is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kolong.data.classification import ClassificationData, load_classification_data
from kolong.io import writes_output
from kolong.knowledge import KnowledgeCollator, KnowledgeInjector, knowledge_for_training
from kolong.training import common
from kolong.training.arguments import (
    ClassificationArguments,
    training_arguments,
)
from kolong.training.length_tuning import attention_dropout_past_original
from kolong.training.prediction import cut_count, warn_cut

DEFAULT_MAX_LENGTH = 128  # tokens per example unless the model has fewer positions (finetune and predict cls)


def classification_intervals(
    predictions: np.ndarray, labels: np.ndarray, regression: bool, seed: int = 0
) -> dict:
    """Bootstrap 95% intervals over evaluation examples of each metric of `classification_metrics`."""
    from kolong.evaluation.bootstrap import statistic_interval

    if regression:
        from scipy.stats import spearmanr

        scores = predictions.reshape(-1)

        def correlation(rows, rank: bool) -> float:
            x, y = scores[rows], labels[rows]
            if np.ptp(x) == 0 or np.ptp(y) == 0:
                return 0.0
            return 100.0 * (float(spearmanr(x, y)[0]) if rank else float(np.corrcoef(x, y)[0, 1]))

        return {name: statistic_interval(lambda rows, rank=rank: correlation(rows, rank), len(labels), seed=seed)
                for name, rank in (("pearson", False), ("spearman", True))}  # fmt: skip
    chosen, classes = predictions.argmax(axis=-1), predictions.shape[-1]

    def macro_f1(rows) -> float:  # sklearn's average="macro": over the labels present in either side
        predicted, gold = chosen[rows], labels[rows]
        hits = np.bincount(gold[predicted == gold], minlength=classes)
        counted = np.bincount(predicted, minlength=classes) + np.bincount(gold, minlength=classes)
        present = counted > 0
        return 100.0 * float((2 * hits[present] / counted[present]).mean())

    def accuracy(rows) -> float:
        return 100.0 * float((chosen[rows] == labels[rows]).mean())

    return {name: statistic_interval(statistic, len(labels), seed=seed)
            for name, statistic in (("accuracy", accuracy), ("macro_f1", macro_f1))}  # fmt: skip


def classification_metrics(predictions: np.ndarray, labels: np.ndarray, regression: bool) -> dict[str, float]:
    if regression:
        from scipy.stats import pearsonr, spearmanr

        predictions = predictions.reshape(-1)
        if np.ptp(predictions) == 0 or np.ptp(labels) == 0:  # correlation undefined for a constant
            return {"pearson": 0.0, "spearman": 0.0}
        return {
            "pearson": 100.0 * float(pearsonr(predictions, labels)[0]),
            "spearman": 100.0 * float(spearmanr(predictions, labels)[0]),
        }
    from sklearn.metrics import accuracy_score, f1_score

    chosen = predictions.argmax(axis=-1)
    return {
        "accuracy": 100.0 * float(accuracy_score(labels, chosen)),
        "macro_f1": 100.0 * float(f1_score(labels, chosen, average="macro")),
    }


def _encode(tokenizer, data: ClassificationData, max_length: int, injector=None, report=lambda line: None):
    """The training and evaluation sets; with a `KnowledgeInjector`, as K-BERT's sentence trees."""
    from datasets import Dataset

    def encode(examples, part: str):
        texts = [e.text for e in examples]
        pairs = [e.pair for e in examples] if any(e.pair for e in examples) else None
        encoded = tokenizer(texts, pairs, truncation=True, max_length=max_length)
        cut = cut_count(encoded, tokenizer, texts, pairs, max_length)
        warn_cut(cut, len(texts), f"{part} examples", f"--max-length {max_length} tokens", "the model sees their first "
                 f"{max_length} tokens")  # fmt: skip
        if injector is not None:
            encoded = injector.trees(encoded)  # the encoding above is the trees' trunks
            del encoded["trunk_index"]
            report(injector.report(len(texts), f"{part} examples"))
        encoded["labels"] = [e.label for e in examples]
        return Dataset.from_dict(dict(encoded))

    return encode(data.train, "training"), encode(data.eval, "evaluation")


@writes_output("args", "output_dir")
def finetune_cls(
    args: ClassificationArguments,
    wrap_trainer=None,
    callbacks: list | None = None,
    report: Callable[[str], None] = lambda message: None,
) -> dict:
    """Fine-tune, evaluate (with bootstrap intervals), save to `args.output_dir`; returns the metrics.

    `wrap_trainer(cls) -> subclass` changes the Trainer (`kolong distill` adds its loss); `callbacks` are
    added to the Trainer's (a `time_budget` among them may end the call early: see `common.stopped_by_budget`);
    `report` receives a line at each stage of the preparation (the command prints them)."""
    from transformers import (
        AutoModelForSequenceClassification,
        DataCollatorWithPadding,
        EarlyStoppingCallback,
        Trainer,
    )

    from kolong.checkpoints import CLASSIFIER_HEADS, load_model, load_tokenizer
    from kolong.extension.reach import max_length_for

    output_dir = Path(args.output_dir)
    resume_from = common.resume_checkpoint(args)
    if (done := common.finished_run(args)) is not None:
        return done
    data = load_classification_data(args.data, args.eval_data, args.shared_data, args.seed, args.limit)
    tokenizer = load_tokenizer(args.model)
    label_settings = (
        dict(num_labels=1, problem_type="regression")
        if data.is_regression
        else dict(num_labels=len(data.labels), id2label=dict(enumerate(data.labels)),
                  label2id={name: i for i, name in enumerate(data.labels)}, problem_type="single_label_classification")
    )  # fmt: skip
    model = load_model(
        args.model, AutoModelForSequenceClassification, new_head=CLASSIFIER_HEADS, **label_settings
    )
    max_length = max_length_for(model, args.max_length, DEFAULT_MAX_LENGTH, args.model)
    attention_dropout_past_original(model, max_length, args.keep_attention_dropout, report)
    graph = knowledge_for_training(args.knowledge, args.max_triples, model, args.model)
    injector = None if graph is None else KnowledgeInjector(graph, tokenizer, max_length, model)
    started = time.perf_counter()
    report(
        f"{args.data}: {len(data.train):,} training and {len(data.eval):,} evaluation examples; tokenising"
    )
    train, evaluation = _encode(tokenizer, data, max_length, injector, report)
    report(f"tokenised in {time.perf_counter() - started:.1f} s")
    if data.is_regression:
        from datasets import Value

        train, evaluation = (part.cast_column("labels", Value("float32")) for part in (train, evaluation))

    main_metric = "pearson" if data.is_regression else "accuracy"
    last = {}  # the latest evaluation's predictions, for the intervals of the final metrics

    def compute_metrics(prediction):
        last.update(predictions=prediction.predictions, labels=prediction.label_ids)
        return classification_metrics(prediction.predictions, prediction.label_ids, data.is_regression)

    callbacks = list(callbacks or [])
    if args.early_stopping_patience:
        callbacks.append(EarlyStoppingCallback(args.early_stopping_patience))
    trainer = (wrap_trainer(Trainer) if wrap_trainer else Trainer)(
        model=model,
        # the trees' branch and entity columns are not the model's arguments: the collator reads them
        args=training_arguments(
            args, evaluating=True, metric=main_metric, remove_unused_columns=graph is None
        ),
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=DataCollatorWithPadding(tokenizer)
        if graph is None
        else KnowledgeCollator(tokenizer.pad_token_id),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        callbacks=callbacks,
    )
    common.quiet_trainer(trainer, args.quiet)
    output = common.train_or_finish(trainer, resume_from, args)
    if common.stopped_by_budget(callbacks):
        return {"finished": False, "steps": trainer.state.global_step}
    metrics = {key.removeprefix("eval_"): value for key, value in common.final_evaluation(trainer).items()}
    metrics["intervals"] = classification_intervals(
        last["predictions"], last["labels"], data.is_regression, args.seed
    )
    metrics.update(train_loss=common.run_train_loss(trainer, output), train_examples=len(data.train),
                   eval_examples=len(data.eval), data=data.name)  # fmt: skip
    common.save_run(trainer, tokenizer, output_dir, "kolong_cls_results.json", args, metrics)
    return metrics
