"""`kolong evaluate qa`: the official KorQuAD / KLUE-MRC scores of a predictions file."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kolong.cli.common import one_of, user_errors

evaluate_app = typer.Typer(
    help="Score predictions with official metrics.", no_args_is_help=True, rich_markup_mode=None
)


@evaluate_app.command("qa")
def evaluate_qa(
    data: Path = typer.Option(..., "--data", help="SQuAD/KorQuAD JSON with gold answers."),
    predictions: Path = typer.Option(..., "--predictions", help="JSON {id: answer text}."),
    metric: str = typer.Option(
        "korquad",
        callback=one_of("korquad", "klue-mrc"),
        help="korquad (EM, character F1) | klue-mrc (EM, ROUGE-W).",
    ),
    on_bad_example: str = typer.Option(
        "error", "--on-bad-example", callback=one_of("error", "skip"), help="error | skip."
    ),
    output: Path = typer.Option(None, "--output", "-o", help="Also write the scores as JSON to this file."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --output file."),
) -> None:
    """Score predictions; prints JSON (percentages, as the official script)."""
    from kolong.evaluation.korquad import evaluate_files as run
    from kolong.io import atomic_output_file, atomic_write_json, check_output_file

    with user_errors():
        if output is not None:
            check_output_file(output, overwrite)
        scores = run(str(data), str(predictions), metric, on_bad_example)
        if output is not None:
            with atomic_output_file(output, overwrite) as staging:
                atomic_write_json(staging, scores)
    typer.echo(json.dumps(scores, ensure_ascii=False))
    if output is not None:
        typer.echo(f"wrote {output}", err=True)  # stdout stays the JSON alone
