"""Careful file access shared by the bundle writer (aot), the bundle reader and the caches (engines, host tuning).

All-or-nothing writes, and opens that touch only regular files (a FIFO or a
symlink planted where a bundle or a cache entry is expected must not block or redirect).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def default_cache_dir() -> Path:
    """``$AOT_CACHE_DIR``, else ``$XDG_CACHE_HOME/aot``, else ``~/.cache/aot``: the engine cache and the host tuning."""
    explicit = os.environ.get("AOT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "aot" if xdg else Path.home() / ".cache" / "aot"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(
    path: str | os.PathLike[str],
    write: Callable[[BinaryIO], int],
    check: Callable[[str], None] | None = None,
) -> int:
    """Write a file into a temporary file beside ``path``, fsync, then rename it over ``path``.

    A reader never sees half a file, a crash leaves at most a dot-temporary, and an
    exception (OSError included, re-raised) leaves nothing. ``check``, given the
    temporary's path, may refuse the file before it becomes visible by raising.
    Returns what ``write`` returns.
    """
    path = os.fspath(path)
    refuse_special_file(path)
    import tempfile  # only where a file is written: a load never imports it

    fd, tmp = tempfile.mkstemp(
        prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=os.path.dirname(os.path.abspath(path))
    )
    try:
        with os.fdopen(fd, "wb") as out:
            size = write(out)
            out.flush()
            os.fsync(out.fileno())
        if check is not None:
            check(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return size


def refuse_special_file(path: str | os.PathLike[str]) -> None:
    """OSError if ``path`` exists and is not a regular file: a write must never replace a directory,
    a device (``/dev/null``, ``/dev/full``), a FIFO or a socket with a regular file."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # missing (it will be created), or unreachable (the write will say why)
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "it is a directory", os.fspath(path))
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, "it exists and is not a regular file (a device, FIFO or socket)", os.fspath(path))


def check_writable(path: str | os.PathLike[str]) -> None:
    """OSError unless a later atomic write to ``path`` can succeed, checked before any work.

    A command that computes for a minute and then finds its output folder missing has
    wasted the minute: the folder must exist and be writable, and ``path`` itself must
    not be a directory or a special file. Nothing is created.
    """
    refuse_special_file(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        what = "does not exist" if not os.path.exists(folder) else "is not a directory"
        raise OSError(errno.ENOENT, f"its folder {folder} {what}", os.fspath(path))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OSError(errno.EACCES, f"its folder {folder} is not writable", os.fspath(path))


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True, create: bool = False) -> int:
    """A read (or, with ``create``, read-write) fd on ``path``, only if it is a regular file.

    Never blocks: a FIFO opened for reading would wait for a writer forever, so the
    open is non-blocking and anything that is not a regular file (FIFO, device,
    socket, directory) is refused with OSError before a byte is read. With
    ``follow_symlinks=False`` a symlink as the last component is refused too, so a
    link planted in a shared directory cannot point a read or a create elsewhere.
    """
    flags = os.O_RDWR | os.O_CREAT if create else os.O_RDONLY
    flags |= getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o666)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    return fd


def read_regular(path: str | os.PathLike[str], max_bytes: int, *, follow_symlinks: bool = True) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; OSError for anything else, never a long read."""
    fd = open_regular(path, follow_symlinks=follow_symlinks)
    try:
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes", os.fspath(path))
    return data
