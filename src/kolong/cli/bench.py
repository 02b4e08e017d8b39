"""`kolong bench ...`: benchmarks that measure kolong and its reference side by side.

Every command is generated from its arguments dataclass and runs through one harness
(`kolong.lab.bench.harness`); adding a benchmark is one module and one line in `kolong.lab.bench.arguments.BENCHMARKS`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from kolong.cli.arguments import command_from
from kolong.cli.common import console, report, user_errors
from kolong.lab.bench.arguments import BENCHMARKS

app = typer.Typer(
    help="Benchmarks; results go to benchmarks/results/DEVICE/ as JSON and markdown (DEVICE: h100, cpu-epyc-2core, ...).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _partial(benchmark, args) -> dict | None:
    """What an interrupted run left in OUTPUT_DIR/NAME.partial.json, when --resume and it reads as JSON."""
    import json

    path = Path(args.output_dir) / f"{benchmark.name}.partial.json"
    if not (getattr(args, "resume", False) and benchmark.resumable and path.is_file()):
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        console.print(f"[yellow]{path} is not readable JSON: measuring every case[/]")
        return None


def _progress(status):
    """The status line on a terminal; elsewhere (a log, as in a batch job) also one timestamped line per step,
    so that a run cut short still shows where its time went."""
    import time

    started = time.monotonic()

    def update(message: str) -> None:
        status.update(message)
        if not console.is_terminal:
            console.print(f"[{time.monotonic() - started:7.1f} s] {message}", markup=False, highlight=False)

    return update


# Where a trial run (any option changed) writes: beside the user's other runs, never over a committed result.
TRIAL_RESULTS = Path("runs") / "bench"


def _default_output(benchmark, args, results_dir: Path) -> tuple[str, str]:
    """(the folder a run without --output-dir writes to, one line saying which and why). A full run (every option
    that changes what is measured at its default) replaces the result in benchmarks/results/DEVICE that the docs
    quote; any other run is a trial and goes to runs/bench/DEVICE."""
    from kolong.lab.bench.results import NOT_MEASURED, changed_options

    changed = [name for name, _ in changed_options(args, ignore=NOT_MEASURED)]
    if not changed:
        return str(results_dir), f"a full run (every option at its default): results go to {results_dir}"
    trial = TRIAL_RESULTS / results_dir.name
    flags = ", ".join("--" + name.replace("_", "-") for name in changed)
    return str(trial), (f"a trial run ({flags} changed): results go to {trial}, not {results_dir}; "
                        f"--output-dir {results_dir} writes them there")  # fmt: skip


def _command(name: str, target: str, arguments: type):
    def command(args) -> None:
        from kolong.lab.bench.arguments import load_benchmark
        from kolong.lab.bench.harness import default_output_dir, run, write_results

        with user_errors(), console.status("benchmarking") as status:
            benchmark = load_benchmark(target)
            if args.output_dir is None:
                args.output_dir, why = _default_output(benchmark, args, default_output_dir(benchmark, args))
                report(why)
            output_dir = Path(args.output_dir)
            result = run(benchmark, args, on_step=_progress(status), resume=_partial(benchmark, args),
                         on_partial=lambda partial: write_results(benchmark, partial, output_dir))  # fmt: skip
            json_path, markdown_path = write_results(benchmark, result, output_dir)
        console.print(markdown_path.read_text(encoding="utf-8"), highlight=False)
        console.print(f"[green]wrote[/] {json_path} and {markdown_path}")

    command.__name__ = name
    command.__doc__ = arguments.__doc__
    return command_from(arguments, hf_fields=False)(command)


for _name, (_target, _arguments) in BENCHMARKS.items():
    app.command(_name)(_command(_name, _target, _arguments))
