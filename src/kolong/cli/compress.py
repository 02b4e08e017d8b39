"""`kolong quantize`, `kolong export onnx`, `kolong distill`: smaller and faster models (docs/compress.md)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kolong.cli.arguments import SectionedHelp, command_from
from kolong.cli.common import console, one_of, user_errors
from kolong.compress.distill import ClassificationDistillArguments, QADistillArguments

export_app = typer.Typer(
    help="Export a model to another runtime.", no_args_is_help=True, rich_markup_mode=None
)


def quantize(
    model: str = typer.Argument(
        ..., metavar="MODEL", help="Hub name or directory of a kolong or HF encoder (with its head)."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Directory for the quantized checkpoint."),
    scheme: str = typer.Option(
        "int8-dynamic",
        callback=one_of("int8-dynamic", "int8-weight-only", "int4-weight-only"),
        help="int8-dynamic (int8 weights and activations; fast under torch.compile) | int8-weight-only | "
        "int4-weight-only (groups of --group-size).",
    ),
    include_embeddings: bool = typer.Option(
        False,
        "--include-embeddings",
        help="Also quantize embeddings and learned position tables (int8 rows).",
    ),
    group_size: int = typer.Option(32, min=8, help="int4 group size along each row."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output directory."),
) -> None:
    """Post-training quantization of MODEL's Linear layers with torchao, saved as a checkpoint that
    AutoModelFor*.from_pretrained(OUTPUT) loads quantized after `import kolong`. Embeddings and position
    tables stay in float unless --include-embeddings."""
    from kolong.compress.quantize import describe, quantize_checkpoint

    with user_errors(), console.status(f"quantizing {model}"):
        report = quantize_checkpoint(model, output, scheme, include_embeddings, group_size, overwrite)
    console.print(describe(report))
    console.print(f"[green]wrote[/] {output} (report: kolong_quantization.json)")


@export_app.command("onnx")
def onnx(
    model: str = typer.Argument(
        ..., metavar="MODEL", help="Hub name or directory of a kolong or HF encoder (with its head)."
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="The .onnx file to write (report beside, .json)."
    ),
    quantize: str = typer.Option(
        None, "--quantize", callback=one_of("int8"), help="int8: write onnxruntime's dynamic int8 graph."
    ),
    check_length: int = typer.Option(128, min=2, help="Sequence length of the parity check and timing."),
    threads: int = typer.Option(None, min=1, help="onnxruntime intra-op threads (default: its own)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output file."),
) -> None:
    """Export MODEL with its head to ONNX (dynamic batch and sequence axes), check the graph against PyTorch
    in onnxruntime (max abs difference <= 1e-4 for a float graph, else nothing is written) and time both."""
    from kolong.compress.export_onnx import export_onnx

    with user_errors(), console.status(f"exporting {model}"):
        report = export_onnx(model, output, quantize, check_length, threads=threads, overwrite=overwrite)
    console.print(
        f"outputs {', '.join(report['outputs'])}; max abs difference from PyTorch {report['max_abs_diff']:.2e} "
        f"on {report['check_shape'][0]} x {report['check_shape'][1]}; PyTorch {report['torch_seconds'] * 1e3:.1f} ms, "
        f"onnxruntime {report['onnxruntime_seconds'] * 1e3:.1f} ms; {report['bytes'] / 2**20:.1f} MiB"
    )
    console.print(f"[green]wrote[/] {output} and {output}.json")


distill_app = typer.Typer(
    help="Distil a fine-tuned teacher into a student with fewer layers.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@distill_app.command("qa", cls=SectionedHelp)
@command_from(QADistillArguments)
def distill_qa(args: QADistillArguments) -> None:
    """Distil a QA teacher (start / end soft targets, hidden states) into a student with fewer layers, trained
    by the `finetune qa` recipe (its data options); the student keeps the teacher's scheme and length.

    Python: kolong.compress.distill.distill(QADistillArguments(...)).
    """
    from kolong.compress.distill import distill

    console.print_json(json.dumps(distill(args), ensure_ascii=False))


@distill_app.command("cls", cls=SectionedHelp)
@command_from(ClassificationDistillArguments)
def distill_cls(args: ClassificationDistillArguments) -> None:
    """Distil a classification teacher (soft targets, hidden states) into a student with fewer layers, trained
    by the `finetune cls` recipe (its data options).

    Python: kolong.compress.distill.distill(ClassificationDistillArguments(...)).
    """
    from kolong.compress.distill import distill

    console.print_json(json.dumps(distill(args), ensure_ascii=False))
