"""The TensorRT engine cache shared by ``aot-build`` and deployed runtimes.

Content-addressed: an engine's key is the sha256 of everything that decides
which engine TensorRT builds (``engine_key``), so a hit can never be an engine
for other weights, another GPU, another TensorRT or other build settings (the
peers' keys leave some of these out and serve wrong engines). On disk it is
plain files, no pickle::

    <root>/tensorrt-engines/v1/<key>.engine   the serialized engine
    <root>/tensorrt-engines/v1/<key>.json     its index record: sha256, size, ingredients, HMAC
    <root>/timing/<trt>-<sm>.cache            TensorRT's timing cache (build speed only)

The record is written after the engine and names its sha256, so an entry exists
only once both are complete. Writes are atomic and happen under a per-key file
lock, so N processes that miss at once build once. The modification time of the
record is its last use; ``evict`` removes least recently used entries beyond the
size budget.

**Trust boundary.** The directory may be shared, and anyone who can write to it may
drop, replace, link or delete files there at any moment. What they can do is deny
service (delete or damage entries: a miss, then a rebuild); what they cannot do is
make a process run an engine it did not build:

* every record carries an HMAC-SHA256 over its content (key, sha256, size,
  ingredients) under a secret kept *outside* the cache (``cache_key_file()``:
  ``$AOT_CACHE_KEY_FILE``, else ``$XDG_CONFIG_HOME/aot/engine-cache.key``, created
  on first use with mode 0600). A key file that is a symlink, not a regular file,
  owned by another user, writable by group or others, readable by others, or inside
  the cache is refused, as ssh refuses such keys. Processes that share a cache share
  the key file; write access to the cache alone cannot plant an engine (copying A's
  engine and record over B's fails the HMAC, and a record that names another key is
  refused);
* the cache directory and every directory under it are opened one component at a
  time with ``O_NOFOLLOW`` relative to the parent's descriptor, and every file in
  them is opened, created, renamed and removed relative to that descriptor, so a
  symlink planted at ``<root>``, ``tensorrt-engines``, ``v1`` or ``timing`` cannot
  redirect a read or a write (it is refused with an OSError naming it);
* files are opened only if regular (a FIFO or a link to ``/dev/zero`` is never
  read), reads stop at the recorded size (the timing cache at
  ``MAX_TIMING_CACHE_BYTES``), and names that are not ``<64 hex>.json``/``.engine``
  are ignored and counted in ``stats.ignored``;
* a reader that finds an entry invalid re-checks it under the key's lock, which
  every writer holds, and drops it only if it is still invalid: a reader racing a
  writer never discards a good entry;
* a lock file squatted by something else (a symlink, FIFO, or directory) is removed;
  a non-empty directory that cannot be removed is reported (a warning naming it)
  and the lock is taken on the directory holding it instead, so the engine is still
  built, one key at a time.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime_lite.files import default_cache_dir

logger = logging.getLogger("runtime_lite.backends.tensorrt.engine_cache")

LAYOUT = "tensorrt-engines/v1"
TIMING = "timing"
DEFAULT_BUDGET = 8 << 30
#: An index record is a few hundred bytes of JSON; anything much larger was not written by us.
MAX_RECORD_BYTES = 1 << 20
#: No serialized engine this cache stores is larger (TensorRT engines of the largest LLMs stay far below).
MAX_ENGINE_BYTES = 64 << 30
#: TensorRT's timing caches hold a few MB of tactic timings; a larger file was not written by a build.
MAX_TIMING_CACHE_BYTES = 256 << 20
KEY_BYTES = 32
_MISSING = "its record is missing"
_HEX = frozenset("0123456789abcdef")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | _NOFOLLOW | _CLOEXEC


def cache_key_file() -> Path:
    """Where the cache's HMAC key lives: ``$AOT_CACHE_KEY_FILE``, else ``$XDG_CONFIG_HOME/aot/engine-cache.key``
    (``~/.config/aot/...``): outside any cache directory, so write access to a cache does not give the key."""
    explicit = os.environ.get("AOT_CACHE_KEY_FILE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "aot" / "engine-cache.key"


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


class CacheKeyError(OSError):
    """The cache's HMAC key file cannot be trusted or created; the cache is then not used."""


def load_cache_key(path: Path, cache_root: Path | None = None) -> bytes:
    """The secret that authenticates entries, created (0600, 32 random bytes) on first use.

    Refused like ssh refuses a private key: a symlink, not a regular file, owned by
    someone else, writable by group or others, readable by others, or inside the cache.
    """
    path = Path(os.path.abspath(path))
    _check_key_directories(path)
    if cache_root is not None:
        root = os.path.realpath(cache_root)
        if os.path.realpath(path) == root or os.path.realpath(path).startswith(root.rstrip(os.sep) + os.sep):
            raise CacheKeyError(errno.EPERM, "the cache key file must be outside the cache directory", str(path))
    try:
        fd = os.open(path, _FILE_FLAGS)
    except FileNotFoundError:
        os.makedirs(path.parent, mode=0o700, exist_ok=True)
        key = secrets.token_bytes(KEY_BYTES)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
        except FileExistsError:  # another process created it first: read theirs
            return load_cache_key(path, cache_root)
        with os.fdopen(fd, "wb") as out:
            out.write(key)
            out.flush()
            os.fsync(out.fileno())
        return key
    except OSError as e:
        raise CacheKeyError(e.errno, f"cannot open the cache key file ({e.strerror})", str(path)) from None
    try:
        info = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(info.st_mode):
            problem = "it is not a regular file"
        elif not _owned_here(info):
            problem = "it is owned by another user"
        elif info.st_mode & 0o026:
            problem = f"its mode {stat.S_IMODE(info.st_mode):o} lets others write or read it (chmod 600)"
        if problem is not None:
            raise CacheKeyError(errno.EPERM, f"the cache key file is not safe: {problem}", str(path))
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise CacheKeyError(errno.EINVAL, f"the cache key file must hold {KEY_BYTES} bytes", str(path))
    return key


def _owned_here(info: os.stat_result) -> bool:
    """Owned by this process's user or by root (platforms without uids: always)."""
    return not hasattr(os, "geteuid") or info.st_uid in (os.geteuid(), 0)


def _check_key_directories(path: Path) -> None:
    """Refuse a key file whose directory, or any above it, another user could rename it in or out of.

    As ssh does for ``~/.ssh``: a directory writable by others without the sticky bit
    (``/tmp`` has it), at any level, or a parent owned by another user (root aside), lets
    its writer replace the key between processes, and with it the cache's authentication.
    A missing directory is created 0700 later.
    """
    if not hasattr(os, "geteuid"):
        return
    for depth, directory in enumerate(path.parents):
        try:
            info = os.stat(directory)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise CacheKeyError(e.errno, f"cannot check the key file's directory {directory} ({e.strerror})",
                                str(path)) from None  # fmt: skip
        writable_by_others = info.st_mode & 0o002 and not info.st_mode & stat.S_ISVTX
        if writable_by_others or (depth == 0 and not _owned_here(info)):
            why = "is writable by others (no sticky bit)" if writable_by_others else "is owned by another user"
            raise CacheKeyError(errno.EPERM, f"the cache key file is not safe: its directory {directory} {why}",
                                str(path))  # fmt: skip


try:
    import fcntl

    def _lock_fd(fd: int, exclusive: bool) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_UN)

except ImportError:  # pragma: no cover - Windows
    import msvcrt

    def _lock_fd(fd: int, exclusive: bool) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_LOCK if exclusive else msvcrt.LK_UNLCK, 1)


class Directory:
    """A directory reached without following any symlink at or below ``root``, and the files in it.

    Each component is opened with ``O_NOFOLLOW`` relative to its parent's descriptor,
    and every file operation is relative to the final descriptor, so nothing planted
    in the tree (a symlink at any level) can send a read or a write elsewhere.
    """

    def __init__(self, root: Path, parts: tuple[str, ...], create: bool):
        self.path = root.joinpath(*parts)
        if os.open not in os.supports_dir_fd:  # Windows: no descriptor-relative opens, so no safe walk
            raise OSError(errno.ENOSYS, "this platform cannot open files relative to a directory", str(self.path))
        if create:
            os.makedirs(root, exist_ok=True)
        fd = os.open(root, _DIR_FLAGS)  # the root itself: a symlink there is refused (ELOOP)
        try:
            for part in parts:
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise OSError(e.errno, "a component is a symlink or not a directory; refused", str(self.path)) from None
            raise
        self.fd = fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Directory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def read(self, name: str, max_bytes: int, own: bool = False) -> bytearray:
        """A regular file's bytes (never through a symlink, never more than ``max_bytes``); OSError otherwise.

        ``own``: only a file this user (or root) owns, with no other name (a hard link planted
        in the cache to a file elsewhere is another name of that file): for content that no
        authentication covers (the timing cache).
        """
        fd = os.open(name, _FILE_FLAGS, dir_fd=self.fd)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(self.path / name))
            if own and (info.st_nlink != 1 or not _owned_here(info)):
                raise OSError(errno.EPERM, "not a file of this user's with a single name", str(self.path / name))
            if info.st_size > max_bytes:  # refused before a byte is read (a sparse file costs nothing)
                raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes", str(self.path / name))
            data, got = bytearray(info.st_size + 1), 0  # one byte over: a file that grew is seen to
            with memoryview(data) as view:
                while got < len(data):
                    count = os.readv(fd, [view[got : got + (64 << 20)]])
                    if not count:
                        break
                    got += count
        finally:
            os.close(fd)
        if got > max_bytes:
            raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes", str(self.path / name))
        del data[got:]  # read in place, once: an entry of 300 MB is not copied again by a join
        return data

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return False
        return True

    def write(self, name: str, data: bytes) -> None:
        """All or nothing: a fresh temporary beside ``name``, fsync'd, then renamed over it."""
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise

    def unlink(self, name: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=self.fd)

    def touch(self, name: str) -> None:
        with contextlib.suppress(OSError, NotImplementedError):
            os.utime(name, dir_fd=self.fd, follow_symlinks=False)

    def scan(self) -> Iterator[tuple[str, float | None]]:
        """(name, modification time or None) of every entry, symlinks not followed."""
        with os.scandir(self.fd) as items:
            for item in items:
                try:
                    yield item.name, item.stat(follow_symlinks=False).st_mtime
                except OSError:
                    yield item.name, None

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """An exclusive lock between processes on ``name`` in this directory.

        The lock file is created without following a symlink; anything squatting on
        the name (a symlink, a FIFO, a directory) is removed. A non-empty directory
        that cannot be removed is reported, and this directory itself is locked
        instead: every key then waits on one lock, but the cache keeps working.
        """
        fd = self._open_lock(name)
        try:
            _lock_fd(fd, True)
            try:
                yield
            finally:
                _lock_fd(fd, False)
        finally:
            if fd != self.fd:
                os.close(fd)

    def _open_lock(self, name: str) -> int:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | _NOFOLLOW | _CLOEXEC
        for _ in range(3):
            try:
                fd = os.open(name, flags, 0o644, dir_fd=self.fd)
            except OSError:
                fd = -1
            if fd >= 0:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    return fd
                os.close(fd)
            try:  # not ours: a symlink, FIFO or device (unlink), or a directory (rmdir if empty)
                info = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    os.rmdir(name, dir_fd=self.fd)
                else:
                    os.unlink(name, dir_fd=self.fd)
            except FileNotFoundError:
                continue
            except OSError as e:
                logger.warning(
                    "engine cache: %s is squatted by something that cannot be removed (%s); "
                    "locking its directory instead (builds of every key wait on one lock)",
                    self.path / name,
                    e.strerror or e,
                )
                return self.fd
        return self.fd


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock between processes on ``path`` (its directory reached without following symlinks)."""
    path = Path(path)
    with Directory(path.parent, (), create=True) as directory, directory.lock(path.name):
        yield


def _is_key(name: str) -> bool:
    return len(name) == 64 and _HEX.issuperset(name)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number this cache writes")


def _mac(secret: bytes, record: Mapping[str, Any]) -> str:
    """HMAC-SHA256 of a record's canonical JSON, its own ``hmac`` field left out."""
    body = {k: v for k, v in record.items() if k != "hmac"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(secret, text, hashlib.sha256).hexdigest()


def _parse_record(data: bytes) -> dict[str, Any] | None:
    """An index record as ``put`` writes it (its HMAC not yet checked), or None for anything else."""
    try:
        record = json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    size, digest, mac = record.get("size"), record.get("sha256"), record.get("hmac")
    if not (isinstance(size, int) and not isinstance(size, bool) and 0 <= size <= MAX_ENGINE_BYTES):
        return None
    if not (isinstance(digest, str) and len(digest) == 64 and _HEX.issuperset(digest)):
        return None
    if not (isinstance(mac, str) and len(mac) == 64):
        return None
    if not isinstance(record.get("key"), str) or not isinstance(record.get("ingredients", {}), dict):
        return None
    return record


@dataclass
class CacheStats:
    """What this cache did since it was opened: ``runtime-lite cache`` and the logs report it."""

    hits: int = 0
    misses: int = 0
    builds: int = 0
    dropped: int = 0  # corrupt, forged or mismatched entries removed
    evicted: int = 0
    ignored: int = 0  # files in the cache directory that are not entries of ours
    unusable: int = 0  # operations skipped because the cache or its key could not be used safely


@dataclass(frozen=True)
class CacheEntry:
    """One entry as ``EngineCache.entries`` lists it: its key, size, last use and what it was built from."""

    key: str
    size: int
    last_used: float
    ingredients: dict[str, Any] = field(default_factory=dict)


class EngineCache:
    """Engines by key under ``root`` (default ``default_cache_dir()``), at most ``max_bytes`` in all.

    ``key_file`` holds the secret that authenticates entries (default ``cache_key_file()``).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        max_bytes: int = DEFAULT_BUDGET,
        key_file: str | os.PathLike[str] | None = None,
        layout: str = LAYOUT,
    ):
        self.root = Path(root) if root is not None else default_cache_dir()
        #: Where under ``root`` the entries lie: another kind of entry (onnxruntime's optimized graphs) keeps
        #: the same trust boundary in a folder of its own.
        self.layout = layout
        self.directory = self.root / layout
        self.max_bytes = max_bytes
        self.key_file = Path(key_file) if key_file is not None else cache_key_file()
        self.stats = CacheStats()
        self._secret: bytes | None = None

    def _key(self) -> bytes:
        if self._secret is None:
            self._secret = load_cache_key(self.key_file, self.root)
        return self._secret

    def _paths(self, key: str) -> tuple[str, str]:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"engine cache key must be 64 hex digits, got {key!r}")
        return f"{key}.engine", f"{key}.json"

    def _entries_dir(self, create: bool) -> Directory:
        return Directory(self.root, tuple(self.layout.split("/")), create)

    def _unusable(self, what: str, error: OSError) -> None:
        self.stats.unusable += 1
        logger.warning("engine cache %s: %s skipped: %s", self.root, what, error)

    # -- reading --------------------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        """The engine stored under ``key``, verified; None on a miss or a bad entry (then dropped)."""
        entry = self.get_entry(key)
        return None if entry is None else bytes(entry[0])

    def get_entry(self, key: str, hashed: bool = True) -> tuple[bytes, dict[str, Any]] | None:
        """The engine stored under ``key`` and the ingredients its record names, verified; None on a miss or a
        bad entry (then dropped). ``hashed=False`` leaves out the engine file's sha256 (the record's HMAC,
        key and size still checked): for a caller that checks the content against digests its ingredients
        name, part of it while it works (onnxruntime's optimized graphs hash their weights meanwhile).

        Verified means: the record's HMAC under this cache's key, the record names this
        very key (an entry copied under another name is not served), the engine file
        has the recorded size (read no further) and the recorded sha256. An entry found
        bad is re-checked under the key's lock before it is dropped, so a write in
        progress is never mistaken for damage.
        """
        engine_name, record_name = self._paths(key)
        try:
            directory = self._entries_dir(create=False)
        except FileNotFoundError:
            return None
        except OSError as e:
            self._unusable("read", e)
            return None
        with directory:
            if not directory.exists(record_name):
                return None
            try:
                data, problem, record = self._verified_entry(directory, key, hashed)
                if problem is not None:
                    with directory.lock(f"{key}.lock"):  # writers hold it: what is bad now stays bad
                        data, problem, record = self._verified_entry(directory, key, hashed)
                        if problem == _MISSING:  # removed meanwhile (evicted, dropped): a plain miss
                            return None
                        if problem is not None:
                            self._drop(directory, key, problem)
                            return None
            except OSError as e:  # the key file: nothing can be verified, nothing is served
                self._unusable("read", e)
                return None
            directory.touch(record_name)  # last use, for eviction
        return data, dict(record.get("ingredients", {}))

    def _verified(self, directory: Directory, key: str) -> tuple[bytes | None, str | None]:
        """(engine, None) for a good entry, else (None, why); None, None when there is no record at all."""
        data, problem, _ = self._verified_entry(directory, key)
        return data, problem

    def _verified_entry(
        self, directory: Directory, key: str, hashed: bool = True
    ) -> tuple[bytes | None, str | None, dict[str, Any]]:
        """``_verified``, and the entry's record (empty where there is none to trust)."""
        engine_name, record_name = self._paths(key)
        try:
            raw = directory.read(record_name, MAX_RECORD_BYTES)
        except FileNotFoundError:
            return None, _MISSING, {}
        except OSError as e:
            return None, f"its record cannot be read ({e.strerror or e})", {}
        record = _parse_record(raw)
        if record is None:
            return None, "its record is not one this cache wrote", {}
        if not hmac.compare_digest(record["hmac"], _mac(self._key(), record)):
            return None, "its record is not authenticated by this cache's key (forged, or written with another key)", {}
        if record["key"] != key:
            return None, f"its record belongs to key {record['key'][:16]!r}", {}
        try:
            data = directory.read(engine_name, record["size"])
        except OSError as e:
            return None, f"its engine file cannot be read ({e.strerror or e})", {}
        if len(data) != record["size"]:
            return None, f"its engine file has {len(data)} bytes, the record says {record['size']}", {}
        if hashed and hashlib.sha256(data).hexdigest() != record["sha256"]:
            return None, "sha256 mismatch", {}
        return data, None, record

    def _drop(self, directory: Directory, key: str, problem: str) -> None:
        logger.warning("engine cache entry %s is not valid (%s); dropping it", key[:16], problem)
        engine_name, record_name = self._paths(key)
        directory.unlink(record_name)  # the record first: the entry stops existing at once
        directory.unlink(engine_name)
        self.stats.dropped += 1

    # -- writing --------------------------------------------------------------------------------

    def put(self, key: str, data: bytes, ingredients: Mapping[str, Any] | None = None) -> None:
        """Store ``data`` under ``key`` atomically (under the key's lock), then evict beyond the budget."""
        self._paths(key)
        try:
            with self._entries_dir(create=True) as directory:
                with directory.lock(f"{key}.lock"):
                    self._store(directory, key, data, ingredients)
        except OSError as e:
            self._unusable("write", e)
            return
        self.evict(keep=key)

    def _store(self, directory: Directory, key: str, data: bytes, ingredients: Mapping[str, Any] | None) -> None:
        engine_name, record_name = self._paths(key)
        record = {
            "key": key,
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "created": time.time(),
            "ingredients": json.loads(json.dumps(dict(ingredients or {}))),  # what a reader will parse back
        }
        record["hmac"] = _mac(self._key(), record)
        directory.write(engine_name, data)
        directory.write(record_name, json.dumps(record, sort_keys=True, indent=1).encode())  # last: now it exists

    def get_or_build(
        self, key: str, build: Callable[[], bytes], ingredients: Mapping[str, Any] | None = None
    ) -> tuple[bytes, bool]:
        """(engine, hit). On a miss ``build`` runs once across every process sharing the cache.

        A cache that cannot be used safely (a symlinked component, an unsafe key file)
        still gives an engine: it is built and not stored, and ``stats.unusable`` says so.
        """
        data = self.get(key)
        if data is not None:
            self.stats.hits += 1
            return data, True
        try:
            directory = self._entries_dir(create=True)
            self._key()
        except OSError as e:
            self._unusable("build into the cache", e)
            self.stats.misses += 1
            self.stats.builds += 1
            return build(), False
        with directory:
            with directory.lock(f"{key}.lock"):
                data, problem = self._verified(directory, key)  # another process may have built it meanwhile
                if data is not None:
                    self.stats.hits += 1
                    return bytes(data), True
                if problem is not None and problem != _MISSING:
                    self._drop(directory, key, problem)
                self.stats.misses += 1
                data = build()
                self.stats.builds += 1
                self._store(directory, key, data, ingredients)
            # The lock file stays (a few bytes of inode per key): removed, a reader re-checking under it
            # and a writer could each lock a different file and no longer exclude each other.
        self.evict(keep=key)
        return data, False

    # -- the timing cache ----------------------------------------------------------------------

    def read_timing(self, name: str) -> bytes:
        """TensorRT's timing cache ``name`` under ``<root>/timing`` (b"" if absent or unusable)."""
        try:
            with Directory(self.root, (TIMING,), create=False) as directory:
                return bytes(directory.read(name, MAX_TIMING_CACHE_BYTES, own=True))
        except FileNotFoundError:
            return b""
        except OSError as e:
            self._unusable("timing cache read", e)
            return b""

    def write_timing(self, name: str, data: bytes) -> None:
        if len(data) > MAX_TIMING_CACHE_BYTES:
            return
        try:
            with Directory(self.root, (TIMING,), create=True) as directory:
                directory.write(name, data)
        except OSError as e:
            self._unusable("timing cache write", e)

    # -- listing and eviction ------------------------------------------------------------------

    def entries(self) -> list[CacheEntry]:
        """Complete entries, least recently used first; other files are ignored (and counted).

        Listed from the records alone (their HMAC not checked): eviction may remove a
        forged record, and ``get`` verifies every entry it serves.
        """
        try:
            directory = self._entries_dir(create=False)
        except OSError:
            return []
        found = []
        with directory:
            for name, mtime in directory.scan():
                stem, dot, suffix = name.rpartition(".")
                if suffix in ("engine", "lock", "tmp") and dot:
                    continue  # an entry's other half, a lock, a write in progress
                record = None
                if suffix == "json" and _is_key(stem):
                    try:
                        record = _parse_record(directory.read(name, MAX_RECORD_BYTES))
                    except OSError:
                        record = None
                if record is None or record["key"] != stem or mtime is None:
                    self.stats.ignored += 1
                    continue
                found.append(CacheEntry(stem, record["size"], mtime, record.get("ingredients", {})))
        return sorted(found, key=lambda e: e.last_used)

    def evict(self, keep: str | None = None) -> int:
        """Remove least recently used entries until the cache fits its budget; returns how many."""
        try:
            root = Directory(self.root, (), create=False)
        except OSError:
            return 0
        removed = 0
        with root, root.lock(".evict.lock"):
            entries = self.entries()
            total = sum(e.size for e in entries)
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
        engine_name, record_name = self._paths(key)
        try:
            with self._entries_dir(create=False) as directory:
                directory.unlink(record_name)  # the record first: the entry stops existing at once
                directory.unlink(engine_name)
        except OSError:
            pass


__all__ = [
    "CacheEntry",
    "CacheKeyError",
    "CacheStats",
    "Directory",
    "EngineCache",
    "cache_key_file",
    "default_cache_dir",
    "engine_key",
    "file_lock",
    "load_cache_key",
]
