"""`kolong finetune qa`, `kolong predict qa`, `kolong evaluate qa`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kolong.cli.common import console, user_errors

finetune_app = typer.Typer(help="Fine-tune models on tasks.", no_args_is_help=True, rich_markup_mode=None)
predict_app = typer.Typer(help="Run fine-tuned models on data.", no_args_is_help=True, rich_markup_mode=None)
evaluate_app = typer.Typer(
    help="Score predictions with official metrics.", no_args_is_help=True, rich_markup_mode=None
)


@finetune_app.command("qa")
def finetune_qa(
    model: str = typer.Option(..., "--model", help="Checkpoint to fine-tune (hub name or directory)."),
    train: Path = typer.Option(..., "--train", help="SQuAD/KorQuAD JSON for training."),
    output: Path = typer.Option(..., "--output", "-o", help="Output directory (checkpoints, final model)."),
    eval_file: Path = typer.Option(
        None, "--eval", help="SQuAD/KorQuAD JSON evaluated with the KorQuAD metric."
    ),
    max_length: int = typer.Option(
        384, "--max-length", help="Tokens per window (up to the model's positions)."
    ),
    strategy: str = typer.Option("sliding-window", help="truncate | sliding-window."),
    doc_stride: int = typer.Option(128, "--doc-stride", help="Tokens of overlap between windows."),
    epochs: float = typer.Option(2.0, help="Training epochs."),
    learning_rate: float = typer.Option(3e-5, "--learning-rate", "--lr"),
    batch_size: int = typer.Option(8, "--batch-size"),
    eval_batch_size: int = typer.Option(16, "--eval-batch-size"),
    gradient_accumulation_steps: int = typer.Option(1, "--gradient-accumulation-steps"),
    max_steps: int = typer.Option(-1, "--max-steps", help="Stop after N optimiser steps (-1: all epochs)."),
    warmup_ratio: float = typer.Option(0.1, "--warmup-ratio"),
    seed: int = typer.Option(42, help="Random seed (model head init, data order)."),
    bf16: str = typer.Option("auto", help="auto | yes | no."),
    eval_every: str = typer.Option("epoch", "--eval-every", help="epoch, or N steps between evaluations."),
    early_stopping_patience: int = typer.Option(
        None, "--early-stopping-patience", help="Evaluations without better F1."
    ),
    n_best: int = typer.Option(20, "--n-best"),
    max_answer_length: int = typer.Option(30, "--max-answer-length", help="Longest answer, in tokens."),
    on_bad_example: str = typer.Option("error", "--on-bad-example", help="error | skip."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Train afresh instead of resuming in -o."),
) -> None:
    """Fine-tune an extractive QA model (resumes from the last checkpoint in -o)."""
    from kolong.training.qa import QAFinetuneArguments
    from kolong.training.qa import finetune_qa as run

    arguments = QAFinetuneArguments(
        model=model,
        train=str(train),
        output_dir=str(output),
        eval=str(eval_file) if eval_file else None,
        max_length=max_length,
        strategy=strategy,
        doc_stride=doc_stride,
        epochs=epochs,
        learning_rate=learning_rate,
        batch_size=batch_size,
        eval_batch_size=eval_batch_size,
        gradient_accumulation_steps=gradient_accumulation_steps,
        max_steps=max_steps,
        warmup_ratio=warmup_ratio,
        seed=seed,
        bf16=bf16,
        eval_every=eval_every,
        early_stopping_patience=early_stopping_patience,
        n_best=n_best,
        max_answer_length=max_answer_length,
        on_bad_example=on_bad_example,
        overwrite=overwrite,
    )
    with user_errors():
        metrics = run(arguments)
    console.print_json(json.dumps(metrics, ensure_ascii=False))


@predict_app.command("qa")
def predict_qa(
    model: str = typer.Option(..., "--model", help="Fine-tuned QA checkpoint."),
    data: Path = typer.Option(..., "--data", help="SQuAD/KorQuAD JSON with the questions."),
    output: Path = typer.Option(..., "--output", "-o", help="predictions.json to write: {id: answer}."),
    nbest: Path = typer.Option(None, "--nbest", help="Also write the n-best lists here."),
    max_length: int = typer.Option(None, "--max-length", help="Window length (default: the model's)."),
    strategy: str = typer.Option("sliding-window", help="truncate | sliding-window."),
    doc_stride: int = typer.Option(128, "--doc-stride"),
    batch_size: int = typer.Option(16, "--batch-size"),
    n_best: int = typer.Option(20, "--n-best"),
    max_answer_length: int = typer.Option(30, "--max-answer-length", help="Longest answer, in tokens."),
    allow_no_answer: bool = typer.Option(
        False, "--allow-no-answer", help="SQuAD v2: predict '' when [CLS] wins."
    ),
    null_threshold: float = typer.Option(0.0, "--null-threshold"),
    on_bad_example: str = typer.Option("error", "--on-bad-example", help="error | skip."),
) -> None:
    """Answer every question, pooling n-best spans over all windows of each document."""
    from kolong.training.qa import QAPredictArguments
    from kolong.training.qa import predict_qa as run

    arguments = QAPredictArguments(
        model=model,
        data=str(data),
        output=str(output),
        nbest_output=str(nbest) if nbest else None,
        max_length=max_length,
        strategy=strategy,
        doc_stride=doc_stride,
        batch_size=batch_size,
        n_best=n_best,
        max_answer_length=max_answer_length,
        allow_no_answer=allow_no_answer,
        null_threshold=null_threshold,
        on_bad_example=on_bad_example,
    )
    with user_errors():
        summary = run(arguments)
    console.print(
        f"[green]wrote[/] {output}: {summary['questions']} questions, {summary['windows']} windows "
        f"of {summary['max_length']} tokens"
    )


@evaluate_app.command("qa")
def evaluate_qa(
    data: Path = typer.Option(..., "--data", help="SQuAD/KorQuAD JSON with gold answers."),
    predictions: Path = typer.Option(..., "--predictions", help="JSON {id: answer text}."),
    metric: str = typer.Option("korquad", help="korquad (EM, character F1) | klue-mrc (EM, ROUGE-W)."),
    on_bad_example: str = typer.Option("error", "--on-bad-example", help="error | skip."),
) -> None:
    """Score predictions; prints JSON (percentages, as the official script)."""
    from kolong.evaluation.korquad import evaluate_files as run

    if metric not in ("korquad", "klue-mrc"):
        raise typer.BadParameter("choose korquad or klue-mrc", param_hint="--metric")
    with user_errors():
        scores = run(str(data), str(predictions), metric, on_bad_example)
    typer.echo(json.dumps(scores, ensure_ascii=False))
