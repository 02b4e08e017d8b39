"""What `kolong bench` writes and keeps: the result of a run (the benchmark's summary, the machine, its device
class, the date, the commit of kolong measured, the command, every timing), written as JSON and markdown, and
the cases of an interrupted run that a rerun keeps.

Results live in `benchmarks/results/<device class>/<benchmark>.{json,md}` (`machine.device_class`): one current
result per benchmark and device class, which a new run replaces. `write_results` adds the machine, the versions,
the date, the commit, the command and a table of every timing to what the benchmark wrote, atomically; a partial
result (a run cut short, as by a time limit) goes to `NAME.partial.{json,md}`, which a complete one removes. A
resumable benchmark rerun with the same arguments on a machine described the same way keeps the cases such a file
holds (`kept_cases`).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import datetime, timezone
from pathlib import Path

from kolong.io import atomic_write_json, atomic_write_text


@dataclass
class Timing:
    """Seconds of one step, one value per round, and any figures the step reported beside them."""

    seconds: list[float] = field(default_factory=list)
    extras: dict[str, list[float]] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def extra(self, name: str) -> float:
        return statistics.median(self.extras[name])

    def as_dict(self) -> dict:
        return {
            "median_s": self.median, "min_s": min(self.seconds), "max_s": max(self.seconds),
            "rounds": len(self.seconds), "seconds": list(self.seconds),
            **{f"median_{k}": statistics.median(v) for k, v in self.extras.items()},
        }  # fmt: skip


def resumed_summary(rows: list[dict], resume: dict | None) -> dict:
    """How many cases were kept from an interrupted run, and its date: said beside the tables."""
    count = sum(1 for row in rows if row.get("kept"))
    return {"resumed": {"cases": count, "from": (resume or {}).get("date")}} if count else {}


_SAME_MACHINE = ("cpu", "cpu_count", "gpu", "cuda", "python", "torch", "transformers")


def case_key(size: dict) -> str:
    return json.dumps(size, sort_keys=True, default=str)


def _settings(args) -> dict:
    """The arguments that decide what is measured (not where it is written, nor whether to resume)."""
    arguments = asdict(args) if is_dataclass(args) else dict(args)
    kept = {k: v for k, v in arguments.items() if k not in ("output_dir", "resume")}
    return json.loads(json.dumps(kept, default=str))


def _stored(row: dict) -> dict | None:
    """A row as JSON (its facts and every round's seconds), or None when a fact is not JSON."""
    size = row["size"]
    stored = {"size": size, "references": row["references"],
              "facts": {k: v for k, v in row.items() if k not in ("size", "timings", "references", "kept")
                        and k not in size},
              "timings": {name: {"seconds": t.seconds, "extras": t.extras} for name, t in row["timings"].items()}}  # fmt: skip
    try:
        return json.loads(json.dumps(stored))
    except (TypeError, ValueError):
        return None


def restored_row(stored: dict) -> dict:
    timings = {name: Timing(list(t["seconds"]), {k: list(v) for k, v in t["extras"].items()})
               for name, t in stored["timings"].items()}  # fmt: skip
    size = stored["size"]
    return {**size, **stored["facts"], "size": size, "timings": timings, "references": stored["references"]}


def kept_cases(benchmark, args, machine: dict, partial: dict | None) -> list[dict]:
    """The stored rows of `partial` that a rerun keeps: a resumable benchmark's interrupted run with the same
    arguments on a machine described the same way; otherwise none."""
    if not (
        benchmark.resumable
        and partial
        and partial.get("partial")
        and partial.get("benchmark") == benchmark.name
    ):
        return []
    resume = partial.get("resume") or {}
    same_machine = all(resume.get("machine", {}).get(k) == machine.get(k) for k in _SAME_MACHINE)
    if not same_machine or resume.get("arguments") != _settings(args):
        return []
    return list(resume.get("rows") or [])


# Tracked paths that do not change what a benchmark runs: results and prose. A result written by one run (a
# diagnostic's, under docs/experiments) must not mark the next run's commit as changed.
NOT_RUN = ("docs", "benchmarks/results")


def source_commit(root: Path | None = None) -> str | None:
    """The git commit of kolong's source tree when it runs from a checkout (`+changes` when tracked files that run
    differ from it: anything but NOT_RUN), else None (an installed wheel: the version in `machine` says what
    ran). `root`: the checkout (default: the one this module is in)."""
    root = root or Path(__file__).resolve().parents[3]
    if not (root / ".git").exists():
        return None
    excluded = [f":(exclude){path}" for path in NOT_RUN]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()  # fmt: skip
        changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
                                  ".", *excluded], capture_output=True, text=True, check=True,
                                 timeout=10).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+changes" if changed else head


# Options that change where a run goes or whether it resumes, not what it measures.
NOT_MEASURED = ("output_dir", "resume", "device")


def changed_options(args, ignore: tuple[str, ...] = ("output_dir", "resume")) -> list[tuple[str, object]]:
    """(field, value) of every option of `args` that differs from its default, in the options' order."""
    if not is_dataclass(args):
        return []
    changed = []
    for spec in dataclasses.fields(args):
        value = getattr(args, spec.name)
        default = spec.default_factory() if spec.default_factory is not dataclasses.MISSING else spec.default
        if spec.name not in ignore and value != default:
            changed.append((spec.name, value))
    return changed


def command_line(benchmark, args) -> str:
    """`kolong bench NAME` with every option that differs from its default: the command that measures it again."""
    parts = ["kolong", "bench", benchmark.name]
    for name, value in changed_options(args):
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            parts.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, (list, tuple)):
            parts += [flag, ",".join(str(item) for item in value)]
        else:
            parts += [flag, str(value)]
    return " ".join(part if part and " " not in part else repr(part) for part in parts)


def run_result(benchmark, args, rows: list[dict], summary: dict, machine: dict) -> dict:
    from kolong.lab.bench.machine import device_class

    arguments = asdict(args) if is_dataclass(args) else args
    device = getattr(args, "device", "cpu")
    device = next((row["device"] for row in rows if isinstance(row.get("device"), str)), device)
    return {
        "benchmark": benchmark.name,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": source_commit(),
        "command": command_line(benchmark, args),
        "device_class": device_class(machine, device if isinstance(device, str) else "cpu"),
        "machine": machine,
        **summary,
        "arguments": summary.get("arguments", arguments),
        "timings": [
            {**row["size"], "step": name,
             "reference": name in row["references"], **timing.as_dict()}
            for row in rows for name, timing in row["timings"].items()
        ],
    }  # fmt: skip


def partial_result(
    benchmark, args, rows: list[dict], machine: dict, total: int, resume: dict | None = None
) -> dict:
    """The result of the cases measured so far; the timings alone if the summary needs every case."""
    try:
        summary = benchmark.summarise(args, list(rows))
    except Exception:  # a summary may compare cases not measured yet; the timings still stand
        summary = {}
    result = {
        **run_result(benchmark, args, rows, summary, machine),
        "partial": {"cases": len(rows), "of": total},
        **resumed_summary(rows, resume),
    }
    stored = [_stored(row) for row in rows]
    if benchmark.resumable and all(row is not None for row in stored):
        result["resume"] = {"arguments": _settings(args), "machine": machine, "rows": stored}
    return result


def _with_machine(tables: str, result: dict) -> str:
    """The tables, then the cases kept from an interrupted run (if any), the machine and every timing."""
    parts = [tables]
    resumed = result.get("resumed")
    if resumed:
        parts.append(f"**{resumed['cases']} case(s) were kept from an interrupted run of {resumed['from']}** "
                     "(the same options on a machine described the same way; `--no-resume` measures every case).")  # fmt: skip
    return "\n\n".join([*parts, machine_line(result), timings_markdown(result)])


def machine_line(result: dict) -> str:
    """Where, when, at which commit and by which command the result was measured."""
    m = result["machine"]
    parts = [f"Machine: {m['cpu']}, {m['cores_available']} cores"]
    if m.get("gpu"):
        parts.append(f"GPU {m['gpu']}")
    parts += [f"{name} {m[name]}" for name in ("python", "torch", "transformers") if m.get(name)]
    line = ", ".join(parts) + f"; {result['date']}"
    if result.get("commit"):
        line += f"; kolong at commit {result['commit']}"
        if result.get("commit_note"):
            line += f" ({result['commit_note']})"
    line += "."
    if result.get("command"):
        line += f"\n\nCommand: `{result['command']}`"
    return line


def timings_markdown(result: dict) -> str:
    """Every timed step: median and min-max over its rounds (what the tables above are medians of)."""
    rows = result.get("timings", [])
    if not rows:
        return ""
    size_keys = [k for k in rows[0] if k not in ("step", "reference", "median_s", "min_s", "max_s", "rounds", "seconds")
                 and not k.startswith("median_")]  # fmt: skip
    lines = ["## Every timing (seconds per call; median, min-max over interleaved rounds)", "",
             "| case | step | median s | min-max s | rounds |", "|---|---|---:|---:|---:|"]  # fmt: skip
    for row in rows:
        case = ", ".join(
            f"{k} {row[k]}" for k in size_keys if k in row and not isinstance(row[k], dict | list)
        )
        name = f"{row['step']} (reference)" if row["reference"] else row["step"]
        lines.append(f"| {case or '—'} | {name} | {row['median_s']:.4g} | {row['min_s']:.4g}-{row['max_s']:.4g} "
                     f"| {row['rounds']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def write_results(
    benchmark, result: dict, output_dir: str | Path, stem: str | None = None
) -> tuple[Path, Path]:
    """`output_dir/NAME.json` and `NAME.md` (the benchmark's tables, the machine, every timing), atomically.

    A partial result (see `run`) goes to `NAME.partial.{json,md}` instead, so that a run cut short never
    replaces a complete one; the complete result removes them."""
    output_dir, stem = Path(output_dir), stem or benchmark.name
    partial = result.get("partial")
    if partial:
        return _write_partial(benchmark, result, output_dir / f"{stem}.partial")
    figures = benchmark.figures(result, output_dir)
    if figures:
        result = {**result, "figures": [str(path) for path in figures]}
    markdown = _with_machine(benchmark.to_markdown(result).rstrip("\n"), result)
    written = (
        atomic_write_json(output_dir / f"{stem}.json", result),
        atomic_write_text(output_dir / f"{stem}.md", markdown.rstrip("\n") + "\n"),
    )
    for suffix in (".partial.json", ".partial.md"):
        (output_dir / f"{stem}{suffix}").unlink(missing_ok=True)
    return written


def _write_partial(benchmark, result: dict, stem: Path) -> tuple[Path, Path]:
    partial = result["partial"]
    try:
        tables = benchmark.to_markdown(result).rstrip("\n")
    except Exception:  # the tables may need every case; the timings below are the measurement
        tables = f"# kolong bench {benchmark.name}"
    note = (f"**Partial: {partial['cases']} of {partial['of']} cases measured** (the run was stopped or is "
            "still going; a complete run replaces this file).")  # fmt: skip
    markdown = _with_machine(f"{note}\n\n{tables}", result)
    return (
        atomic_write_json(stem.with_name(stem.name + ".json"), result),
        atomic_write_text(stem.with_name(stem.name + ".md"), markdown.rstrip("\n") + "\n"),
    )
