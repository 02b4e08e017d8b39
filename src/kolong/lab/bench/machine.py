"""A description of the machine a benchmark ran on, stored with its results, and the name of its device class
(the folder under benchmarks/results/ that holds one current result per benchmark for such machines)."""

from __future__ import annotations

import os
import platform
import re
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


_CPU_NOISE = {
    "intel",
    "amd",
    "r",
    "tm",
    "cpu",
    "processor",
    "core",
    "genuine",
    "authentic",
    "with",
    "radeon",
    "graphics",
}


def device_class(machine: dict, device: str = "cpu") -> str:
    """The GPU's model in lower case for a run on a GPU; for a run on the CPU, `cpu-FAMILY-Ncore`: the CPU's
    family word and the cores the run could use (tests/test_bench.py lists examples)."""
    if device.startswith("cuda") and machine.get("gpu"):
        words = re.split(r"[\s_-]+", re.sub(r"^NVIDIA\s+", "", machine["gpu"]))
        return re.sub(r"[^a-z0-9]+", "", words[0].lower()) or "gpu"
    words = [
        w for w in re.split(r"[^a-z0-9]+", str(machine.get("cpu", "")).lower()) if w and w not in _CPU_NOISE
    ]
    family = next((w for w in words if not w.isdigit()), "cpu")
    return f"cpu-{family}-{machine.get('cores_available') or machine.get('cpu_count') or 1}core"
