"""Where a bundle's bytes live while a Module uses them.

A loaded Module keeps reading its bundle (weights are views, not copies), so what
backs those bytes decides what a later change to the file can do. Deployments
copy new versions over old ones (``cp``, ``rsync --inplace``): with a shared file
mapping, a truncation kills the process with SIGBUS at the next run and an
in-place overwrite silently swaps in weights nobody verified. So by default a
path is read once into private memory (anonymous, transparent huge pages where the
kernel offers them: about 20 ms per 100 MB here, a fifth of what 4 KiB faults
cost) and the file is closed. ``map_file=True`` keeps the zero-copy shared mapping
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
import weakref
from dataclasses import dataclass

from runtime_lite.errors import BundleError, ExecutionError
from runtime_lite.files import open_regular


@dataclass
class _FileIdentity:
    """What an in-place change to a mapped file alters: size and modification time of the open inode."""

    fd: int
    size: int
    mtime_ns: int


class BundleBuffer:
    """A bundle's bytes, private or mapped; ``check_unchanged`` guards the mapped case."""

    def __init__(self, view: memoryview, path: str | None, identity: _FileIdentity | None = None):
        self.view = view
        self.path = path
        self._identity = identity
        if identity is not None:
            weakref.finalize(self, os.close, identity.fd)

    @property
    def mapped(self) -> bool:
        return self._identity is not None

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


def _read_private(fd: int, size: int, path: str) -> memoryview:
    """The whole file in anonymous memory, on huge pages where possible (few page faults)."""
    memory = (
        mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) if hasattr(mmap, "MAP_ANONYMOUS") else None
    )
    if memory is not None and hasattr(mmap, "MADV_HUGEPAGE"):
        memory.madvise(mmap.MADV_HUGEPAGE)
    target = memoryview(memory if memory is not None else bytearray(size))
    done = 0
    while done < size:
        chunk = os.readv(fd, [target[done:]])
        if chunk == 0:
            raise BundleError(f"bundle '{path}' shrank while it was being read ({done} of {size} bytes)")
        done += chunk
    return target.toreadonly()


def open_bundle(source: object, *, map_file: bool = False) -> BundleBuffer:
    """The bytes of a bundle given as a path, ``bytes``, ``bytearray`` or memoryview."""
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
            return BundleBuffer(_read_private(fd, size, path), path)
        except OSError as e:
            raise BundleError(f"cannot read bundle '{path}': {e.strerror or e}") from None
        finally:
            os.close(fd)
    try:
        mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except OSError as e:
        os.close(fd)
        raise BundleError(f"cannot map bundle '{path}': {e.strerror or e}") from None
    info = os.fstat(fd)
    return BundleBuffer(memoryview(mapping), path, _FileIdentity(fd, info.st_size, info.st_mtime_ns))
