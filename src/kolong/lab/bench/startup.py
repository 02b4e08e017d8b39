"""`kolong bench startup`: whole-process time of the CLI's help pages and of `kolong evaluate qa`.

Every command runs as a fresh process (`python -m kolong.cli ...`, the same code as the `kolong` script),
the commands in turn, round after round, so machine load drifts across all of them alike; each figure is
the median over rounds, with the peak resident memory of the process. The reference for `evaluate qa` is
the official KorQuAD 1.0 evaluation script when `--official-script` gives its path (it is not shipped
with kolong), run the same way on the same files. Standard library only: nothing here imports torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from kolong.data.shared import korquad_dev
from kolong.errors import DataError
from kolong.lab.bench.arguments import StartupBenchArguments
from kolong.lab.bench.harness import Benchmark, Case, Measured, run

HELP_COMMANDS = (
    ("--help",),
    ("evaluate", "qa", "--help"),
    ("finetune", "qa", "--help"),
    ("pretrain", "mlm", "--help"),
    ("bench", "encoder", "--help"),
)


# A small launcher process forks and execs the command and reports its wall time and peak RSS. Linux
# counts the RSS a process had before exec in its maxrss, so forking straight from this (possibly large)
# process would charge the command with our memory.
_LAUNCHER = """
import os, sys, time
started = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as report:
    report.write(f"{time.perf_counter() - started} {usage.ru_maxrss}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_once(command: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one process; raises if it fails."""
    with tempfile.NamedTemporaryFile(suffix=".txt") as report:
        completed = subprocess.run(
            [sys.executable, "-c", _LAUNCHER, report.name, *command],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
        )
        if completed.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} exited {completed.returncode}: {completed.stderr.decode()[-500:]}"
            )
        seconds, maxrss_kb = Path(report.name).read_text().split()
    return float(seconds), float(maxrss_kb) / 1024


def question_subset(data: Path, questions: int, directory: Path) -> tuple[Path, Path]:
    """The first `questions` questions of a SQuAD/KorQuAD file, and a predictions file of gold answers."""
    payload = json.loads(data.read_text(encoding="utf-8"))
    kept, predictions = [], {}
    for article in payload["data"]:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            qas = paragraph["qas"][: questions - len(predictions)]
            predictions.update({qa["id"]: qa["answers"][0]["text"] for qa in qas})
            if qas:
                paragraphs.append({**paragraph, "qas": qas})
        if paragraphs:
            kept.append({**article, "paragraphs": paragraphs})
        if len(predictions) >= questions:
            break
    subset, answers = directory / "data.json", directory / "predictions.json"
    subset.write_text(json.dumps({"version": payload.get("version", ""), "data": kept}, ensure_ascii=False))
    answers.write_text(json.dumps(predictions, ensure_ascii=False))
    return subset, answers


class StartupBenchmark(Benchmark):
    name = "startup"
    arguments = StartupBenchArguments
    light_machine = True  # nothing here imports torch

    def setup(self, args: StartupBenchArguments, size: dict) -> Case:
        data = Path(args.data) if args.data else korquad_dev()
        if not data.is_file():
            raise DataError(f"--data {data} is not a file")
        if args.official_script is not None and not Path(args.official_script).is_file():
            raise DataError(f"--official-script {args.official_script} is not a file")
        self._scratch = tempfile.TemporaryDirectory(prefix="kolong-startup-")
        subset, predictions = question_subset(data, args.questions, Path(self._scratch.name))
        kolong = [sys.executable, "-m", "kolong.cli"]
        commands = {"kolong " + " ".join(words): [*kolong, *words] for words in HELP_COMMANDS}
        commands["kolong evaluate qa"] = [*kolong, "evaluate", "qa", "--data", str(subset), "--predictions",
                                          str(predictions)]  # fmt: skip
        references = {}
        if args.official_script is not None:
            references["official KorQuAD script"] = [sys.executable, str(args.official_script), str(subset),
                                                     str(predictions)]  # fmt: skip
        references["python -c pass (interpreter start)"] = [sys.executable, "-c", "pass"]

        def launch(command: list[str]):
            def step() -> Measured:
                seconds, peak = run_once(command)
                return Measured(seconds, {"peak_rss_mb": peak})

            return step

        return Case({name: launch(c) for name, c in commands.items()},
                    {name: launch(c) for name, c in references.items()}, repeats=args.rounds)  # fmt: skip

    def teardown(self) -> None:
        if getattr(self, "_scratch", None) is not None:
            self._scratch.cleanup()

    def summarise(self, args: StartupBenchArguments, rows: list[dict]) -> dict:
        rows_out = [
            {"command": name, "median_s": timing.median, "min_s": min(timing.seconds), "max_s": max(timing.seconds),
             "peak_rss_mb": timing.extra("peak_rss_mb")}
            for name, timing in rows[0]["timings"].items()
        ]  # fmt: skip
        return {"questions": args.questions, "rounds": args.rounds, "rows": rows_out}

    def to_markdown(self, result: dict) -> str:
        return to_markdown(result)


def run_startup_benchmark(
    data: Path, questions: int = 800, rounds: int = 7, official_script: Path | None = None,
    on_step: Callable[[str], None] | None = None,
) -> dict:  # fmt: skip
    args = StartupBenchArguments(data=str(data), questions=questions, rounds=rounds,
                                 official_script=str(official_script) if official_script else None)  # fmt: skip
    return run(StartupBenchmark(), args, on_step)


def to_markdown(result: dict) -> str:
    lines = [
        "# CLI start-up",
        "",
        f"Each command is a fresh process; median (min-max) of {result['rounds']} interleaved rounds after a "
        f"warm-up. `kolong evaluate qa` and the official KorQuAD 1.0 script score the same "
        f"{result['questions']} questions of the shared KorQuAD 1.0 dev file. Produced by `kolong bench startup`.",
        "",
        "| command | median s | min-max s | peak RSS MB |",
        "|---|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| `{row['command']}` | {row['median_s']:.3f} | {row['min_s']:.3f}-{row['max_s']:.3f} "
            f"| {row['peak_rss_mb']:.0f} |"
        )
    return "\n".join(lines) + "\n"
