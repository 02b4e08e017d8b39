"""`kolong finetune seq2seq`: text-to-text fine-tuning of kolong's byte model (see docs/byte.md)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kolong.cli.common import console, user_errors


def finetune_seq2seq(
    task: str = typer.Option(
        ..., "--task", help="nsmc | klue-ner | klue-nli | FILE (.jsonl / .tsv with input and target)."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Output directory (checkpoints, final model)."),
    model: str = typer.Option(None, "--model", help="kolong byte or T5 / ByT5 checkpoint to fine-tune."),
    init: str = typer.Option(None, "--init", help="Or a fresh model of this size: tiny | small | base."),
    train: Path = typer.Option(None, "--train", help="Training data (default: the task's shared file)."),
    eval_file: Path = typer.Option(
        None, "--eval", help="Evaluation data (default: a held-out share; nsmc: movie-disjoint test side)."
    ),
    eval_fraction: float = typer.Option(0.1, "--eval-fraction", help="Share held out when --eval is absent."),
    limit: int = typer.Option(None, "--limit", help="At most N training (and N/4 evaluation) examples."),
    max_source_length: int = typer.Option(1024, "--max-source-length", help="Input bytes kept."),
    max_target_length: int = typer.Option(512, "--max-target-length", help="Target bytes kept."),
    max_new_tokens: int = typer.Option(
        None,
        "--max-new-tokens",
        help="Longest generation in bytes (default: 16 for labels, else target length).",
    ),
    num_beams: int = typer.Option(1, "--num-beams", help="1: greedy decoding; more: beam search."),
    epochs: float = typer.Option(3.0, help="Training epochs."),
    max_steps: int = typer.Option(-1, "--max-steps", help="Stop after N optimiser steps (-1: all epochs)."),
    learning_rate: float = typer.Option(1e-4, "--learning-rate", "--lr"),
    batch_size: int = typer.Option(16, "--batch-size"),
    eval_batch_size: int = typer.Option(32, "--eval-batch-size"),
    gradient_accumulation_steps: int = typer.Option(1, "--gradient-accumulation-steps"),
    warmup_ratio: float = typer.Option(0.0, "--warmup-ratio"),
    seed: int = typer.Option(42, help="Seed of the split, a fresh model's weights and the data order."),
    bf16: str = typer.Option("auto", help="auto | yes | no."),
    eval_every: str = typer.Option("epoch", "--eval-every", help="epoch, or N steps between evaluations."),
    early_stopping_patience: int = typer.Option(
        None, "--early-stopping-patience", help="Evaluations without a better main metric."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Train afresh instead of resuming in -o."),
) -> None:
    """Fine-tune a byte model text-to-text (labels as words, KLUE-NER as <entity:TAG> markup); resumes in -o.

    Evaluation generates (greedy or beam search) and scores the text: accuracy for labels, entity F1
    (seqeval, strict IOB2) and character F1 for KLUE-NER, exact match / character F1 for files.
    Malformed generations are counted, never fatal. Predictions go to -o/predictions.jsonl.
    """
    from kolong.training.seq2seq import Seq2SeqFinetuneArguments
    from kolong.training.seq2seq import finetune_seq2seq as run

    arguments = Seq2SeqFinetuneArguments(
        task=task, output_dir=str(output), model=model, init=init, train=str(train) if train else None,
        eval=str(eval_file) if eval_file else None, eval_fraction=eval_fraction, limit=limit,
        max_source_length=max_source_length, max_target_length=max_target_length, max_new_tokens=max_new_tokens,
        num_beams=num_beams, epochs=epochs, max_steps=max_steps, learning_rate=learning_rate,
        batch_size=batch_size, eval_batch_size=eval_batch_size,
        gradient_accumulation_steps=gradient_accumulation_steps, warmup_ratio=warmup_ratio, seed=seed, bf16=bf16,
        eval_every=eval_every, early_stopping_patience=early_stopping_patience, overwrite=overwrite,
    )  # fmt: skip
    with user_errors():
        metrics = run(arguments)
    console.print_json(json.dumps(metrics, ensure_ascii=False))
