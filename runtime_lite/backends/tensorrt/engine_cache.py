"""The TensorRT engine cache shared by ``aot-build`` and deployed runtimes.

Content-addressed: an engine's key is the sha256 of everything that decides
which engine TensorRT builds (``engine_key``), so a hit can never be an engine
for other weights, another GPU, another TensorRT or other build settings (the
peers' keys leave some of these out and serve wrong engines). On disk it is
plain files, no pickle::

    <root>/tensorrt-engines/v1/<key>.engine   the serialized engine
    <root>/tensorrt-engines/v1/<key>.json     its index record: sha256, size, ingredients

The record is written after the engine and names its sha256, so an entry exists
only once both are complete; every read verifies the digest and drops an entry
that fails. Writes are atomic and happen under a per-key file lock, so N
processes that miss at once build once. The modification time of the record is
its last use; ``evict`` removes least recently used entries beyond the size budget.

The directory is shared, and anyone who can write to it may drop files there, so
nothing found in it is trusted: a hit must carry its own key, size and digest;
files are opened without following symlinks and only if regular (a FIFO or a
link to ``/dev/zero`` is refused, never read); reads stop at the recorded size;
files whose names are not ``<64 hex>.json``/``.engine`` are ignored and counted
in ``stats.ignored``; lock files are created without following symlinks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime_lite.files import atomic_write, default_cache_dir, open_regular, read_regular

logger = logging.getLogger("runtime_lite.backends.tensorrt.engine_cache")

LAYOUT = "tensorrt-engines/v1"
DEFAULT_BUDGET = 8 << 30
#: An index record is a few hundred bytes of JSON; anything much larger was not written by us.
MAX_RECORD_BYTES = 1 << 20
#: No serialized engine this cache stores is larger (TensorRT engines of the largest LLMs stay far below).
MAX_ENGINE_BYTES = 64 << 30
_HEX = frozenset("0123456789abcdef")


def engine_key(recipe: bytes, ingredients: Mapping[str, Any]) -> str:
    """The cache key: sha256 over the recipe (weights included) and every other ingredient.

    ``ingredients`` holds the build settings (precision, profiles, workspace,
    hardware-compatibility level, version compatibility) and the device signature
    (TensorRT and CUDA versions, GPU name and compute capability, OS and arch).
    """
    digest = hashlib.sha256()
    digest.update(hashlib.sha256(recipe).digest())
    digest.update(json.dumps(ingredients, sort_keys=True, separators=(",", ":")).encode())
    return digest.hexdigest()


try:
    import fcntl

    def _lock(handle, exclusive: bool) -> None:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_UN)

except ImportError:  # pragma: no cover - Windows
    import msvcrt

    def _lock(handle, exclusive: bool) -> None:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK if exclusive else msvcrt.LK_UNLCK, 1)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock between processes (flock on POSIX, msvcrt on Windows).

    The lock file is created without following a symlink: one planted at ``path``
    is removed (it is not ours) rather than followed to create a file elsewhere.
    """
    try:
        fd = open_regular(path, follow_symlinks=False, create=True)
    except OSError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a symlink, FIFO or device squatting on our lock name
        fd = open_regular(path, follow_symlinks=False, create=True)
    with os.fdopen(fd, "r+b") as handle:
        _lock(handle, True)
        try:
            yield
        finally:
            _lock(handle, False)


def _is_key(name: str) -> bool:
    return len(name) == 64 and _HEX.issuperset(name)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number this cache writes")


def _read_record(path: Path) -> dict[str, Any] | None:
    """An index record as written by ``put``, or None for anything else (missing, hostile, damaged)."""
    try:
        record = json.loads(
            read_regular(path, MAX_RECORD_BYTES, follow_symlinks=False), parse_constant=_refuse_constant
        )
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    size, digest = record.get("size"), record.get("sha256")
    if not (isinstance(size, int) and not isinstance(size, bool) and 0 <= size <= MAX_ENGINE_BYTES):
        return None
    if not (isinstance(digest, str) and len(digest) == 64 and _HEX.issuperset(digest)):
        return None
    if not isinstance(record.get("key"), str) or not isinstance(record.get("ingredients", {}), dict):
        return None
    return record


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    builds: int = 0
    dropped: int = 0  # corrupt or mismatched entries removed
    evicted: int = 0
    ignored: int = 0  # files in the cache directory that are not entries of ours


@dataclass(frozen=True)
class CacheEntry:
    key: str
    size: int
    last_used: float
    ingredients: dict[str, Any] = field(default_factory=dict)


class EngineCache:
    """Engines by key under ``root`` (default ``default_cache_dir()``), at most ``max_bytes`` in all."""

    def __init__(self, root: str | os.PathLike[str] | None = None, max_bytes: int = DEFAULT_BUDGET):
        self.root = Path(root) if root is not None else default_cache_dir()
        self.directory = self.root / LAYOUT
        self.max_bytes = max_bytes
        self.stats = CacheStats()

    def _paths(self, key: str) -> tuple[Path, Path]:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"engine cache key must be 64 hex digits, got {key!r}")
        return self.directory / f"{key}.engine", self.directory / f"{key}.json"

    def get(self, key: str) -> bytes | None:
        """The engine stored under ``key``, verified; None on a miss or a bad entry (then dropped).

        Verified means: the record names this very key (an entry copied under another
        name is not served), the engine file has the recorded size (read no further)
        and the recorded sha256.
        """
        engine_path, record_path = self._paths(key)
        if not record_path.exists() and not record_path.is_symlink():
            return None
        record = _read_record(record_path)
        problem = None
        if record is None:
            problem = "its record is unreadable or not one this cache wrote"
        elif record["key"] != key:
            problem = f"its record belongs to key {record['key'][:16]!r}"
        else:
            try:
                data = read_regular(engine_path, record["size"], follow_symlinks=False)
            except OSError as e:
                problem = f"its engine file cannot be read ({e.strerror or e})"
            else:
                if len(data) != record["size"]:
                    problem = f"its engine file has {len(data)} bytes, the record says {record['size']}"
                elif hashlib.sha256(data).hexdigest() != record["sha256"]:
                    problem = "sha256 mismatch"
        if problem is not None:
            logger.warning("engine cache entry %s is not valid (%s); dropping it", key[:16], problem)
            self.drop(key)
            self.stats.dropped += 1
            return None
        with contextlib.suppress(OSError):
            os.utime(record_path, follow_symlinks=False)  # last use, for eviction
        return data

    def put(self, key: str, data: bytes, ingredients: Mapping[str, Any] | None = None) -> None:
        """Store ``data`` under ``key`` atomically, then evict beyond the budget."""
        engine_path, record_path = self._paths(key)
        self.directory.mkdir(parents=True, exist_ok=True)
        record = {
            "key": key,
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "created": time.time(),
            "ingredients": dict(ingredients or {}),
        }
        atomic_write(engine_path, lambda out: out.write(data))
        text = json.dumps(record, sort_keys=True, indent=1).encode()
        atomic_write(record_path, lambda out: out.write(text))  # last: the entry now exists
        self.evict(keep=key)

    def get_or_build(
        self, key: str, build: Callable[[], bytes], ingredients: Mapping[str, Any] | None = None
    ) -> tuple[bytes, bool]:
        """(engine, hit). On a miss ``build`` runs once across every process sharing the cache."""
        data = self.get(key)
        if data is not None:
            self.stats.hits += 1
            return data, True
        self.directory.mkdir(parents=True, exist_ok=True)
        with file_lock(self.directory / f"{key}.lock"):
            data = self.get(key)  # another process may have built it while we waited
            if data is not None:
                self.stats.hits += 1
                return data, True
            self.stats.misses += 1
            data = build()
            self.stats.builds += 1
            self.put(key, data, ingredients)
        # Removing the lock file is safe: whoever locks any file at this path later finds the entry.
        with contextlib.suppress(OSError):
            (self.directory / f"{key}.lock").unlink()
        return data, False

    def entries(self) -> list[CacheEntry]:
        """Complete entries, least recently used first; other files are ignored (and counted)."""
        found = []
        listing = os.scandir(self.directory) if self.directory.is_dir() else contextlib.nullcontext(())
        with listing as names:
            for item in names:
                stem, dot, suffix = item.name.rpartition(".")
                if suffix in ("engine", "lock", "tmp") and dot:
                    continue  # an entry's other half, a lock, a write in progress
                record = _read_record(Path(item.path)) if suffix == "json" and _is_key(stem) else None
                if record is None or record["key"] != stem:
                    self.stats.ignored += 1
                    continue
                try:
                    last_used = item.stat(follow_symlinks=False).st_mtime
                except OSError:
                    continue
                found.append(CacheEntry(stem, record["size"], last_used, record.get("ingredients", {})))
        return sorted(found, key=lambda e: e.last_used)

    def evict(self, keep: str | None = None) -> int:
        """Remove least recently used entries until the cache fits its budget; returns how many."""
        with file_lock(self.root / ".evict.lock") if self.directory.is_dir() else contextlib.nullcontext():
            entries = self.entries()
            total = sum(e.size for e in entries)
            removed = 0
            for entry in entries:
                if total <= self.max_bytes:
                    break
                if entry.key == keep:
                    continue
                self.drop(entry.key)
                total -= entry.size
                removed += 1
        self.stats.evicted += removed
        return removed

    def drop(self, key: str) -> None:
        """Remove an entry (a no-op if absent)."""
        engine_path, record_path = self._paths(key)
        for path in (record_path, engine_path):  # the record first: the entry stops existing at once
            with contextlib.suppress(OSError):
                path.unlink()


__all__ = ["CacheEntry", "CacheStats", "EngineCache", "default_cache_dir", "engine_key", "file_lock"]
