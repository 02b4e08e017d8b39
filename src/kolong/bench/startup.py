"""`kolong bench startup`: whole-process time of the CLI's help pages and of `kolong evaluate qa`.

Every command runs as a fresh process (`python -m kolong.cli ...`, the same code as the `kolong` script),
the commands in turn, round after round, so machine load drifts across all of them alike; each figure is
the median over rounds, with the peak resident memory of the process. The reference for `evaluate qa` is
the official KorQuAD 1.0 evaluation script when `--official-script` gives its path (it is not shipped
with kolong), run the same way on the same files. Standard library only: nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from kolong.io import atomic_write_json, atomic_write_text

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


def run_startup_benchmark(
    data: Path,
    questions: int = 800,
    rounds: int = 7,
    official_script: Path | None = None,
    on_step: Callable[[str], None] | None = None,
) -> dict:
    step = on_step or (lambda message: None)
    kolong = [sys.executable, "-m", "kolong.cli"]
    with tempfile.TemporaryDirectory(prefix="kolong-startup-") as scratch:
        subset, predictions = question_subset(Path(data), questions, Path(scratch))
        commands = {"kolong " + " ".join(args): [*kolong, *args] for args in HELP_COMMANDS}
        commands["kolong evaluate qa"] = [
            *kolong,
            "evaluate",
            "qa",
            "--data",
            str(subset),
            "--predictions",
            str(predictions),
        ]
        if official_script is not None:
            commands["official KorQuAD script"] = [
                sys.executable,
                str(official_script),
                str(subset),
                str(predictions),
            ]
        commands["python -c pass (interpreter start)"] = [sys.executable, "-c", "pass"]
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for command in commands.values():  # warm-up: file cache, .pyc files
            run_once(command)
        for round_index in range(rounds):
            step(f"round {round_index + 1}/{rounds}")
            for name, command in commands.items():
                samples[name].append(run_once(command))
    rows = [
        {
            "command": name,
            "median_s": statistics.median(s for s, _ in runs),
            "min_s": min(s for s, _ in runs),
            "max_s": max(s for s, _ in runs),
            "peak_rss_mb": statistics.median(m for _, m in runs),
        }
        for name, runs in samples.items()
    ]
    return {
        "benchmark": "startup",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "questions": questions,
        "rounds": rounds,
        "rows": rows,
    }


def to_markdown(result: dict) -> str:
    machine = result["machine"]
    lines = [
        "# CLI start-up",
        "",
        f"{result['date']}, Python {machine['python']}, {machine['cpu_count']} cores, {machine['platform']}. "
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


def write_results(result: dict, output_dir: str | Path) -> tuple[Path, Path]:
    output_dir = Path(output_dir)
    json_path = atomic_write_json(output_dir / "startup.json", result)
    markdown_path = atomic_write_text(output_dir / "startup.md", to_markdown(result))
    return json_path, markdown_path
