"""Matrix products split across the BLAS thread budget with work stealing.

numpy's OpenBLAS splits every large GEMM statically between its threads and waits for
all of them. When another process holds a core (a shared 2-core machine, a busy
server), the descheduled thread finishes its share a whole time slice late: measured
here with a fuzz campaign beside, a 197x768x768 GEMM took 60 ms at 2 BLAS threads
against 3 ms on one, and a whole ViT-B/16 run went from 0.5 s (1 thread) to 3-7 s.
onnxruntime's pool lets the calling thread take the work a late worker has not started.

This module does the same: while it runs a product, OpenBLAS is set to one thread, the
output is cut into a few column (or batch) blocks, and the caller plus ``threads - 1``
pool workers take blocks from a shared iterator until none is left, so a late worker
costs at most one block. The thread count is OpenBLAS's own (``OPENBLAS_NUM_THREADS``,
``OMP_NUM_THREADS`` or the core count). Where numpy's BLAS is not OpenBLAS, or
``RUNTIME_LITE_GEMM=blas`` is set, products go to numpy.matmul unchanged.
"""

from __future__ import annotations

import contextvars
import ctypes
import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: Below this many multiply-adds a product runs on the calling thread alone: handing
#: blocks to the pool costs tens of microseconds, and each worker's BLAS call and GIL
#: hand-back more. Measured here side by side (one thread against the split): at 2 to 4M
#: (MobileNetV3's pointwise layers) the split took 1.5 to 1.9x as long, at 7.5M 1.25x, and
#: from about 10M it breaks even or wins (115M: 3.7 -> 2.7 ms).
MIN_PARALLEL_MACS = 8_000_000
#: Blocks per thread: more lets the caller absorb a late worker; fewer keeps blocks wide.
BLOCKS_PER_THREAD = 3
#: Column blocks are a multiple of this many columns (the BLAS kernels' register width).
COLUMN_ALIGN = 16


class _BlasThreads:
    """OpenBLAS's thread count, switched to 1 while any product of ours runs."""

    def __init__(self, set_threads: Callable[[int], None], threads: int) -> None:
        self._set = set_threads
        self.threads = threads
        self._active = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            if self._active == 0:
                self._set(1)
            self._active += 1

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0:
                self._set(self.threads)


def _find_openblas() -> _BlasThreads | None:
    """numpy's OpenBLAS thread controls, found among the process's mapped libraries (Linux)."""
    if os.environ.get("RUNTIME_LITE_GEMM", "").strip().lower() == "blas":
        return None
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for pattern in ("scipy_openblas_{}64_", "scipy_openblas_{}", "openblas_{}64_", "openblas_{}"):
            setter = getattr(library, pattern.format("set_num_threads"), None)
            getter = getattr(library, pattern.format("get_num_threads"), None)
            if setter is not None and getter is not None:
                setter.argtypes, setter.restype = (ctypes.c_int,), None
                getter.argtypes, getter.restype = (), ctypes.c_int
                threads = getter()
                return _BlasThreads(setter, threads) if threads > 1 else None
    return None


_state: tuple[_BlasThreads | None, ThreadPoolExecutor | None] | None = None
_state_lock = threading.Lock()


def _forget_pool() -> None:
    """In a forked child the pool's threads do not exist: start a new pool on first use."""
    global _state, _state_lock
    _state, _state_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _pool() -> tuple[_BlasThreads | None, ThreadPoolExecutor | None]:
    global _state
    if _state is None:
        with _state_lock:
            if _state is None:
                blas = _find_openblas()
                workers = ThreadPoolExecutor(blas.threads - 1, "runtime_lite-gemm") if blas else None
                _state = (blas, workers)
    return _state


def concurrent_blocks() -> int:
    """How many blocks ``run_blocks`` may run at once (for costs: each holds its own scratch)."""
    blas, _ = _pool()
    return 1 if blas is None else blas.threads


def run_blocks(blocks: list[Callable[[], None]]) -> None:
    """Run independent blocks of work (numpy calls that release the GIL) on the caller and the pool.

    Elementwise kernels use it too: a float32 gelu or a depthwise convolution cut into
    cache-sized blocks runs on every thread, with the same work stealing.
    """
    blas, workers = _pool()
    if blas is None or len(blocks) < 2:
        for block in blocks:
            block()
        return
    _run_blocks(blocks, blas, workers)


def _run_blocks(blocks: list[Callable[[], None]], blas: _BlasThreads, workers: ThreadPoolExecutor) -> None:
    """Run every block: the pool's workers and the caller take them from one iterator."""
    pending = iter(blocks)  # a list iterator's next() is atomic under the GIL (a generator's is not)

    def drain() -> None:
        for block in pending:
            block()

    with blas:
        futures = []
        for _ in range(blas.threads - 1):
            try:  # in a copy of the caller's context: numpy's errstate (the run's silenced errors) with it
                futures.append(workers.submit(contextvars.copy_context().run, drain))
            except RuntimeError:  # no thread could start (a memory-capped process): the caller does it all
                break
        try:
            drain()
        finally:
            for future in futures:
                if not future.cancel():  # started: wait for the block it holds
                    future.result()


def _each(a: np.ndarray, b: np.ndarray, out: np.ndarray, indices: list[tuple[int, ...]]) -> None:
    for i in indices:
        np.matmul(a[i], b[i], out=out[i])


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``numpy.matmul(a, b)`` for operands of rank 2 or more, spread over the BLAS threads."""
    blas, workers = _pool()
    if blas is None or a.ndim < 2 or b.ndim < 2 or a.dtype != b.dtype or a.dtype.kind not in "fc":
        return np.matmul(a, b)
    # np.broadcast_shapes costs ~4 us, as much as a small product: only where both are stacked
    batch = (
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if a.ndim > 2 and b.ndim > 2 else a.shape[:-2] + b.shape[:-2]
    )
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    count = math.prod(batch)
    if count * m * n * k < MIN_PARALLEL_MACS:
        with blas:
            return np.matmul(a, b)
    out = np.empty(batch + (m, n), a.dtype)
    blocks_wanted = blas.threads * BLOCKS_PER_THREAD
    if count >= blocks_wanted:  # attention's per-head products: blocks of whole matrices
        a_all, b_all = np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:])
        index = list(np.ndindex(batch))
        step = -(-count // blocks_wanted)
        blocks = [lambda part=index[i : i + step]: _each(a_all, b_all, out, part) for i in range(0, count, step)]
    elif m > n:  # a tall product (ConvNeXt's 3136 x 384 @ 384 x 96): blocks of output rows
        step = -(-m // blocks_wanted)
        blocks = [
            lambda i=i: np.matmul(a[..., i : i + step, :], b, out=out[..., i : i + step, :]) for i in range(0, m, step)
        ]
    else:  # a wide product (a transformer's weights): blocks of output columns, each reading its part of b
        columns = -(-n // blocks_wanted)
        step = -(-columns // COLUMN_ALIGN) * COLUMN_ALIGN
        blocks = [lambda j=j: np.matmul(a, b[..., j : j + step], out=out[..., j : j + step]) for j in range(0, n, step)]
    _run_blocks(blocks, blas, workers)
    return out
