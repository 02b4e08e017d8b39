"""What every attention diagnostic in this folder shares: the layer's shape on the command line, and a result
written as NAME-DEVICE.{json,md} (default docs/experiments/; DEVICE the class of the machine) with the date,
machine, commit and command that measured it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path


def parser(doc: str, name: str) -> argparse.ArgumentParser:
    """A parser with the layer's shape and the output folder; the tool adds its own options."""
    found = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    found.add_argument("--heads", type=int, default=12, help="attention heads (default 12)")
    found.add_argument("--head-size", type=int, default=64, help="width of each head (default 64)")
    found.add_argument(
        "--output-dir", help=f"where to write {name}-DEVICE.{{json,md}} (default docs/experiments)"
    )
    return found


def write(name: str, script: str, argv: list[str] | None, args, measured: dict,
          to_markdown: Callable[[dict], str]) -> dict:  # fmt: skip
    """The result (`measured` beside the date, machine, commit, command and arguments), written atomically as
    json and markdown, and printed."""
    from kolong.bench.machine import describe_machine, device_class
    from kolong.bench.results import source_commit
    from kolong.io import atomic_write_json, atomic_write_text

    machine = describe_machine()
    out = Path(args.output_dir or Path(__file__).parents[2] / "docs" / "experiments")
    stem = f"{name}-{device_class(machine)}"
    command = f"python benchmarks/tools/{script} " + " ".join(argv if argv is not None else sys.argv[1:])
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine,
              "commit": source_commit(), "command": command.strip(), "arguments": vars(args), **measured}  # fmt: skip
    atomic_write_json(out / f"{stem}.json", result)
    atomic_write_text(out / f"{stem}.md", to_markdown(result))
    print(to_markdown(result))
    return result
