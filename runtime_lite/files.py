"""All-or-nothing file writes, shared by the bundle writer (aot) and the engine cache (runtime_lite)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import BinaryIO


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], int]) -> int:
    """Write a file into a temporary file beside ``path``, fsync, then rename it over ``path``.

    A reader never sees half a file, a crash leaves at most a dot-temporary, and an
    exception (OSError included, re-raised) leaves nothing. Returns what ``write`` returns.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(21, "it is a directory", path)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=os.path.dirname(os.path.abspath(path))
    )
    try:
        with os.fdopen(fd, "wb") as out:
            size = write(out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return size
