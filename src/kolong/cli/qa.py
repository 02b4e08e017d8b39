"""`kolong evaluate qa` and `kolong evaluate klue TASK`: official scores of a predictions file."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kolong.cli.common import one_of, user_errors
from kolong.data.shared import HELP as SHARED_HELP
from kolong.data.shared import shared_file, shared_root

KLUE_TASKS = (
    "ynat",
    "nli",
    "sts",
    "ner",
    "dp",
    "mrc",
)  # kolong.evaluation.klue_files.TASKS, without importing it

evaluate_app = typer.Typer(
    help="Score predictions with official metrics.", no_args_is_help=True, rich_markup_mode=None
)


@evaluate_app.command("qa")
def evaluate_qa(
    data: str = typer.Option(
        ...,
        "--data",
        help="SQuAD/KorQuAD JSON with gold answers, or korquad: the shared KorQuAD 1.0 dev set.",
    ),
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
    shared_data: Path = typer.Option(None, "--shared-data", help=SHARED_HELP),
) -> None:
    """Score predictions; prints JSON (percentages, as the official script)."""
    from kolong.data.shared import data_file
    from kolong.evaluation.korquad import evaluate_files as run
    from kolong.io import atomic_output_file, atomic_write_json, check_output_file

    with user_errors():
        if output is not None:
            check_output_file(output, overwrite)
        gold = data_file(data, "--data", shared_data, names=("korquad",))
        scores = run(str(gold), str(predictions), metric, on_bad_example)
        if output is not None:
            with atomic_output_file(output, overwrite) as staging:
                atomic_write_json(staging, scores)
    typer.echo(json.dumps(scores, ensure_ascii=False))
    if output is not None:
        typer.echo(f"wrote {output}", err=True)  # stdout stays the JSON alone


@evaluate_app.command("klue")
def evaluate_klue(
    task: str = typer.Argument(
        ...,
        metavar="TASK",
        help="ynat | nli | sts | ner | dp | mrc, or all: every TASK.json in the --predictions directory.",
        callback=one_of(*KLUE_TASKS, "all"),
    ),
    predictions: Path = typer.Option(
        ...,
        "--predictions",
        help="JSON {id: prediction} (see docs/klue.md); with all, a directory of TASK.json.",
    ),
    data_dir: Path = typer.Option(
        None,
        "--data-dir",
        help="With all: the gold files as TASK.json / TASK.tsv (default: the shared dev sets).",
    ),
    model_name: str = typer.Option(
        None, "--model-name", help="With all: the table's row name (default: the folder)."
    ),
    data: str = typer.Option(
        None,
        "--data",
        help="KLUE gold file, or a shared one by name (klue-nli, klue-sts, klue-ner, klue-dp); default for nli, "
        "sts, ner, dp: the dev set under --shared-data.",
    ),
    shared_data: Path = typer.Option(None, "--shared-data", help=SHARED_HELP),
    missing: str = typer.Option(
        "wrong",
        "--missing",
        callback=one_of("wrong", "skip"),
        help="mrc: a question without a prediction counts as wrong, or is skipped (KLUE's evaluation script).",
    ),
    output: Path = typer.Option(None, "--output", "-o", help="Also write the scores as JSON to this file."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --output file."),
) -> None:
    """Score predictions with KLUE's metrics exactly as KLUE-baseline computes them; prints JSON (percentages)."""
    from kolong.data.shared import data_file
    from kolong.evaluation.klue_files import DEFAULT_GOLD, score_klue_files
    from kolong.io import atomic_output_file, atomic_write_json, check_output_file

    if task == "all":
        _evaluate_klue_all(predictions, data_dir, shared_data, missing, model_name, output, overwrite)
        return
    with user_errors():
        if data is None:
            if task not in DEFAULT_GOLD:
                raise typer.BadParameter(
                    f"{task} has no dev set in the shared data: pass its gold file", param_hint="--data"
                )
            data = shared_file(DEFAULT_GOLD[task], shared_data)
        else:
            data = data_file(
                data, "--data", shared_data, names=("klue-nli", "klue-sts", "klue-ner", "klue-dp")
            )
        if output is not None:
            check_output_file(output, overwrite)
        scores = {"task": task, **score_klue_files(task, data, predictions, missing)}
        if output is not None:
            with atomic_output_file(output, overwrite) as staging:
                atomic_write_json(staging, scores)
    typer.echo(json.dumps(scores, ensure_ascii=False))
    if output is not None:
        typer.echo(f"wrote {output}", err=True)


def _evaluate_klue_all(directory, data_dir, shared_data, missing, model_name, output, overwrite) -> None:
    """Every TASK.json of `directory`: the scores as JSON (to -o) and the model's results table (stdout)."""
    from kolong.evaluation.klue_files import DEFAULT_GOLD, TASKS, klue_table, score_klue_directory
    from kolong.io import atomic_output_file, atomic_write_json, check_output_file

    with user_errors():
        if data_dir is not None:
            gold = {
                t: p for t in TASKS for p in (data_dir / f"{t}.json", data_dir / f"{t}.tsv") if p.is_file()
            }
        else:
            gold = {task: shared_root(shared_data) / path for task, path in DEFAULT_GOLD.items()}
        if output is not None:
            check_output_file(output, overwrite)
        scores = score_klue_directory(directory, gold, missing)
        if output is not None:
            with atomic_output_file(output, overwrite) as staging:
                atomic_write_json(staging, scores)
    typer.echo(klue_table(model_name or directory.name, scores))
