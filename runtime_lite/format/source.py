"""Where a bundle's bytes live while a Module uses them.

A loaded Module keeps reading its bundle (weights are views, not copies), so what
backs those bytes decides what a later change to the file can do. Deployments
copy new versions over old ones (``cp``, ``rsync --inplace``): with a shared file
mapping, a truncation kills the process with SIGBUS at the next run and an
in-place overwrite silently swaps in weights nobody verified. So by default a
path is read once into private memory (anonymous, transparent huge pages where the
kernel offers them: about 20 ms per 100 MB here, a fifth of what 4 KiB faults
cost) and the file is closed; from 32 MiB on, a second thread reads the back half
meanwhile (a cold start of BERT-base 5-8% shorter). The read goes in steps, so a blob's
hash can start on another thread as soon as its first bytes are in (``incremental``). ``map_file=True`` keeps the zero-copy shared mapping
for deployments that replace bundles only by rename; it checks before every run
that the file has not changed in place, which catches a copy-over between runs
but cannot stop one that lands during a run (docs/RELIABILITY.md).

Caller buffers: ``bytes`` are immutable and used in place; a ``bytearray`` or a
writable memoryview could be changed by the caller after load, so it is copied.
Only regular files are opened: a FIFO or a device as the bundle path would block
or stream forever.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from dataclasses import dataclass

from runtime_lite.errors import BundleError, ExecutionError
from runtime_lite.files import open_regular
from runtime_lite.format.hashing import usable_cpus


@dataclass
class _FileIdentity:
    """What an in-place change to a mapped file alters: size and modification time of the open inode."""

    fd: int
    size: int
    mtime_ns: int


class BundleBuffer:
    """A bundle's bytes, private or mapped; ``check_unchanged`` guards the mapped case.

    A private read may still be in progress (``open_bundle(..., incremental=True)``):
    the loading thread reads on with ``ensure``/``finish``, and other threads wait for
    a prefix with ``wait_for``, so the hash of a blob can start as soon as its first
    bytes are in, not after the whole file.
    """

    def __init__(
        self,
        view: memoryview,
        path: str | None,
        identity: _FileIdentity | None = None,
        reading: _PrivateRead | None = None,
    ):
        self.view = view
        self.path = path
        self._identity = identity
        self._reading = reading
        if identity is not None:
            weakref.finalize(self, os.close, identity.fd)

    @property
    def mapped(self) -> bool:
        return self._identity is not None

    def ensure(self, end: int) -> None:
        """Loading thread: the first ``end`` bytes are read (a bundle still being read reads on)."""
        if self._reading is not None:
            self._reading.read_to(end)

    def finish(self) -> None:
        """Loading thread: every byte is read and the file closed."""
        if self._reading is not None:
            self._reading.read_to(len(self.view))
            self._reading = None

    def abandon(self) -> None:
        """Loading thread, on a failed load: stop reading, close the file, release every waiter."""
        if self._reading is not None:
            self._reading.fail()
            self._reading = None

    def wait_for(self, end: int) -> int:
        """Any thread: block until at least ``end`` bytes are read; how many are, or -1 if the read failed."""
        reading = self._reading
        return len(self.view) if reading is None else reading.wait_for(end)

    def check_unchanged(self) -> None:
        """ExecutionError if the mapped file was truncated or rewritten in place since load."""
        identity = self._identity
        if identity is None:
            return
        info = os.fstat(identity.fd)
        if info.st_size != identity.size or info.st_mtime_ns != identity.mtime_ns:
            raise ExecutionError(
                f"bundle file '{self.path}' changed on disk since it was loaded with map_file=True "
                f"(size {identity.size} -> {info.st_size}); replace bundles by rename, or load without map_file"
            )


def _open_regular(path: str) -> int:
    """An fd for ``path`` if it is a regular file; BundleError otherwise (never blocks on a FIFO)."""
    try:
        fd = open_regular(path)
    except OSError as e:
        raise BundleError(f"cannot read bundle '{path}': {e.strerror or e}") from None
    if os.fstat(fd).st_size == 0:
        os.close(fd)
        raise BundleError(f"'{path}' is empty, not a bundle")
    return fd


#: The private read goes on in steps of this size, each one announced to the threads hashing behind it.
READ_STEP = 16 << 20
#: From this size on, a second thread reads the back half of the file while the loading thread reads the front:
#: copying from the page cache and faulting in the target run on two cores (BERT-base's 437 MB: 128 -> 70-97 ms
#: here). Below it one thread is done before a second has started to pay.
PARALLEL_READ_BYTES = 32 << 20


class _PrivateRead:
    """A file read into anonymous memory step by step by the loading thread, others waiting for a prefix.

    Anonymous memory on huge pages where possible (few page faults). Waiters are released
    as each step lands, and for good if the read fails (``wait_for`` returns -1). A large
    file's back half is read meanwhile by a thread of its own (``_BackHalf``); the prefix
    passes the middle once both halves are in.
    """

    def __init__(self, fd: int, size: int, path: str):
        memory = (
            mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) if hasattr(mmap, "MAP_ANONYMOUS") else None
        )
        if memory is not None and hasattr(mmap, "MADV_HUGEPAGE"):
            memory.madvise(mmap.MADV_HUGEPAGE)
        self.target = memoryview(memory if memory is not None else bytearray(size))
        self.fd, self.size, self.path = fd, size, path
        self.done = 0
        self.failed = False
        self._progress = threading.Condition()
        parallel = size >= PARALLEL_READ_BYTES and hasattr(os, "preadv") and usable_cpus() > 1
        self._back = _BackHalf.begin(self) if parallel else None
        #: Where the loading thread's own reading stops: the back half's start, or the end.
        self.front_end = self._back.offset if self._back is not None else size

    def read_to(self, end: int) -> None:
        """Read on until ``end`` (at least one step further, to the end of the file at most); BundleError if it fails."""
        end = min(self.size, max(end, self.done + (1 << 20)))
        try:
            while self.done < min(end, self.front_end):
                count = os.readv(self.fd, [self.target[self.done : min(end, self.front_end, self.done + READ_STEP)]])
                if count == 0:
                    raise BundleError(
                        f"bundle '{self.path}' shrank while it was being read ({self.done} of {self.size} bytes)"
                    )
                with self._progress:
                    self.done += count
                    self._progress.notify_all()
            if end > self.front_end and self._back is not None:
                self._back.join()  # its failure raises here, as the loading thread's own would
                self._back = None
                with self._progress:
                    self.done = self.size
                    self._progress.notify_all()
        except OSError as e:
            self.fail()
            raise BundleError(f"cannot read bundle '{self.path}': {e.strerror or e}") from None
        except BaseException:
            self.fail()
            raise
        if self.done == self.size:
            self._close()

    def wait_for(self, end: int) -> int:
        with self._progress:
            while self.done < min(end, self.size) and not self.failed:
                self._progress.wait()
            return -1 if self.failed else self.done

    def fail(self) -> None:
        with self._progress:
            self.failed = True
            self._progress.notify_all()
        back, self._back = self._back, None
        if back is not None:  # stopped within a step, and joined before its file is closed (never a reused fd)
            back.cancel()
        self._close()

    def _close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


class _BackHalf:
    """The back half of a private read, read by a thread of its own from a 2 MiB boundary (a huge page) on.

    Its error (the file shrank, a disk error) is raised by ``join``, on the loading thread."""

    def __init__(self, reading: _PrivateRead, offset: int):
        self.reading, self.offset, self.error = reading, offset, None
        self.cancelled = False
        self.thread = threading.Thread(target=self._read, name="runtime_lite-read", daemon=True)

    @classmethod
    def begin(cls, reading: _PrivateRead) -> _BackHalf:
        back = cls(reading, reading.size // 2 & ~((2 << 20) - 1))
        back.thread.start()
        return back

    def _read(self) -> None:
        reading, pos = self.reading, self.offset
        try:
            while pos < reading.size and not self.cancelled:
                count = os.preadv(reading.fd, [reading.target[pos : min(reading.size, pos + READ_STEP)]], pos)
                if count == 0:
                    raise BundleError(
                        f"bundle '{reading.path}' shrank while it was being read ({pos} of {reading.size} bytes)"
                    )
                pos += count
        except BaseException as e:  # raised again by join(), on the loading thread
            self.error = e

    def join(self) -> None:
        self.thread.join()
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def cancel(self) -> None:
        self.cancelled = True
        self.thread.join()


def open_bundle(source: object, *, map_file: bool = False, incremental: bool = False) -> BundleBuffer:
    """The bytes of a bundle given as a path, ``bytes``, ``bytearray`` or memoryview.

    ``incremental``: a path read into private memory comes back before it is read; the
    caller reads it on (``ensure``, ``finish``) or gives up (``abandon``).
    """
    if isinstance(source, bytes):
        return BundleBuffer(memoryview(source), None)
    if isinstance(source, (bytearray, memoryview)):
        view = memoryview(source)
        if view.readonly and view.c_contiguous and isinstance(view.obj, bytes):
            return BundleBuffer(view.cast("B"), None)
        return BundleBuffer(memoryview(view.tobytes()), None)  # the caller may change or reshape it later
    if not isinstance(source, (str, os.PathLike)):
        raise BundleError(f"a bundle is a path or bytes, got {type(source).__name__}")
    path = os.fspath(source)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    fd = _open_regular(path)
    size = os.fstat(fd).st_size
    if not map_file:
        try:
            reading = _PrivateRead(fd, size, path)
        except OSError as e:
            os.close(fd)
            raise BundleError(f"cannot read bundle '{path}': {e.strerror or e}") from None
        buffer = BundleBuffer(reading.target.toreadonly(), path, reading=reading)
        if not incremental:
            buffer.finish()
        return buffer
    try:
        mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except OSError as e:
        os.close(fd)
        raise BundleError(f"cannot map bundle '{path}': {e.strerror or e}") from None
    info = os.fstat(fd)
    return BundleBuffer(memoryview(mapping), path, _FileIdentity(fd, info.st_size, info.st_mtime_ns))
