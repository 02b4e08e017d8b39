"""One harness for every `kolong bench ...`: the protocol and the timer (what it writes: `results.py`).

A benchmark is a class with a `name` (the command, and the stem of `benchmarks/results/DEVICE/NAME.{json,md}`),
an `arguments` dataclass (its options; `kolong.lab.bench.arguments`, read by `--help` without torch) and:

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
as by a job's time limit, still returns its finished cases.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kolong.errors import ConfigError, OutOfMemoryError
from kolong.lab.bench.results import (  # noqa: F401  (Timing, write_results: importable from here)
    Timing,
    case_key,
    kept_cases,
    partial_result,
    restored_row,
    resumed_summary,
    run_result,
    write_results,
)

Step = Callable[[], object]


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


def timed_with_peak(call: Callable[[], object], cuda: bool) -> Measured:
    """A step that times itself: one `call`, its seconds and its peak memory growth (`peak_mb`)."""
    from kolong.measure import peak_growth_mb

    started = time.perf_counter()
    peak = peak_growth_mb(call, cuda)
    return Measured(time.perf_counter() - started, {"peak_mb": peak})


def length_sizes(lengths: list[int], least: int) -> list[dict]:
    """One case per length of --lengths, each at least `least` tokens (refused naming the option otherwise)."""
    if not lengths or min(lengths) < least:
        raise ConfigError(f"--lengths: token counts of at least {least}, got {lengths}")
    return [{"length": length} for length in lengths]


def resolve_device(requested: str) -> str:
    """--device auto | cpu | cuda -> cpu or cuda; cuda when none is visible is refused, naming the option."""
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is visible")
    return "cuda" if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()) else "cpu"


def default_output_dir(benchmark, args) -> Path:
    """benchmarks/results/<device class>: the folder of this machine's class for the device the run measures."""
    from kolong.lab.bench.machine import describe_machine, device_class

    device = getattr(args, "device", "cpu")
    device = resolve_device(device) if isinstance(device, str) else "cpu"
    machine = describe_machine(with_torch=not benchmark.light_machine)
    return Path("benchmarks") / "results" / device_class(machine, device)


def cuda_sync(device: str) -> Callable[[], None] | None:
    if not str(device).startswith("cuda"):
        return None
    import torch

    return torch.cuda.synchronize


def free_cuda(device: str) -> None:
    """Hand a failed case's cached CUDA blocks back before the next one (nothing on CPU)."""
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


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
    run cut short (a job's time limit) still leaves what it measured. Given such a partial result as
    `resume`, a resumable benchmark keeps its cases when it came from the same arguments on the same machine
    (`kept_cases`) and measures only the others."""
    from kolong.lab.bench.machine import describe_machine

    step = benchmark.progress = on_step or (lambda message: None)  # a benchmark may report inside a case too
    if isinstance(getattr(args, "device", None), str):
        resolve_device(args.device)  # --device cuda without a GPU: refused before any case, naming the option
    machine = describe_machine(with_torch=not benchmark.light_machine)
    kept = {case_key(row["size"]): restored_row(row) for row in kept_cases(benchmark, args, machine, resume)}
    rows: list[dict] = []
    try:
        sizes = list(benchmark.sizes(args))
        for number, size in enumerate(sizes, 1):
            label = ", ".join(f"{k} {v}" for k, v in size.items())
            if case_key(size) in kept:
                step(f"{benchmark.name}: {label} measured by the interrupted run, kept".rstrip(", "))
                rows.append({**kept[case_key(size)], "kept": True})
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
                on_partial(partial_result(benchmark, args, rows, machine, len(sizes), resume))
    finally:
        benchmark.teardown()
    result = run_result(benchmark, args, rows, benchmark.summarise(args, rows), machine)
    return {**result, **resumed_summary(rows, resume)}


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
