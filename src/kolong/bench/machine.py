"""A description of the machine a benchmark ran on, stored with its results."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def describe_machine(with_torch: bool = True) -> dict:
    """CPU, cores, Python and platform; with `with_torch`, also torch's threads, the GPU and the versions of
    torch and transformers (the start-up benchmark leaves them out: it never imports torch)."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    machine = {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "cores_available": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if with_torch:
        import torch
        import transformers

        machine.update(
            torch_threads=torch.get_num_threads(),
            gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            cuda=torch.version.cuda if torch.cuda.is_available() else None,
            torch=torch.__version__,
            transformers=transformers.__version__,
        )
    return machine
