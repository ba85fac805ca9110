"""Checking blobs' sha256: now, on all cores, or in the background while backends initialise.

sha256 of one blob is sequential (2.2 GB/s with SHA-NI on an AMD EPYC), so the
hash of a model whose weights are one 346 MB blob (ViT-B/16) takes 160 ms on one
core, longer than onnxruntime takes to build the session that uses it. hashlib
releases the GIL, and so does onnxruntime while it builds a session, so the two can
run side by side: ``load`` starts the hash of the blobs a backend declared plain
tensors (``Backend.tensor_payloads``), initialises the backends, then waits for
:meth:`PendingHashes.wait` before it returns. A mismatch still ends the load with the
same BundleError; no Module is returned, and the hashing threads are joined before
the error leaves ``load``.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable

from runtime_lite.errors import BundleError

#: Below this many bytes one thread hashes faster than a pool starts.
PARALLEL_HASH_BYTES = 8 << 20
#: A background hash checks for cancellation between chunks of this size (about 30 ms of hashing each);
#: fewer, larger chunks also mean fewer waits to take the GIL back while the loading thread runs Python.
CHUNK_BYTES = 64 << 20
#: Behind a read still going on, the hash waits for this much more to be in before it goes on.
WAIT_BYTES = 4 << 20

#: ``ready(blob index, n)``: block until the first ``n`` bytes of the blob are read; how many are, or -1.
Readiness = Callable[[int, int], int]


def usable_cpus() -> int:
    """CPUs this process may run on (a container's CPU set, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def mismatch(index: int) -> BundleError:
    return BundleError(f"bundle blob {index} checksum mismatch (the file is corrupt)")


def verify_now(blobs: list[tuple[int, memoryview, bytes]]) -> None:
    """Check each (index, blob, sha256) before returning, on all cores for large sets (hashlib releases the GIL)."""
    total = sum(len(b) for _, b, _ in blobs)
    workers = min(usable_cpus(), 8)
    if total < PARALLEL_HASH_BYTES or workers == 1:
        actual = [hashlib.sha256(b).digest() for _, b, _ in blobs]
    else:
        from concurrent.futures import ThreadPoolExecutor  # only large bundles pay for the import

        with ThreadPoolExecutor(max_workers=workers) as pool:
            actual = list(pool.map(lambda job: hashlib.sha256(job[1]).digest(), blobs))
    for (index, _, wanted), got in zip(blobs, actual):
        if got != wanted:
            raise mismatch(index)


class PendingHashes:
    """The sha256 of some blobs, computed on background threads; :meth:`wait` before anything trusts them.

    The blobs are shared out largest first over at most ``cpu_count - 1`` threads
    (the loading thread has backends to initialise), so one very large blob is one
    thread's whole share.
    """

    def __init__(self, blobs: list[tuple[int, memoryview, bytes]], ready: Readiness | None = None):
        """``ready(index, n)``, where the bundle is still being read: block until at least the first ``n``
        bytes of blob ``index`` are in, and say how many are (-1: the read failed, stop)."""
        self._ready = ready
        self._expected = {index for index, _, _ in blobs}
        self._matches: dict[int, bool] = {}
        self._failure: BaseException | None = None
        self._cancelled = threading.Event()
        count = max(1, min(len(blobs), usable_cpus() - 1, 8))
        shares: list[list[tuple[int, memoryview, bytes]]] = [[] for _ in range(count)]
        loads = [0] * count
        for job in sorted(blobs, key=lambda job: len(job[1]), reverse=True):
            least = loads.index(min(loads))
            shares[least].append(job)
            loads[least] += len(job[1])
        self._threads = [
            threading.Thread(target=self._hash, args=(share,), name="runtime_lite-verify", daemon=True)
            for share in shares
        ]
        for thread in self._threads:
            thread.start()

    def _hash(self, share: list[tuple[int, memoryview, bytes]]) -> None:
        try:
            for index, blob, wanted in share:
                digest, start, size = hashlib.sha256(), 0, len(blob)
                while start < size:
                    if self._cancelled.is_set():
                        return
                    # Right behind the read where it is still going on, at least a read step at a time.
                    readable = size if self._ready is None else self._ready(index, min(size, start + WAIT_BYTES))
                    if readable < 0:
                        return
                    stop = min(size, start + CHUNK_BYTES, readable)
                    digest.update(blob[start:stop])
                    start = stop
                self._matches[index] = digest.digest() == wanted
        except BaseException as e:  # reported by wait(), never lost in a thread
            self._failure = e

    def wait(self) -> None:
        """Return once every blob is verified; BundleError naming the first that is not."""
        self._join()
        bad = sorted(index for index, ok in self._matches.items() if not ok)
        if bad:
            raise mismatch(bad[0])
        if self._failure is not None or set(self._matches) != self._expected:
            missing = min(self._expected - set(self._matches), default=min(self._expected))
            why = f": {type(self._failure).__name__}: {self._failure}" if self._failure is not None else ""
            raise BundleError(f"bundle blob {missing} could not be verified{why}")

    def cancel(self) -> None:
        """Stop hashing (within one chunk) and join the threads: the load failed for another reason."""
        self._cancelled.set()
        self._join()

    def _join(self) -> None:
        for thread in self._threads:
            thread.join()


__all__ = ["CHUNK_BYTES", "PARALLEL_HASH_BYTES", "PendingHashes", "mismatch", "usable_cpus", "verify_now"]
