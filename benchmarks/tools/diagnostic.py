"""What every attention diagnostic in this folder shares: the layer's shape on the command line, and a result
written as NAME-DEVICE.{json,md} (default docs/experiments/; DEVICE the class of the machine) with the date,
machine, commit and command that measured it."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path


def parser(
    doc: str, name: str, tokens: int | None = None, rounds: int | None = None
) -> argparse.ArgumentParser:
    """A parser with the layer's shape and the output folder, and, given their defaults, the tokens per call and
    the interleaved rounds; the tool adds its own options."""
    found = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    found.add_argument("--heads", type=int, default=12, help="attention heads (default 12)")
    found.add_argument("--head-size", type=int, default=64, help="width of each head (default 64)")
    if tokens is not None:
        found.add_argument("--tokens", type=int, default=tokens, help=f"tokens per call (default {tokens})")
    if rounds is not None:
        found.add_argument(
            "--rounds", type=int, default=rounds, help=f"interleaved rounds (default {rounds})"
        )
    found.add_argument(
        "--output-dir", help=f"where to write {name}-DEVICE.{{json,md}} (default docs/experiments)"
    )
    return found


def write(name: str, script: str, argv: list[str] | None, args, measured: dict,
          to_markdown: Callable[[dict], str]) -> dict:  # fmt: skip
    """The result (`measured` beside the date, machine, commit, command and arguments), written atomically as
    json and markdown, and printed."""
    from kolong.io import atomic_write_json, atomic_write_text
    from kolong.lab.bench.machine import describe_machine, device_class
    from kolong.lab.bench.results import source_commit

    machine = describe_machine()
    out = Path(args.output_dir or Path(__file__).parents[2] / "docs" / "experiments")
    stem = f"{name}-{device_class(machine)}"
    arguments = " ".join(argv if argv is not None else sys.argv[1:])
    command = f"python -m benchmarks.tools.{script.removesuffix('.py')} {arguments}"
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine,
              "commit": source_commit(), "command": command.strip(), "arguments": vars(args), **measured}  # fmt: skip
    atomic_write_json(out / f"{stem}.json", result)
    atomic_write_text(out / f"{stem}.md", to_markdown(result))
    print(to_markdown(result))
    return result


def measure(built: dict, paths: tuple[str, ...], rounds: int) -> dict:
    """{first: {second: {path: [seconds per round]}}} for cases keyed (first, second) whose value starts with a
    call(path): every path of every case warmed up once, then once per round, in turn."""
    runs: dict = {}
    for (first, second), (call, *_) in built.items():
        runs.setdefault(str(first), {})[str(second)] = {path: [] for path in paths}
        for path in paths:
            call(path)
    for _ in range(rounds):
        for (first, second), (call, *_) in built.items():
            for path in paths:
                start = time.perf_counter()
                call(path)
                runs[str(first)][str(second)][path].append(time.perf_counter() - start)
    return runs


def integers(text: str) -> list[int]:
    """A comma-separated list of integers ("512,2048")."""
    return [int(part) for part in text.split(",") if part.strip()]


def page(lines: list[str], result: dict) -> str:
    """A diagnostic's markdown: its lines, then the machine, date, commit and command that measured it."""
    from kolong.lab.bench.results import machine_line

    return "\n".join([*lines, "", machine_line(result)]) + "\n"


def layer_setting(arguments: dict) -> str:
    """What one timed call is, from the parsed arguments (`--heads`, `--head-size`, `--tokens`)."""
    return (f"One layer's attention, forward + backward, fp32, {arguments['heads']} heads of "
            f"{arguments['head_size']}, {arguments['tokens']} tokens per call (batch = tokens / length)")  # fmt: skip


def cells(summary: dict):
    """(first, second, cell, the cell's median ms by path) of a {first: {second: cell}} summary, in order."""
    for first, by_second in summary.items():
        for second, cell in by_second.items():
            yield first, second, cell, cell["ms"]
