"""`kolong finetune cls`: sentence and pair classification / regression."""

from __future__ import annotations

from pathlib import Path

import typer

from kolong.cli.common import console, user_errors


def finetune_cls(
    model: str = typer.Option(..., "--model", "-m", help="Checkpoint to fine-tune (hub name or directory)."),
    data: str = typer.Option(
        ...,
        "--data",
        "-d",
        help="nsmc | klue-nli | klue-sts | kornli | korsts | FILE (.tsv/.csv/.jsonl: text[, text_pair], label).",
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Checkpoints, final model, cls_results.json."),
    eval_data: str = typer.Option(None, "--eval", help="Evaluation FILE (default: 20% of --data, seeded)."),
    shared_data: Path = typer.Option(Path("../shared/data"), help="Where the named datasets are found."),
    max_length: int = typer.Option(128, help="Tokens per example (pairs: both sentences)."),
    epochs: float = typer.Option(3.0, help="Training epochs."),
    learning_rate: float = typer.Option(5e-5, help="Peak learning rate."),
    batch_size: int = typer.Option(32, help="Per-device training batch size."),
    max_steps: int = typer.Option(-1, help="Stop after this many steps (-1: all epochs)."),
    limit: int = typer.Option(None, help="At most this many training examples (NSMC: per class and split)."),
    eval_every: str = typer.Option("epoch", help="epoch | N steps between evaluations and checkpoints."),
    early_stopping_patience: int = typer.Option(None, help="Stop after N evaluations without improvement."),
    seed: int = typer.Option(42, help="Seed of splits, initialisation and data order."),
    bf16: str = typer.Option("auto", help="auto | yes | no."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Start afresh instead of resuming in OUTPUT."),
) -> None:
    """Fine-tune MODEL for sentence / pair classification (accuracy, macro F1) or regression (Pearson)."""
    from kolong.training.classification import ClassificationArguments
    from kolong.training.classification import finetune_cls as run

    args = ClassificationArguments(
        model=model, data=data, output_dir=str(output), eval_data=eval_data, shared_data=str(shared_data),
        max_length=max_length, epochs=epochs, learning_rate=learning_rate, batch_size=batch_size,
        max_steps=max_steps, limit=limit, eval_every=eval_every, early_stopping_patience=early_stopping_patience,
        seed=seed, bf16=bf16, overwrite=overwrite,
    )  # fmt: skip
    with user_errors():
        metrics = run(args)
    shown = {k: v for k, v in metrics.items() if k in ("accuracy", "macro_f1", "pearson", "spearman", "loss")}
    console.print(f"[green]fine-tuned[/] {metrics['data']} ({metrics['train_examples']} train / "
                  f"{metrics['eval_examples']} eval) -> {output}: "
                  + ", ".join(f"{k} {v:.4f}" for k, v in shown.items()))  # fmt: skip
