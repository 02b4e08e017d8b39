"""Measuring a process's memory, for the library and the lab alike: the peak of one call (`peak_growth_mb`) and
the peak of the whole process so far (`process_peak_mb`, what a training record keeps).

On CUDA the allocator's peak, which resets; on CPU the resident set's peak (VmHWM), which Linux resets to the
current size on request.
"""

from __future__ import annotations

import contextlib


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


def process_peak_mb(cuda: bool = False) -> float | None:
    """This process's peak memory so far, in MB: CUDA's allocator peak, else the resident set's (None where
    /proc is not there to read)."""
    if cuda:
        import torch

        return torch.cuda.max_memory_allocated() / 2**20
    with contextlib.suppress(OSError):
        return _status_mb("VmHWM") or None
    return None
