"""`kolong pretrain ...`: pre-training recipes over the HF Trainer (torchrun / accelerate scale them)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kolong.cli.common import console, user_errors

app = typer.Typer(help="Pre-training recipes.", no_args_is_help=True, rich_markup_mode=None)


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
    objective: str = typer.Option("mlm", help="mlm | mlm+sop (adds ALBERT's sentence-order prediction)."),
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
        model=model, tokenizer=tokenizer, masking=masking, mlm_probability=mlm_probability, objective=objective,
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


@app.command("span")
def span(
    train: list[Path] = typer.Option(
        ..., "--train", help="Corpus file(s): one document per line, plain or gzip (repeat the option)."
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Checkpoints, final model and tokenizer, results."
    ),
    model: str = typer.Option(
        None, help="Continue from a kolong byte or T5 / ByT5 checkpoint (e.g. google/byt5-small)."
    ),
    init: str = typer.Option(
        None, help="Or start a fresh model: tiny | small (ByT5-small) | base (ByT5-base)."
    ),
    add_gbst: bool = typer.Option(
        False,
        "--add-gbst",
        help="Add a fresh GBST layer to the encoder, keeping every other weight (uptraining).",
    ),
    gbst_blocks: str = typer.Option("1,2,3,6,9", help="GBST block sizes in bytes; size@offset for offsets."),
    gbst_rate: int = typer.Option(3, help="GBST downsampling rate."),
    gbst_consensus: bool = typer.Option(True, help="GBST position-wise score consensus."),
    column: int = typer.Option(
        None, help="Take this tab-separated field (1-based) of each line, e.g. 4 for NSMC."
    ),
    on_bad_line: str = typer.Option("error", help="error | skip lines that are not UTF-8."),
    max_documents: int = typer.Option(None, help="Read at most N documents."),
    max_length: int = typer.Option(
        1024, help="Bytes of text per example; the corpus is cut into such chunks."
    ),
    curriculum: str = typer.Option(
        None, help='Input-length curriculum, e.g. "512,1024,2048" (equal step shares).'
    ),
    noise_density: float = typer.Option(
        0.15, help="Share of bytes corrupted (ByT5 0.15, the Korean paper 0.2-0.4)."
    ),
    mean_span: float = typer.Option(
        20.0, help="Mean corrupted span in bytes (ByT5 20, the Korean paper 27)."
    ),
    sentinels: str = typer.Option("byt5", help="Sentinel ids of a new tokenizer: byt5 (258 - k) | top | hf."),
    eval_fraction: float = typer.Option(0.0, help="Share of chunks held out for an eval loss."),
    epochs: float = typer.Option(1.0, help="Passes over the chunks (fresh corruption each time)."),
    max_steps: int = typer.Option(-1, help="Optimiser steps (-1: run all epochs)."),
    learning_rate: float = typer.Option(1e-4, "--learning-rate", "--lr", help="AdamW peak learning rate."),
    batch_size: int = typer.Option(8, help="Per-device batch size."),
    gradient_accumulation_steps: int = typer.Option(1, help="Micro-batches per optimiser step."),
    warmup_ratio: float = typer.Option(0.05, help="Warm-up share of the steps."),
    save_steps: int = typer.Option(500, help="Steps between checkpoints."),
    logging_steps: int = typer.Option(10, help="Steps between log lines."),
    seed: int = typer.Option(42, help="Seed of a fresh model, the data order and the corruption."),
    bf16: str = typer.Option("auto", help="auto | yes | no."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Start afresh instead of resuming in OUTPUT."),
) -> None:
    """Pre-train a byte-level encoder-decoder with T5 span corruption aligned to UTF-8 characters.

    Uptraining as the Korean token-free paper: --model google/byt5-small --add-gbst. Resumes in OUTPUT.
    """
    from kolong.training.seq2seq import SpanPretrainArguments, pretrain_span

    args = SpanPretrainArguments(
        train=[str(p) for p in train], output_dir=str(output), model=model, init=init, add_gbst=add_gbst,
        gbst_blocks=gbst_blocks, gbst_downsample_rate=gbst_rate, gbst_score_consensus=gbst_consensus,
        column=column, on_bad_line=on_bad_line, max_documents=max_documents, max_length=max_length,
        curriculum=curriculum, noise_density=noise_density, mean_span_length=mean_span, sentinels=sentinels,
        eval_fraction=eval_fraction, epochs=epochs, max_steps=max_steps, learning_rate=learning_rate,
        batch_size=batch_size, gradient_accumulation_steps=gradient_accumulation_steps, warmup_ratio=warmup_ratio,
        save_steps=save_steps, logging_steps=logging_steps, seed=seed, bf16=bf16, overwrite=overwrite,
    )  # fmt: skip
    with user_errors():
        metrics = pretrain_span(args)
    console.print_json(json.dumps(metrics, ensure_ascii=False))
