"""Matrix products split across the BLAS thread budget with work stealing, or on OpenBLAS's threads.

numpy's OpenBLAS splits every large GEMM statically between its threads and waits for
all of them. When another process holds a core (a shared 2-core machine, a busy
server), the descheduled thread finishes its share a whole time slice late: measured
here with a fuzz campaign beside, a 197x768x768 GEMM took 60 ms at 2 BLAS threads
against 3 ms on one, and a whole ViT-B/16 run went from 0.5 s (1 thread) to 3-7 s.
onnxruntime's pool lets the calling thread take the work a late worker has not started.

This module does the same (the ``split``): while it runs a product, OpenBLAS is set to
one thread, the output is cut into a few column (or batch) blocks, and the caller plus
``threads - 1`` pool workers take blocks from a shared iterator until none is left, so a
late worker costs at most one block. The thread count is OpenBLAS's own
(``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS`` or the core count).

On a quiet machine OpenBLAS's own threads can be much faster, depending on the CPU and
the kernel numpy's OpenBLAS picked: gemm_policy.py measures both ways once per machine
(cached) and picks. Where it picks ``blas``, a watchdog keeps the split's robustness: a
product slower than one thread would have been sends products back to the split for a
while. Where numpy's BLAS is not OpenBLAS, or ``RUNTIME_LITE_GEMM=blas`` is set, products
go to numpy.matmul unchanged.
"""

from __future__ import annotations

import contextvars
import ctypes
import math
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from runtime_lite.execution.limits import current_budget
from runtime_lite.kernels import gemm_policy

#: Below the policy's ``min_parallel_macs`` a product runs on the calling thread alone:
#: handing blocks to the pool costs tens of microseconds (gemm_policy.py measures it).
#: Blocks per thread: more lets the caller absorb a late worker; fewer keeps blocks wide.
BLOCKS_PER_THREAD = 3
#: Column blocks are a multiple of this many columns (the BLAS kernels' register width).
COLUMN_ALIGN = 16
#: Under the ``blas`` policy, a product slower than this many times one thread's time
#: (plus ``SLOW_SLACK_S``) means a co-tenant held a core while OpenBLAS's threads waited.
SLOW_FACTOR = 1.0
SLOW_SLACK_S = 50e-6
#: ... twice in a row: one slow product alone is as often OpenBLAS's threads waking up after
#: an idle gap (the first product of a request: a 2M-MAC product took 190 us against 33 us
#: expected) or one preempted time slice, and tripping on it sent MobileNetV3-small to the
#: split for seconds at a time (3.0-3.4x onnxruntime, against 2.2-2.3x without the watchdog).
SLOW_STRIKES = 2
#: ... and products then take the split for this long, doubling while slow products recur.
FALLBACK_SECONDS = 2.0
MAX_FALLBACK_SECONDS = 60.0
#: numpy 2 keeps ``np.errstate`` in a context variable, which ``copy_context`` carries to the pool's
#: workers; numpy 1.x keeps it per thread, so there a worker is given the caller's settings itself
#: (else a run's silenced overflow warns, or a caller's ``over="raise"`` is lost, on every other block).
ERRSTATE_PER_THREAD = np.lib.NumpyVersion(np.__version__) < "2.0.0"
#: Under a deadline, products above this many multiply-adds run in pieces this size (10-100 ms on one
#: core of a current CPU), the deadline checked between them.
DEADLINE_PIECE_MACS = 1 << 28
#: ... and one estimated to need more than this many times the time left is refused before it starts.
REFUSE_FACTOR = 8.0


class _BlasThreads:
    """OpenBLAS's thread count, switched to 1 while any product of ours runs."""

    def __init__(self, set_threads: Callable[[int], None], threads: int, config: str = "") -> None:
        self._set = set_threads
        self.threads = threads
        self.config = config  #: OpenBLAS's version, build options and the kernel it picked
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
                return _BlasThreads(setter, threads, _blas_config(library, pattern)) if threads > 1 else None
    return None


def _blas_config(library: ctypes.CDLL, pattern: str) -> str:
    """``openblas_get_config()`` and ``openblas_get_corename()``: the kernel numpy's OpenBLAS runs here."""
    words = []
    for name in ("get_config", "get_corename"):
        function = getattr(library, pattern.format(name), None)
        if function is not None:
            function.argtypes, function.restype = (), ctypes.c_char_p
            words.append((function() or b"").decode(errors="replace").strip())
    return " / ".join(words)


class _Host:
    """The BLAS controls, the pool, and the machine's policy with its co-tenant watchdog."""

    def __init__(self, blas: _BlasThreads, workers: ThreadPoolExecutor, policy: gemm_policy.Policy) -> None:
        self.blas, self.workers, self.policy = blas, workers, policy
        self._split_until = 0.0
        self._fallback_s = FALLBACK_SECONDS
        self._strikes = 0

    def blas_threads_now(self) -> bool:
        """Whether this product goes to OpenBLAS's threads: the policy says so and no co-tenant was seen lately."""
        return self.policy.mode == "blas" and time.monotonic() >= self._split_until

    def parallel_macs(self, blas_now: bool) -> int:
        """From how many multiply-adds a product is shared out: the policy's threshold, except that the
        watchdog's split keeps the split's own (the measured one is where OpenBLAS's threads pay off;
        blocks that small on the pool took 1.5-1.9x one thread, and MobileNetV3 paid it on every product)."""
        if blas_now or self.policy.mode != "blas":
            return self.policy.min_parallel_macs
        return max(self.policy.min_parallel_macs, gemm_policy.DEFAULT_MIN_PARALLEL_MACS)

    def judge(self, macs: int, seconds: float) -> None:
        """After a product on OpenBLAS's threads: slower than one thread would have been, twice in a row,
        means a co-tenant."""
        expected = macs / self.policy.single_macs_per_s if self.policy.single_macs_per_s > 0 else math.inf
        if seconds > SLOW_FACTOR * expected + SLOW_SLACK_S:
            self._strikes += 1
            if self._strikes >= SLOW_STRIKES:
                self._strikes = 0
                self._split_until = time.monotonic() + self._fallback_s
                self._fallback_s = min(MAX_FALLBACK_SECONDS, 2 * self._fallback_s)
        else:
            self._strikes = 0
            self._fallback_s = FALLBACK_SECONDS


_state: _Host | object | None = None  # _NO_HOST once known that there is no pool
_NO_HOST = object()  # numpy's BLAS is not OpenBLAS, one thread, or RUNTIME_LITE_GEMM=blas: numpy.matmul as is
_state_lock = threading.Lock()


def _forget_pool() -> None:
    """In a forked child the pool's threads do not exist: start a new pool on first use."""
    global _state, _state_lock
    _state, _state_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _start() -> _Host | object:
    if gemm_policy.requested_mode() == "blas":
        return _NO_HOST
    blas = _find_openblas()
    if blas is None:
        return _NO_HOST
    workers = ThreadPoolExecutor(blas.threads - 1, "runtime_lite-gemm")
    key = gemm_policy.machine_key(blas.config, blas.threads)
    policy = gemm_policy.resolve(key, lambda: _calibrate(blas, workers))
    return _Host(blas, workers, policy)


def _calibrate(blas: _BlasThreads, workers: ThreadPoolExecutor) -> gemm_policy.Timings:
    """A large and a small product, each on one thread, split, and on OpenBLAS's threads."""
    ways = []
    for m, k, n in (gemm_policy.CALIBRATION_SHAPE, gemm_policy.SMALL_CALIBRATION_SHAPE):
        a, b = np.full((m, k), 0.5, np.float32), np.full((k, n), 0.25, np.float32)  # values do not change the time
        out = np.empty((m, n), np.float32)

        def single(a=a, b=b, out=out) -> None:
            with blas:
                np.matmul(a, b, out=out)

        ways += [
            single,
            lambda a=a, b=b, out=out: _run_blocks(_blocks(a, b, out, blas.threads), blas, workers),
            lambda a=a, b=b, out=out: np.matmul(a, b, out=out),
        ]
    return gemm_policy.measure(
        tuple(ways),
        math.prod(gemm_policy.CALIBRATION_SHAPE),
        math.prod(gemm_policy.SMALL_CALIBRATION_SHAPE),
        blas.threads,
    )


def _pool() -> _Host | None:
    global _state
    if _state is None:
        with _state_lock:
            if _state is None:
                _state = _start()
    return _state if isinstance(_state, _Host) else None


def policy() -> gemm_policy.Policy | None:
    """This process's policy for large products (None where numpy.matmul runs them as is)."""
    host = _pool()
    return host.policy if host is not None else None


def concurrent_blocks() -> int:
    """How many blocks ``run_blocks`` may run at once (for costs: each holds its own scratch)."""
    host = _pool()
    return 1 if host is None else host.blas.threads


def run_blocks(blocks: list[Callable[[], None]]) -> None:
    """Run independent blocks of work (numpy calls that release the GIL) on the caller and the pool.

    Elementwise kernels use it too: a float32 gelu or a depthwise convolution cut into
    cache-sized blocks runs on every thread, with the same work stealing.
    """
    host = _pool()
    if host is None or len(blocks) < 2:
        for block in blocks:
            block()
        return
    _run_blocks(blocks, host.blas, host.workers)


def _run_blocks(blocks: list[Callable[[], None]], blas: _BlasThreads, workers: ThreadPoolExecutor) -> None:
    """Run every block: the pool's workers and the caller take them from one iterator."""
    pending = iter(blocks)  # a list iterator's next() is atomic under the GIL (a generator's is not)

    def drain() -> None:
        for block in pending:
            block()

    task = drain
    if ERRSTATE_PER_THREAD:
        errors = np.geterr()

        def task() -> None:
            with np.errstate(**errors):
                drain()

    with blas:
        futures = []
        for _ in range(blas.threads - 1):
            try:  # in a copy of the caller's context: numpy's errstate (the run's silenced errors) with it
                futures.append(workers.submit(contextvars.copy_context().run, task))
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


def _blocks(a: np.ndarray, b: np.ndarray, out: np.ndarray, threads: int) -> list[Callable[[], None]]:
    """``out = a @ b`` cut into about ``threads * BLOCKS_PER_THREAD`` independent products."""
    batch = out.shape[:-2]
    m, n = out.shape[-2:]
    count = math.prod(batch)
    blocks_wanted = threads * BLOCKS_PER_THREAD
    if count >= blocks_wanted:  # attention's per-head products: blocks of whole matrices
        a_all, b_all = np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:])
        index = list(np.ndindex(batch))
        step = -(-count // blocks_wanted)
        return [lambda part=index[i : i + step]: _each(a_all, b_all, out, part) for i in range(0, count, step)]
    if m > n:  # a tall product (ConvNeXt's 3136 x 384 @ 384 x 96): blocks of output rows
        step = -(-m // blocks_wanted)
        return [
            lambda i=i: np.matmul(a[..., i : i + step, :], b, out=out[..., i : i + step, :]) for i in range(0, m, step)
        ]
    # a wide product (a transformer's weights): blocks of output columns, each reading its part of b
    columns = -(-n // blocks_wanted)
    step = -(-columns // COLUMN_ALIGN) * COLUMN_ALIGN
    return [lambda j=j: np.matmul(a, b[..., j : j + step], out=out[..., j : j + step]) for j in range(0, n, step)]


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``numpy.matmul(a, b)`` for operands of rank 2 or more, spread over the BLAS threads.

    Under a run's deadline (``max_run_seconds``) a large product runs in pieces with the
    deadline checked between them, and one that cannot finish in the time left at this
    machine's measured rate is refused before it starts (``_within_deadline``).
    """
    if a.ndim < 2 or b.ndim < 2 or a.dtype != b.dtype or a.dtype.kind not in "fc":
        return np.matmul(a, b)
    # np.broadcast_shapes costs ~4 us, as much as a small product: only where both are stacked
    batch = (
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if a.ndim > 2 and b.ndim > 2 else a.shape[:-2] + b.shape[:-2]
    )
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    macs = math.prod(batch) * m * n * k
    host = _pool()
    if macs > DEADLINE_PIECE_MACS:
        deadline = current_budget().deadline
        if deadline is not None:
            return _within_deadline(a, b, batch, macs, deadline, host)
    if host is None:
        return np.matmul(a, b)
    blas_now = host.blas_threads_now()
    if macs < host.parallel_macs(blas_now):
        with host.blas:
            return np.matmul(a, b)
    if blas_now:
        start = time.perf_counter()
        out = np.matmul(a, b)
        host.judge(macs, time.perf_counter() - start)
        return out
    out = np.empty(batch + (m, n), a.dtype)
    _run_blocks(_blocks(a, b, out, host.blas.threads), host.blas, host.workers)
    return out


def _within_deadline(
    a: np.ndarray, b: np.ndarray, batch: tuple[int, ...], macs: int, deadline: float, host: _Host | None
) -> np.ndarray:
    """``a @ b`` in pieces of about DEADLINE_PIECE_MACS, the deadline checked before each (TimeoutError).

    A kernel is not interrupted, so without this one 6144^3 product outran a 0.5 s
    deadline by 20 s. A product whose estimated time, at the rate this machine measured
    for its GEMM policy (one thread's rate times the threads), exceeds REFUSE_FACTOR times
    the time left is refused at once; the factor keeps a loaded machine from refusing a
    product that would have fitted. Otherwise the overshoot is at most one piece.
    """
    left = deadline - time.monotonic()
    rate = measured_rate(host)
    if rate > 0 and macs / rate > REFUSE_FACTOR * max(left, 0.0):
        raise TimeoutError(
            f"a {macs:,}-MAC product needs about {macs / rate:.3g} s at this machine's measured rate; "
            f"the run's max_run_seconds leaves {max(left, 0.0):.3g} s"
        )
    m, n = a.shape[-2], b.shape[-1]
    out = np.empty(batch + (m, n), a.dtype)
    a_all, b_all = np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:])
    pieces = _pieces(a_all, b_all, out, -(-macs // DEADLINE_PIECE_MACS), host)
    for done, piece in enumerate(pieces):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the run passed its max_run_seconds in a product, after {done} of {len(pieces)} pieces")
        piece()
    return out


def measured_rate(host: _Host | None) -> float:
    """Multiply-adds per second this machine's GEMM policy measured, on all its threads (0: not measured)."""
    return host.policy.single_macs_per_s * host.blas.threads if host is not None else 0.0


def _pieces(a: np.ndarray, b: np.ndarray, out: np.ndarray, wanted: int, host: _Host | None) -> list[Callable[[], None]]:
    """``out = a @ b`` (batch dims equal) as about ``wanted`` pieces: runs of whole matrices where there are
    that many, else row (or column) blocks of each; every piece runs on the pool's threads where there is one."""
    batch = out.shape[:-2]
    indices = list(np.ndindex(batch))

    def on_threads(blocks: list[Callable[[], None]]) -> None:
        if host is None:
            for block in blocks:
                block()
        else:
            _run_blocks(blocks, host.blas, host.workers)

    def product(x: np.ndarray, y: np.ndarray, target: np.ndarray) -> None:
        if host is None:
            np.matmul(x, y, out=target)
        else:
            on_threads(_blocks(x, y, target, host.blas.threads))

    if len(indices) >= wanted:
        per = len(indices) // wanted
        groups = [indices[i : i + per] for i in range(0, len(indices), per)]
        return [
            lambda group=group: on_threads([lambda i=i: np.matmul(a[i], b[i], out=out[i]) for i in group])
            for group in groups
        ]
    per_matrix = -(-wanted // len(indices))
    m, n = out.shape[-2:]
    pieces: list[Callable[[], None]] = []
    for index in indices:
        x, y, target = a[index], b[index], out[index]
        if m >= n:
            step = -(-m // per_matrix)
            pieces += [
                lambda x=x[i : i + step], y=y, t=target[i : i + step]: product(x, y, t) for i in range(0, m, step)
            ]
        else:
            columns = -(-n // per_matrix)
            step = -(-columns // COLUMN_ALIGN) * COLUMN_ALIGN
            pieces += [
                lambda x=x, y=y[:, j : j + step], t=target[:, j : j + step]: product(x, y, t) for j in range(0, n, step)
            ]
    return pieces
