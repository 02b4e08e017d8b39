"""One harness for every `kolong bench ...`: the protocol, the timer and the results writer.

A benchmark is a class with a `name` (the command, and the stem of `benchmarks/results/NAME.{json,md}`),
an `arguments` dataclass (its options; `kolong.bench.arguments`, read by `--help` without torch) and:

- `sizes(args)`: the cases it measures (lengths, thread counts, stages, ...), one dict each;
- `setup(args, size)`: builds what one case needs and returns a `Case`: kolong's `steps` and the
  `references` they are compared with (HF's `BertModel`, the `run_qa` approach, a plain loop, ...);
- `summarise(args, rows)`: the results dict (each benchmark's own fields), and `to_markdown(result)`.

`run(benchmark, args)` times every case with `time_interleaved`: after `warmup` untimed calls of each
step, each round calls every step once, kolong's and the references' in turn, the order reversed every
other round, so machine load drifts over both sides alike; CUDA work is synchronised before each clock
read. A step may time itself (a Trainer run reports its logged throughput, a subprocess its wall time)
by returning a `Measured` (its seconds and other per-round figures, such as peak memory); other steps
are timed from outside, whatever they return. Each timing keeps every round: median, min and max are reported.
`write_results` adds the machine, the versions, the date and a table of every timing to what the
benchmark wrote, atomically, as JSON and markdown. After each case the command also writes what it
has measured so far to `NAME.partial.{json,md}` (removed when the run completes), so that a run cut short,
as on a lent GPU with a time limit, still returns its finished cases.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import datetime, timezone
from pathlib import Path

from kolong.errors import OutOfMemoryError
from kolong.io import atomic_write_json, atomic_write_text

Step = Callable[[], object]


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
            "rounds": len(self.seconds), **{f"median_{k}": statistics.median(v) for k, v in self.extras.items()},
        }  # fmt: skip


@dataclass
class Measured:
    """What a step that times itself returns: its seconds, and other figures of the call (peak memory)."""

    seconds: float
    extras: dict[str, float] = field(default_factory=dict)


@dataclass
class Case:
    """One size of a benchmark: kolong's steps and their references, timed side by side."""

    steps: dict[str, Step]
    references: dict[str, Step] = field(default_factory=dict)
    repeats: int = 5
    warmup: int = 1
    min_seconds: float = 0.0  # keep adding rounds until this much time was measured
    sync: Callable[[], None] | None = None  # torch.cuda.synchronize on a GPU
    facts: dict = field(default_factory=dict)  # what setup found (agreement checks, counts), kept in the row


def resolve_device(requested: str) -> str:
    """--device auto | cpu | cuda -> cpu or cuda; cuda when none is visible is refused, naming the option."""
    import torch

    from kolong.errors import ConfigError

    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is visible")
    return "cuda" if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()) else "cpu"


def cuda_sync(device: str) -> Callable[[], None] | None:
    if not str(device).startswith("cuda"):
        return None
    import torch

    return torch.cuda.synchronize


def _call(step: Step, sync: Callable[[], None] | None) -> tuple[float, dict]:
    started = time.perf_counter()
    reported = step()
    if sync is not None:
        sync()
    elapsed = time.perf_counter() - started
    if isinstance(reported, Measured):
        return float(reported.seconds), {key: float(value) for key, value in reported.extras.items()}
    return elapsed, {}


def time_interleaved(
    steps: dict[str, Step], repeats: int = 5, warmup: int = 1, sync: Callable[[], None] | None = None,
    min_seconds: float = 0.0,
) -> dict[str, Timing]:  # fmt: skip
    """Median-ready timings of `steps`, called in turn round after round (order reversed every other round)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    for _ in range(warmup):
        for step in steps.values():
            _call(step, sync)
    timings = {name: Timing() for name in steps}
    order, rounds, measured = list(steps), 0, 0.0
    while rounds < repeats or measured < min_seconds:
        for name in order if rounds % 2 == 0 else reversed(order):
            seconds, extras = _call(steps[name], sync)
            timings[name].seconds.append(seconds)
            for key, value in extras.items():
                timings[name].extras.setdefault(key, []).append(value)
            measured += seconds
        rounds += 1
    return timings


class Benchmark:
    """Subclass and fill in; `run` and `write_results` do the rest."""

    name: str = ""
    arguments: type = object
    light_machine: bool = False  # describe the machine without importing torch (the start-up benchmark)
    resumable: bool = False  # a rerun keeps the cases an interrupted run measured (see `run`)
    progress: Callable[[str], None] = staticmethod(lambda message: None)  # `run` gives it its on_step

    def sizes(self, args) -> Iterable[dict]:
        return [{}]

    def setup(self, args, size: dict) -> Case:
        raise NotImplementedError

    def teardown(self) -> None:
        """Undo process-wide settings (thread counts, environment) after the last case, even on failure."""

    def summarise(self, args, rows: list[dict]) -> dict:
        raise NotImplementedError

    def to_markdown(self, result: dict) -> str:
        raise NotImplementedError

    def figures(self, result: dict, output_dir: Path) -> list[Path]:
        """Figures of a complete result, drawn into `output_dir` (never for a partial one)."""
        return []


def run(
    benchmark: Benchmark, args, on_step: Callable[[str], None] | None = None,
    on_partial: Callable[[dict], None] | None = None, resume: dict | None = None,
) -> dict:  # fmt: skip
    """Every case of `benchmark`, timed; its summary plus the machine, the date and every timing.

    `on_partial` receives the result so far after each case but the last (marked `partial`), so that a
    run cut short (a lent GPU's time limit) still leaves what it measured. Given such a partial result as
    `resume`, a resumable benchmark keeps its cases when it came from the same arguments on the same machine
    (`kept_cases`) and measures only the others."""
    from kolong.bench.machine import describe_machine

    step = benchmark.progress = on_step or (lambda message: None)  # a benchmark may report inside a case too
    if isinstance(getattr(args, "device", None), str):
        resolve_device(args.device)  # --device cuda without a GPU: refused before any case, naming the option
    machine = describe_machine(with_torch=not benchmark.light_machine)
    kept = {_key(row["size"]): _restored(row) for row in kept_cases(benchmark, args, machine, resume)}
    rows: list[dict] = []
    try:
        sizes = list(benchmark.sizes(args))
        for number, size in enumerate(sizes, 1):
            label = ", ".join(f"{k} {v}" for k, v in size.items())
            if _key(size) in kept:
                step(f"{benchmark.name}: {label} measured by the interrupted run, kept".rstrip(", "))
                rows.append({**kept[_key(size)], "kept": True})
                continue
            with named_out_of_memory(benchmark.name, label, number > 1):
                step(f"{benchmark.name}: setting up {label}".rstrip(", "))
                case = benchmark.setup(args, size)
                both = {**case.steps, **case.references}
                step(f"{benchmark.name}: timing {', '.join(both) or 'in its own process'} {label}".rstrip())
                timings = (
                    time_interleaved(both, case.repeats, case.warmup, case.sync, case.min_seconds)
                    if both
                    else {}
                )
            rows.append(
                {**size, **case.facts, "size": size, "timings": timings, "references": list(case.references)}
            )
            if on_partial is not None and number < len(sizes):
                on_partial(_partial_result(benchmark, args, rows, machine, len(sizes), resume))
    finally:
        benchmark.teardown()
    result = _result(benchmark, args, rows, benchmark.summarise(args, rows), machine)
    return {**result, **_resumed(rows, resume)}


@contextlib.contextmanager
def named_out_of_memory(name: str, label: str, measured_before: bool):
    """A case that does not fit in memory (CUDA's OutOfMemoryError, the CPU allocator's RuntimeError) as one
    error naming the case, instead of a traceback from deep in the model."""
    try:
        yield
    except (MemoryError, RuntimeError) as error:
        text = str(error)
        if (
            not isinstance(error, MemoryError)
            and "out of memory" not in text
            and "can't allocate memory" not in text
        ):
            raise
        kept = f"; the cases before it are in {name}.partial.json under --output-dir (--resume keeps them)"
        kept = kept if measured_before else ""
        reason = text.strip().splitlines()[0][:200] if text.strip() else type(error).__name__
        raise OutOfMemoryError(
            f"bench {name}: {label or 'the case'} does not fit in memory ({reason}): measure smaller sizes{kept}"
        ) from None


def _resumed(rows: list[dict], resume: dict | None) -> dict:
    """How many cases were kept from an interrupted run, and its date: said beside the tables."""
    count = sum(1 for row in rows if row.get("kept"))
    return {"resumed": {"cases": count, "from": (resume or {}).get("date")}} if count else {}


_SAME_MACHINE = ("cpu", "cpu_count", "gpu", "cuda", "python", "torch", "transformers")


def _key(size: dict) -> str:
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


def _restored(stored: dict) -> dict:
    timings = {name: Timing(list(t["seconds"]), {k: list(v) for k, v in t["extras"].items()})
               for name, t in stored["timings"].items()}  # fmt: skip
    size = stored["size"]
    return {**size, **stored["facts"], "size": size, "timings": timings, "references": stored["references"]}


def kept_cases(benchmark: Benchmark, args, machine: dict, partial: dict | None) -> list[dict]:
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


def _result(benchmark: Benchmark, args, rows: list[dict], summary: dict, machine: dict) -> dict:
    arguments = asdict(args) if is_dataclass(args) else args
    return {
        "benchmark": benchmark.name,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine,
        **summary,
        "arguments": summary.get("arguments", arguments),
        "timings": [
            {**row["size"], "step": name,
             "reference": name in row["references"], **timing.as_dict()}
            for row in rows for name, timing in row["timings"].items()
        ],
    }  # fmt: skip


def _partial_result(
    benchmark: Benchmark, args, rows: list[dict], machine: dict, total: int, resume: dict | None = None
) -> dict:
    """The result of the cases measured so far; the timings alone if the summary needs every case."""
    try:
        summary = benchmark.summarise(args, list(rows))
    except Exception:  # a summary may compare cases not measured yet; the timings still stand
        summary = {}
    result = {
        **_result(benchmark, args, rows, summary, machine),
        "partial": {"cases": len(rows), "of": total},
        **_resumed(rows, resume),
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
    m = result["machine"]
    parts = [f"Machine: {m['cpu']}, {m['cores_available']} cores"]
    if m.get("gpu"):
        parts.append(f"GPU {m['gpu']}")
    parts += [f"{name} {m[name]}" for name in ("python", "torch", "transformers") if m.get(name)]
    return ", ".join(parts) + f"; {result['date']}."


def timings_markdown(result: dict) -> str:
    """Every timed step: median and min-max over its rounds (what the tables above are medians of)."""
    rows = result.get("timings", [])
    if not rows:
        return ""
    size_keys = [k for k in rows[0] if k not in ("step", "reference", "median_s", "min_s", "max_s", "rounds")
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
    benchmark: Benchmark, result: dict, output_dir: str | Path, stem: str | None = None
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


def _write_partial(benchmark: Benchmark, result: dict, stem: Path) -> tuple[Path, Path]:
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
