"""Peak memory of one call, in this process or a fresh worker process (the benchmarks share these).

On CUDA the allocator's peak, which resets; on CPU the resident set's peak (VmHWM), which Linux resets to
the current size on request. A worker process (`run_worker`) gives a measurement of its own where one
process's peak cannot be reset (a parent holding every model would report that).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys


def _status_mb(field: str) -> float:
    """A memory figure of this process from /proc/self/status (VmRSS now, VmHWM its peak), in MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def _release_free_memory() -> None:
    # kolong raises glibc's trim and mmap thresholds (`kolong.runtime.tune_allocator`), so memory a call frees
    # stays resident, and a second call in the same process would reuse it without raising the resident set:
    # measured after a forward, a training step's growth would leave out up to the forward's peak. malloc_trim
    # hands every free page back first (glibc only; elsewhere nothing to do).
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _reset_peak() -> None:
    # Linux resets VmHWM to the current RSS on "5" (getrusage's ru_maxrss cannot be reset, and it carries the
    # parent's peak across fork + exec: a worker started by a parent holding every model would report that).
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")


def peak_growth_mb(step, cuda: bool) -> float:
    """How far one call of `step` raises this process's memory above where it started, in MB (CUDA: the
    allocator's peak; CPU: VmHWM after resetting it to the current RSS)."""
    import torch

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        _release_free_memory()
        _reset_peak()
        base = _status_mb("VmRSS")
    step()
    if cuda:
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    return _status_mb("VmHWM") - base


def run_worker(module: str, payload: dict, row: dict) -> dict:
    """`python -m module PAYLOAD` in a fresh process (this one's import path): the JSON row it prints last, or
    `row` with `error`: how the worker ended (its exit status, or the signal that killed it) and its last error
    line."""
    import signal

    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    process = subprocess.run([sys.executable, "-m", module, json.dumps(payload)], capture_output=True,
                             text=True, check=False, env=environment)  # fmt: skip
    if process.returncode == 0:
        with contextlib.suppress(IndexError, json.JSONDecodeError):
            return json.loads(process.stdout.strip().splitlines()[-1])
        return {**row, "error": "worker exited 0 without a result line"}
    if process.returncode < 0:
        name = signal.Signals(-process.returncode).name
        status = f"worker killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    else:
        status = f"worker exited {process.returncode}"
    lines = process.stderr.strip().splitlines()
    return {**row, "error": f"{status}: {lines[-1][-300:]}" if lines else status}
