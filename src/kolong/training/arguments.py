"""One argument model for every training recipe, and the one place it becomes HF `TrainingArguments`.

`RecipeArguments` holds what every recipe shares (model, output, the training fields); each recipe's
dataclass adds its own data and task fields and may change a default by declaring the field again.
Any other `TrainingArguments` field goes into `extra` under its HF name (`report_to`, `lr_scheduler_type`,
`gradient_checkpointing`, `push_to_hub`, ...) and wins over what kolong derives. The CLI builds its options
from these dataclasses (`kolong.cli.arguments`): each field is `--name_with_underscores` (as in HF's
example scripts) and `--name-with-dashes`, plus the aliases in its metadata.

This module imports nothing heavy: `--help` reads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kolong.data.shared import HELP as SHARED_HELP
from kolong.errors import ConfigError
from kolong.knowledge import DEFAULT_MAX_TRIPLES, KNOWLEDGE_HELP, MAX_TRIPLES_HELP
from kolong.training.options import (
    ON_BAD,
    REQUIRED,
    STRATEGIES,
    CheckedArguments,
    check_eval_every,
    check_windows,
    option,
    steps_or_all,
    training_fields,
    under_known_names,
)
from kolong.training.prediction import MAX_PREDICT_SAMPLES_HELP


@dataclass(kw_only=True)
class RecipeArguments(CheckedArguments):
    """What every training recipe shares. Field names are kolong's; `hf` names the HF field each one sets."""

    output_dir: str = option(
        REQUIRED, "Checkpoints, the final model and tokenizer, results.", "-o", "--output"
    )
    model: str | None = option(
        None, "Checkpoint to start from (hub name or directory).", "-m", "--model_name_or_path"
    )
    overwrite: bool = option(
        False, "Start afresh in a non-empty output directory instead of resuming.", "--overwrite_output_dir"
    )
    resume_from_checkpoint: str | None = option(
        None, "Resume from this checkpoint directory (default: the last one in the output directory)."
    )
    epochs: float = option(3.0, "Training epochs.", hf="num_train_epochs")
    max_steps: int = option(
        -1,
        "Stop after this many optimiser steps (-1: run all epochs).",
        hf="max_steps",
        min=None,
        check=steps_or_all,
    )
    learning_rate: float = option(
        5e-5, "Peak learning rate (0 keeps the weights).", "--lr", hf="learning_rate", min=0
    )
    batch_size: int = option(8, "Per-device training batch size.", hf="per_device_train_batch_size")
    eval_batch_size: int = option(16, "Per-device evaluation batch size.", hf="per_device_eval_batch_size")
    gradient_accumulation_steps: int = option(
        1, "Micro-batches per optimiser step.", hf="gradient_accumulation_steps"
    )
    warmup_ratio: float = option(
        0.0, "Warm-up as a share of the optimiser steps.", "--warmup", min=0, below=1
    )
    weight_decay: float = option(0.0, "AdamW weight decay.", hf="weight_decay", min=0)
    seed: int = option(
        42, "Seed of initialisation, data order and sampling.", hf="seed", min=0, max=2**32 - 1
    )
    bf16: str = option(
        "auto", "auto (on where the GPU supports it) | yes | no; bare: yes.", choices=("auto", "yes", "no")
    )
    eval_every: str = option(
        "epoch",
        "epoch, or N steps between evaluations (and checkpoints).",
        check=lambda flag, value: check_eval_every(value),
    )
    save_steps: int | None = option(
        None, "Steps between checkpoints (default: at each evaluation).", hf="save_steps"
    )
    early_stopping_patience: int | None = option(None, "Stop after N evaluations without a better metric.")
    logging_steps: int = option(10, "Steps between log lines.", hf="logging_steps")
    save_total_limit: int = option(2, "Checkpoints kept (the best one too).", hf="save_total_limit")
    quiet: bool = option(False, "No Trainer progress bar or log lines.")
    keep_attention_dropout: bool = option(
        False,
        "Keep the model's attention dropout when training past its original length (by default it is off "
        "there: SDPA's fused kernels then serve training, not its math path that keeps every score).",
    )
    extra: dict = option({}, "Further TrainingArguments fields by their HF names; they win over kolong's.",
                         cli=False, check=training_fields)  # fmt: skip


def training_arguments(
    args: RecipeArguments,
    *,
    evaluating: bool,
    metric: str | None = None,
    seq2seq: bool = False,
    arguments_class: type | None = None,
    **recipe,
):
    """The HF `TrainingArguments` (or `Seq2SeqTrainingArguments`, or `arguments_class`, a subclass such as
    sentence-transformers') of a recipe run.

    Precedence, lowest first: kolong's mapping of `args`, the recipe's own settings (`recipe`), then
    `args.extra` (any HF field the user set by name)."""
    from transformers import Seq2SeqTrainingArguments, TrainingArguments

    from kolong.training.common import device_settings

    every = check_eval_every(args.eval_every)
    by_steps = every != "epoch"
    strategy = "steps" if by_steps else "epoch"
    settings = dict(
        output_dir=str(args.output_dir),
        num_train_epochs=args.epochs,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.eval_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        warmup_steps=args.warmup_ratio,  # transformers 5: a float in [0, 1) is a ratio of total steps
        weight_decay=args.weight_decay,
        seed=args.seed,
        data_seed=args.seed,
        eval_strategy=strategy if evaluating else "no",
        eval_steps=int(every) if by_steps else None,
        save_strategy="steps" if args.save_steps else strategy,
        save_steps=args.save_steps or (int(every) if by_steps else 500),
        save_total_limit=args.save_total_limit,
        load_best_model_at_end=bool(evaluating and metric),
        metric_for_best_model=metric if evaluating else None,
        greater_is_better=True if evaluating and metric else None,
        logging_steps=args.logging_steps,
        report_to="none",
        # the Trainer's bar on a terminal (transformers would hide it at kolong's log level, errors only), its
        # log lines where output goes to a file
        disable_tqdm=args.quiet or not _on_a_terminal(),
        **device_settings(args.bf16),
    )
    cls = arguments_class or (Seq2SeqTrainingArguments if seq2seq else TrainingArguments)
    known = {spec.name for spec in dataclasses.fields(cls)}
    extra = under_known_names(args.extra, known)
    settings.update(recipe)
    settings.update(extra)
    _follow_the_evaluation(settings, extra, saving_given=bool(args.save_steps))
    unknown = sorted(set(extra) - known)
    if unknown:
        import transformers

        raise ConfigError(
            f"{unknown[0]!r} is not a TrainingArguments field in transformers {transformers.__version__}"
        )
    try:
        return cls(**settings)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"training arguments rejected by transformers: {error}") from None


def _on_a_terminal() -> bool:
    import sys

    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def _follow_the_evaluation(settings: dict, extra: dict, saving_given: bool) -> None:
    """HF's own `--eval_strategy` / `--eval_steps` honoured without a clash with what kolong derived: checkpoints
    follow the evaluations (as kolong's own `--eval-every` sets both) unless the user set saving too, and with no
    evaluation there is no best model to load at the end."""
    evaluation_given = bool({"eval_strategy", "eval_steps"} & extra.keys())
    saving_given = saving_given or bool({"save_strategy", "save_steps"} & extra.keys())
    if evaluation_given and not saving_given and settings["eval_strategy"] != "no":
        settings["save_strategy"] = settings["eval_strategy"]
        if settings["eval_strategy"] == "steps" and settings.get("eval_steps"):
            settings["save_steps"] = settings["eval_steps"]
    if settings["eval_strategy"] == "no" and "load_best_model_at_end" not in extra:
        settings["load_best_model_at_end"] = False


# -- the recipes -------------------------------------------------------------------------------------------


PADDING_HELP = (
    "Pad every window to --max-length (static shapes); default: each batch to its longest window, so a long "
    "model reading short documents pays for their length only."
)


@dataclass(kw_only=True)
class QAFinetuneArguments(RecipeArguments):
    """`kolong finetune qa` (flag names of HF's run_qa.py accepted too)."""

    model: str = option(
        REQUIRED, "Checkpoint to fine-tune (its QA head is created if missing).", "-m", "--model_name_or_path"
    )
    train: str = option(
        REQUIRED, "SQuAD/KorQuAD JSON, a saved `datasets` directory or a hub dataset name.", "--train_file"
    )
    eval: str | None = option(
        None, "Evaluation data (as --train), scored with the official KorQuAD metric.", "--validation_file"
    )
    max_length: int | None = option(
        None,
        "Tokens per window (question + context + specials); default: the model's positions, at most 2,048. "
        "Recorded in the saved model: `predict qa` and the pipeline read at it.",
        "--max_seq_length",
    )
    strategy: str = option("sliding-window", "truncate | sliding-window.", choices=STRATEGIES)
    doc_stride: int | None = option(
        None,
        "Tokens windows share (HF `stride`), under half a window; default: a third of it, at most 128.",
        min=0,
    )
    pad_to_max_length: bool = option(False, PADDING_HELP)
    n_best: int = option(20, "Candidate spans per window kept when decoding answers.", "--n_best_size")
    max_answer_length: int = option(30, "Longest answer, in tokens.")
    on_bad_example: str = option(
        "error", "error | skip an example whose answer is not in its context.", choices=ON_BAD
    )
    max_train_samples: int | None = option(
        None, "Train on the first N questions only (a quick trial run).", "--limit"
    )
    max_eval_samples: int | None = option(None, "Evaluate on the first N questions only.")
    epochs: float = option(2.0)
    learning_rate: float = option(3e-5)
    warmup_ratio: float = option(0.1)
    weight_decay: float = option(0.01)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_windows(self.max_length, self.doc_stride, self.strategy)


@dataclass(kw_only=True)
class QAPredictArguments(CheckedArguments):
    """`kolong predict qa`."""

    model: str = option(REQUIRED, "Fine-tuned QA checkpoint.", "-m", "--model_name_or_path")
    data: str = option(
        REQUIRED, "Questions: SQuAD/KorQuAD JSON, a saved `datasets` directory, a hub name, or korquad: the shared "
        "KorQuAD 1.0 dev set.", "--test_file",
    )  # fmt: skip
    shared_data: str | None = option(None, SHARED_HELP)
    output: str = option(REQUIRED, "predictions.json to write: {id: answer}.", "-o")
    nbest_output: str | None = option(None, "Also write the n-best lists here.", "--nbest")
    overwrite: bool = option(False, "Replace existing --output / --nbest files.")
    max_length: int | None = option(
        None,
        "Window length; default: the one the model was fine-tuned at (else its positions). Another is warned of.",
        "--max_seq_length",
    )
    strategy: str = option("sliding-window", "truncate | sliding-window.", choices=STRATEGIES)
    doc_stride: int | None = option(
        None, "Tokens consecutive windows share, under half a window; default: the fine-tuning's, or a third of "
        "the window, at most 128.", min=0)  # fmt: skip
    pad_to_max_length: bool = option(False, PADDING_HELP)
    batch_size: int = option(16, "Windows per forward pass.", "--per_device_eval_batch_size")
    n_best: int = option(20, "Candidate spans per window.", "--n_best_size")
    max_answer_length: int = option(30, "Longest answer, in tokens.")
    allow_no_answer: bool = option(
        False, "SQuAD v2: predict '' when [CLS] wins.", "--version_2_with_negative"
    )
    null_threshold: float = option(
        0.0, "SQuAD v2: how much [CLS] must beat the best span by.", "--null_score_diff_threshold", min=None
    )
    on_bad_example: str = option("error", "error | skip.", choices=ON_BAD)
    compile: bool = option(
        False, "torch.compile the model (int8 models of `kolong quantize` are fast on CPU only so)."
    )
    max_predict_samples: int | None = option(None, MAX_PREDICT_SAMPLES_HELP, "--limit", min=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_windows(self.max_length, self.doc_stride, self.strategy)


@dataclass(kw_only=True)
class ClassificationArguments(RecipeArguments):
    """`kolong finetune cls`."""

    model: str = option(
        REQUIRED,
        "Checkpoint to fine-tune (a classification head is created if missing).",
        "-m",
        "--model_name_or_path",
    )
    data: str = option(
        REQUIRED,
        "nsmc | klue-nli | klue-sts | kornli | korsts | FILE (.tsv/.csv/.jsonl) | saved or hub dataset.",
        "-d",
        "--train_file",
    )
    eval_data: str | None = option(
        None,
        "Evaluation data for a FILE dataset (default: 20% of it, seeded).",
        "--eval",
        "--validation_file",
    )
    shared_data: str | None = option(None, SHARED_HELP)
    max_length: int | None = option(None, "Tokens per example, pairs: both sentences (default: 128, or the "
                                    "model's positions if fewer).", "--max_seq_length")  # fmt: skip
    limit: int | None = option(
        None,
        "At most this many training examples (NSMC: per class and split).",
        "--max_train_samples",
        "--max-train-samples",
    )
    knowledge: str | None = option(None, KNOWLEDGE_HELP)
    max_triples: int = option(DEFAULT_MAX_TRIPLES, MAX_TRIPLES_HELP, min=1)
    epochs: float = option(3.0)
    batch_size: int = option(32)
    eval_batch_size: int = option(64)
    warmup_ratio: float = option(0.1)
    weight_decay: float = option(0.01)
    logging_steps: int = option(20)


@dataclass(kw_only=True)
class Seq2SeqFinetuneArguments(RecipeArguments):
    """`kolong finetune seq2seq`."""

    task: str = option(
        REQUIRED,
        "nsmc | klue-ner | klue-nli | klue-dp | korquad | FILE (.jsonl / .tsv with input and target) | saved or hub dataset.",
    )
    init: str | None = option(
        None, "Or a fresh model of this size: tiny | small | base.", choices=("tiny", "small", "base")
    )
    train: str | None = option(None, "Training data (default: the task's shared file).", "--train_file")
    eval: str | None = option(
        None,
        "Evaluation data (default: a held-out share; nsmc: its movie-disjoint test side).",
        "--validation_file",
    )
    eval_fraction: float = option(0.1, "Share held out when --eval is absent.", below=1)
    limit: int | None = option(
        None,
        "At most N training (and N/4 evaluation) examples.",
        "--max_train_samples",
        "--max-train-samples",
    )
    max_source_length: int = option(1024, "Input bytes kept.")
    max_target_length: int = option(512, "Target bytes kept.")
    max_new_tokens: int | None = option(
        None, "Longest generation in bytes (default: 16 for labels, else target length)."
    )
    num_beams: int = option(1, "1: greedy decoding; more: beam search.")
    learning_rate: float = option(1e-4)
    batch_size: int = option(16)
    eval_batch_size: int = option(32)


@dataclass(kw_only=True)
class KnowledgePredictArguments(CheckedArguments):
    """What every predict command that reads a K-BERT model takes."""

    knowledge: str | None = option(None, "The knowledge file the model was fine-tuned with (`finetune --knowledge`): "
                                   "its triples join each sentence as they did in training.")  # fmt: skip
    max_triples: int | None = option(
        None, "Triples per entity from --knowledge (default: the model's).", min=1
    )
    other_knowledge: bool = option(
        False, "Predict with a --knowledge file (or none) other than the model's own."
    )
