"""Keep freed memory mapped between runs, so a run's arrays do not page-fault.

A host plan frees and allocates the same activation sizes on every run. glibc gives
blocks above its mmap threshold (128 kB at first, raised as blocks are freed) back
to the kernel, and trims the top of its heap, so the next run gets fresh pages and
each one faults on first touch. On the virtual machines these benchmarks run on a
fault costs about 4 µs: SqueezeNet faulted 1,704 times per run (about half its
15 ms), ShuffleNet 1,819 times and ResNet-50 at batch 8 10,685 times. onnxruntime
avoids this with its own arena; numpy's allocator cannot be replaced from Python,
so on glibc runtime_lite raises the mmap threshold to its maximum (32 MB) and the
trim threshold to 1 GB, once, when the first bundle is loaded. After the first run
the same runs then fault once or twice.

The cost is that the heap keeps its high-water mark (up to 1 GB more) instead of
shrinking after a large run. ``RUNTIME_LITE_MALLOC=system`` leaves the allocator
alone; other C libraries (musl, macOS, Windows) are always left alone.
"""

from __future__ import annotations

import os
import threading

#: mallopt parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: glibc's largest mmap threshold on 64-bit systems (DEFAULT_MMAP_THRESHOLD_MAX).
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 1 << 30

_lock = threading.Lock()
_state: str | None = None


def keep_freed_memory() -> str:
    """Tune glibc's malloc once per process; returns what was done ("tuned", "system", "unsupported")."""
    global _state
    with _lock:
        if _state is None:
            _state = _tune()
        return _state


def _tune() -> str:
    if os.environ.get("RUNTIME_LITE_MALLOC", "").strip().lower() == "system":
        return "system"
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return "unsupported"
    except (ValueError, OSError, AttributeError):  # no such name on this platform
        return "unsupported"
    import ctypes  # only glibc processes pay for the import

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return "unsupported"
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    tuned = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    return "tuned" if tuned else "unsupported"
