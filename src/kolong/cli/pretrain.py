"""`kolong pretrain ...`: pre-training recipes over the HF Trainer (torchrun / accelerate scale them)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kolong.cli.common import console, user_errors

app = typer.Typer(help="Pre-training recipes.", no_args_is_help=True)


def parse_overrides(values: list[str] | None) -> dict:
    """--set key=value (value parsed as JSON when it can be: 256, 0.1, true, "text")."""
    overrides = {}
    for item in values or []:
        if "=" not in item:
            raise typer.BadParameter(f"expected key=value, got {item!r}", param_hint="--set")
        key, value = item.split("=", 1)
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value
    return overrides


@app.command("mlm")
def mlm(
    corpus: Path = typer.Option(..., "--corpus", "-c", help="A corpus directory from `kolong data corpus`."),
    output: Path = typer.Option(..., "--output", "-o", help="Checkpoints, final model, logs, loss plot."),
    preset: str = typer.Option("tiny", help="tiny | small (the paper: 3 layers, 768, 12 heads) | base."),
    position: str = typer.Option("learned", help="learned, sinusoidal, memn2n, shaw, t5, alibi, rope, none."),
    position_kwargs: str = typer.Option(None, help="Scheme options as JSON, e.g. '{\"max_distance\": 16}'."),
    tokenizer: str = typer.Option(None, help="Tokenizer directory (default: the corpus's)."),
    model: str = typer.Option(None, help="Continue pre-training this kolong MLM checkpoint."),
    masking: str = typer.Option("token", help="token | eojeol | morpheme | span (SpanBERT)."),
    mlm_probability: float = typer.Option(0.15, help="Share of tokens to predict."),
    overrides: list[str] = typer.Option(
        None, "--set", help="Override a preset field: --set hidden_size=256."
    ),
    max_steps: int = typer.Option(None, help="Optimiser steps (default: the preset's)."),
    batch_size: int = typer.Option(None, help="Per-device batch size (default: the preset's)."),
    gradient_accumulation_steps: int = typer.Option(1, help="Micro-batches per optimiser step."),
    learning_rate: float = typer.Option(None, help="Peak learning rate (default: the preset's)."),
    warmup: float = typer.Option(None, help="Warm-up share of max_steps (default: the preset's)."),
    eval_steps: int = typer.Option(200, help="Steps between held-out evaluations."),
    save_steps: int = typer.Option(200, help="Steps between checkpoints."),
    logging_steps: int = typer.Option(20, help="Steps between log lines."),
    seed: int = typer.Option(42, help="Seed of initialisation, data order and masking."),
    bf16: str = typer.Option("auto", help="auto | yes | no."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Start afresh instead of resuming in OUTPUT."),
) -> None:
    """Pre-train kolong's encoder with masked language modelling; started again, it resumes exactly.

    Many processes: torchrun --nproc_per_node N -m kolong pretrain mlm ... (or accelerate launch -m kolong ...).
    """
    from kolong.training.pretrain import PretrainArguments, pretrain_mlm

    try:
        kwargs = json.loads(position_kwargs) if position_kwargs else {}
    except json.JSONDecodeError as error:
        raise typer.BadParameter(f"not valid JSON: {error}", param_hint="--position-kwargs") from None
    args = PretrainArguments(
        corpus=str(corpus), output_dir=str(output), preset=preset, position=position, position_kwargs=kwargs,
        model=model, tokenizer=tokenizer, masking=masking, mlm_probability=mlm_probability,
        overrides=parse_overrides(overrides), max_steps=max_steps, batch_size=batch_size,
        gradient_accumulation_steps=gradient_accumulation_steps, learning_rate=learning_rate, warmup=warmup,
        eval_steps=eval_steps, save_steps=save_steps, logging_steps=logging_steps, seed=seed, bf16=bf16,
        overwrite=overwrite,
    )  # fmt: skip
    with user_errors():
        try:
            metrics = pretrain_mlm(args)
        except ValueError as error:
            if type(error) is not ValueError:
                raise
            raise typer.BadParameter(str(error)) from None  # preset, override, scheme: named in the message
    summary = ", ".join(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
                        for key, value in metrics.items())  # fmt: skip
    console.print(f"[green]pre-trained[/] -> {output}: {summary}")
