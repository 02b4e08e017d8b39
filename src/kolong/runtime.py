"""Process-level tuning applied by the `kolong` command line.

On Linux with glibc, every large tensor (an attention matrix at 1024+ tokens is hundreds of MB) is
allocated with mmap and handed back to the kernel when freed, so each training step pays for zeroing
fresh pages. Raising glibc's mmap and trim thresholds keeps freed blocks in the heap for reuse. The cost: the process keeps its peak memory
until it exits. Set KOLONG_MALLOC_TUNING=0 to leave the allocator alone.

Subnormal floats (below 1.2e-38 in fp32) are flushed to zero. A softmax whose logits spread more than about
87 produces them (exp of -87 to -104), and some CPUs take a slow microcode path for each: ALiBi's bias at
2,048 tokens reaches -1,447 (docs/installation.md says what that costs).
What they would add to a row's probabilities is below fp32's resolution of its sum, so no result changes
beyond rounding. The CPU's flush mode is per thread and a new thread copies its creator's, so it is set right
after torch is imported, before torch starts its worker threads. The mode is the process's, so Python's own
float arithmetic flushes too (1e-310 * 1.0 == 0.0), and code must not compute a subnormal on purpose: a guard
like `clamp_min(finfo.tiny) / 7` becomes 0 (clamp after dividing).
"""

from __future__ import annotations

import ctypes
import os
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune_allocator() -> bool:
    """Returns True when glibc's thresholds were raised."""
    if os.environ.get("KOLONG_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl or another libc: nothing to tune
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 1 << 30)) and bool(mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1))


def flush_denormals() -> None:
    """Flush subnormal floats to zero on this thread and every thread torch starts after it (see above).
    From a script of your own, call it before torch's first parallel operation."""

    def flush() -> None:
        import warnings

        import torch

        torch.set_flush_denormal(True)  # False (and nothing done) on a CPU without the flags
        # NumPy 2.0-2.1 then warn, the first time any library reads a float type's limits, that its smallest
        # subnormal is zero: true by design here, and not the user's to act on
        warnings.filterwarnings("ignore", message="The value of the smallest subnormal", category=UserWarning)

    from kolong.integration import after_import

    after_import("torch", flush)
