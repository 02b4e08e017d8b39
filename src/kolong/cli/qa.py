"""`kolong evaluate qa`: the official KorQuAD / KLUE-MRC scores of a predictions file."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kolong.cli.common import user_errors

evaluate_app = typer.Typer(
    help="Score predictions with official metrics.", no_args_is_help=True, rich_markup_mode=None
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
