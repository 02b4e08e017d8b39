"""Peak memory of one call, in this process or a fresh worker process (the benchmarks share these).

The probe itself is the library's (`kolong.measure`); a worker process (`run_worker`) gives a measurement of its
own where one process's peak cannot be reset (a parent holding every model would report that).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

from kolong.measure import peak_growth_mb

__all__ = ["peak_growth_mb", "run_worker"]


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
