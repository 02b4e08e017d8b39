"""Where a training step's time goes: a torch.profiler trace of the timed steps of one run, summarised.

A pipeline slower than its raw step on a GPU either keeps the device idle (host work between kernels,
host reads that wait for the queue to drain) or makes it do more. The summary gives both sides: the
device's busy fraction (kernel and copy time over wall time), the host reads per step
(`.item()`/`.tolist()`, boolean indexing: each waits for every queued kernel), the device
synchronisations per step, and the host operations that cost most; on the device, the costliest kernels and
every kernel's time by kind (`kernel_kind`): attention, matrix products, Inductor's fused Triton kernels,
copies and memsets, the rest. MFU's shortfall splits along these: attention the FLOP count credits but packed
documents never need, matmuls below their peak, and memory-bound work between them.
"""

from __future__ import annotations

import time

# .item() / .tolist() / float(tensor), and boolean indexing (a data-dependent size): each is a host read
HOST_READS = ("aten::_local_scalar_dense", "aten::nonzero")
DEVICE_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
# kernel kinds by name, first match wins: FlexAttention's Triton templates before the fused Triton kernels
KERNEL_KINDS = (
    ("attention", ("flash", "fmha", "sdpa", "flex_attention", "attention")),
    ("matmul", ("nvjet", "gemm", "cutlass", "xmma", "cublas", "sm90_", "sm80_", "ampere_", "wgmma")),
    ("optimizer", ("adam", "multi_tensor_apply")),
    ("fused (Triton)", ("triton_",)),
    ("copy, memset", ("memcpy", "memset", "copy_kernel", "copy_")),
)
KINDS = (*(kind for kind, _ in KERNEL_KINDS), "other")


def kernel_kind(name: str) -> str:
    """The kind of a device kernel by its name (one of KINDS)."""
    lowered = name.lower()
    for kind, marks in KERNEL_KINDS:
        if any(mark in lowered for mark in marks):
            # Inductor's own GEMM templates (max-autotune) are matmuls; a pointwise kernel named after "addmm" is not
            if kind == "fused (Triton)" and lowered.startswith("triton_tem") and "mm" in lowered:
                return "matmul"
            return kind
    return "other"


class StepTrace:
    """`start()` at the first timed step, `stop(steps)` after the last; then `summary`."""

    def __init__(self, device: str):
        from torch.profiler import ProfilerActivity, profile

        self.cuda = device == "cuda"
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        # one cycle, so keeping events across cycles changes nothing; torch 2.11 warns at every start without it
        self._profiler = profile(activities=activities, acc_events=True)
        self._started = 0.0
        self.summary: dict | None = None

    def start(self) -> None:
        self._profiler.start()
        self._started = time.perf_counter()

    def stop(self, steps: int) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - self._started
        self._profiler.stop()
        self.summary = summarise(self._profiler, max(1, steps), wall, self.cuda)


def summarise(profiler, steps: int, wall: float, cuda: bool, top: int = 6) -> dict:
    from torch.autograd import DeviceType

    from kolong.attention.terms import PROFILER_PREFIX

    averages = profiler.key_averages()
    counts = {a.key: a.count for a in averages}
    # device-side events (kernels, copies, memsets) only: the host ops' time on the device would count them twice
    device_us = sum(e.time_range.elapsed_us() for e in profiler.events() if e.device_type == DeviceType.CUDA)
    costliest = sorted(averages, key=lambda a: a.self_cpu_time_total, reverse=True)[:top]
    kernels = sorted((a for a in averages if a.device_type == DeviceType.CUDA),
                     key=lambda a: a.self_device_time_total, reverse=True)[:top]  # fmt: skip
    by_kind = dict.fromkeys(KINDS, 0.0)
    for a in averages:
        if a.device_type == DeviceType.CUDA:
            by_kind[kernel_kind(a.key)] += a.self_device_time_total / 1e3 / steps
    labelled = {  # host time inside each kolong range, and the kernel time it launched on the device
        a.key[len(PROFILER_PREFIX) :]: [
            a.cpu_time_total / 1e3 / steps,
            a.device_time_total / 1e3 / steps if cuda else None,
        ]
        for a in averages
        if a.key.startswith(PROFILER_PREFIX)
    }
    return {
        "steps": steps,
        "ms_per_step": 1e3 * wall / steps,
        "device_busy": device_us * 1e-6 / wall if cuda else None,
        "host_reads_per_step": sum(counts.get(name, 0) for name in HOST_READS) / steps,
        "syncs_per_step": sum(counts.get(name, 0) for name in DEVICE_SYNCS) / steps if cuda else None,
        "costliest_host_ops": [[a.key, a.self_cpu_time_total / 1e3 / steps] for a in costliest],
        "costliest_kernels": [[a.key, a.self_device_time_total / 1e3 / steps] for a in kernels],
        "kernel_ms_by_kind": by_kind if cuda else None,
        "labelled_ms": labelled,
    }


def to_markdown_rows(label: str, summary: dict) -> str:
    """One table row: label | ms per step | device busy | host reads | syncs | costliest host ops (ms)."""
    busy = f"{summary['device_busy']:.0%}" if summary["device_busy"] is not None else "—"
    syncs = f"{summary['syncs_per_step']:.1f}" if summary["syncs_per_step"] is not None else "—"
    ops = ", ".join(f"{name} {ms:.2f}" for name, ms in summary["costliest_host_ops"][:3])
    return (
        f"| {label} | {summary['ms_per_step']:.2f} | {busy} | {summary['host_reads_per_step']:.1f} | {syncs} "
        f"| {ops} |"
    )


def traced_call(step, device: str, calls: int = 3) -> dict:
    """`step` traced for `calls` calls after one untraced call (which compiles, unless the timed case did)."""
    step()
    trace = StepTrace("cuda" if device.startswith("cuda") else "cpu")
    trace.start()
    for _ in range(calls):
        step()
    trace.stop(calls)
    return trace.summary


def calls_markdown(traces: list[dict], label: str, calls: int = 3) -> list[str]:
    """Where each traced call's time goes, one row per trace labelled by its `label` field, length and mode:
    traced ms per call, device busy, syncs, kolong's profiler ranges, the device's time by kernel kind, the
    costliest kernels and host operations."""
    lines = [f"## Where the time goes ({calls} traced calls per {label}, length and mode)", "",
             "Ranges: ms per call inside kolong's profiler ranges, host / device (the time on the device of the "
             "kernels launched inside). By kind: device ms per call in each kind of kernel "
             f"({' / '.join(KINDS)}).", "",
             f"| {label}, length, mode | ms per call (traced) | device busy | syncs per call | kolong's ranges: "
             "host / device ms | device ms by kind | costliest kernels (device ms per call) "
             "| costliest host operations (ms) |",
             "|---|---:|---:|---:|---|---|---|---|"]  # fmt: skip
    for trace in traces:
        busy = "—" if trace["device_busy"] is None else f"{trace['device_busy']:.0%}"
        syncs = "—" if trace["syncs_per_step"] is None else f"{trace['syncs_per_step']:.1f}"
        ranges = ", ".join(
            f"{name} {host:.2f} / {'—' if device is None else f'{device:.2f}'}"
            for name, (host, device) in trace["labelled_ms"].items()
        )
        kinds = trace.get("kernel_ms_by_kind")
        by_kind = " / ".join(f"{kinds[kind]:.2f}" for kind in KINDS) if kinds else "—"
        kernels = ", ".join(f"{name[:60]} {ms:.2f}" for name, ms in trace["costliest_kernels"][:3]) or "—"
        host = ", ".join(f"{name[:60]} {ms:.2f}" for name, ms in trace["costliest_host_ops"][:3])
        lines.append(f"| {trace[label]}, {trace['length']}, {trace['mode']} | {trace['ms_per_step']:.2f} "
                     f"| {busy} | {syncs} | {ranges or '—'} | {by_kind} | {kernels} | {host} |")  # fmt: skip
    return lines
