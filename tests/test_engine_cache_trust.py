"""The engine cache under someone who can write its directory (issue 29; docs/RELIABILITY.md, section 1b).

Trust boundary: write access to the cache directory lets someone delete or damage
entries (a miss, then a rebuild), never make a process serve an engine it did not
store, write outside the cache, or lose the engine for good. Entries are
authenticated with an HMAC under a key kept outside the cache; every directory
component is opened without following symlinks.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from runtime_lite.backends.tensorrt.engine_cache import (
    LAYOUT,
    MAX_TIMING_CACHE_BYTES,
    CacheKeyError,
    EngineCache,
    engine_key,
    load_cache_key,
)

INGREDIENTS = {"settings": {"precision": "fp32"}, "device": {"gpu": "Stand-in RTX"}}


def _key(name: bytes) -> str:
    return engine_key(name, INGREDIENTS)


def _files(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("component", ["tensorrt-engines", "tensorrt-engines/v1"])
def test_a_symlinked_component_of_the_cache_never_redirects_a_write(tmp_path, component):
    root, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / component).parent.mkdir(parents=True, exist_ok=True)
    (root / component).symlink_to(elsewhere, target_is_directory=True)
    cache = EngineCache(root)
    cache.put(_key(b"a"), b"engine A", INGREDIENTS)
    data, hit = cache.get_or_build(_key(b"b"), lambda: b"engine B", INGREDIENTS)
    assert (data, hit) == (b"engine B", False)  # still an engine: built, not stored
    assert _files(elsewhere) == []
    assert cache.stats.unusable >= 2 and cache.get(_key(b"b")) is None


def test_a_symlinked_cache_root_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "cache").symlink_to(tmp_path / "real", target_is_directory=True)
    cache = EngineCache(tmp_path / "cache")
    cache.put(_key(b"a"), b"engine A", INGREDIENTS)
    assert _files(tmp_path / "real") == [] and cache.stats.unusable == 1


def test_the_timing_cache_is_never_read_or_written_through_a_symlink(tmp_path):
    root, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    elsewhere.mkdir()
    root.mkdir()
    (root / "timing").symlink_to(elsewhere, target_is_directory=True)
    (elsewhere / "trt10-sm8.6.cache").write_bytes(b"planted timings")
    cache = EngineCache(root)
    assert cache.read_timing("trt10-sm8.6.cache") == b""
    cache.write_timing("trt10-sm8.6.cache", b"new timings")
    assert (elsewhere / "trt10-sm8.6.cache").read_bytes() == b"planted timings"
    # a symlinked file inside a real timing directory is not read either
    (root / "timing").unlink()
    (root / "timing").mkdir()
    (root / "timing" / "trt10-sm8.6.cache").symlink_to(elsewhere / "trt10-sm8.6.cache")
    assert cache.read_timing("trt10-sm8.6.cache") == b""


def test_the_timing_cache_read_is_bounded(tmp_path):
    """A 256 MiB sparse file is refused from its size, before a byte is read."""
    import tracemalloc

    root = tmp_path / "cache"
    (root / "timing").mkdir(parents=True)
    with open(root / "timing" / "big.cache", "wb") as f:  # sparse: no disk used
        f.truncate(MAX_TIMING_CACHE_BYTES + 1)
    tracemalloc.start()
    try:
        assert EngineCache(root).read_timing("big.cache") == b""
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()


def test_the_builder_keeps_its_timing_cache_inside_the_cache(tmp_path, monkeypatch):
    """aot-build's path end to end (stand-in TensorRT): a planted <cache>/timing link receives nothing."""
    from tests.tensorrt_standin import StandinMachine
    from tests.test_tensorrt_standin import _build

    machine = StandinMachine(monkeypatch, tmp_path / "builds.log")
    machine.become()
    try:
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (tmp_path / "cache").mkdir()
        (tmp_path / "cache" / "timing").symlink_to(elsewhere, target_is_directory=True)
        _build(tmp_path)
        assert machine.builds == 1 and _files(elsewhere) == []
    finally:
        machine.close()


def test_a_forged_entry_is_not_served(tmp_path):
    """Copy A's engine over B's and write B's record with A's sha256 and size: B must not get A's engine."""
    cache = EngineCache(tmp_path)
    key_a, key_b = _key(b"a"), _key(b"b")
    cache.put(key_a, b"engine A", INGREDIENTS)
    cache.put(key_b, b"engine B", INGREDIENTS)
    directory = tmp_path / LAYOUT
    (directory / f"{key_b}.engine").write_bytes((directory / f"{key_a}.engine").read_bytes())
    record = json.loads((directory / f"{key_a}.json").read_text())
    record["key"] = key_b  # what the writer of the cache can say; only the HMAC it cannot compute
    (directory / f"{key_b}.json").write_text(json.dumps(record))
    assert EngineCache(tmp_path).get(key_b) is None
    assert EngineCache(tmp_path).get(key_a) == b"engine A"


def test_an_entry_written_with_another_key_file_is_not_served(tmp_path):
    EngineCache(tmp_path / "cache", key_file=tmp_path / "other.key").put(_key(b"a"), b"engine A", INGREDIENTS)
    assert EngineCache(tmp_path / "cache").get(_key(b"a")) is None


@pytest.mark.parametrize("problem", ["symlink", "group-writable", "world-readable", "inside-cache", "short"])
def test_an_unsafe_key_file_is_refused_and_nothing_is_served(tmp_path, problem):
    key_file = tmp_path / "keys" / "engine-cache.key"
    load_cache_key(key_file)  # created 0600
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    root = tmp_path / "cache"
    if problem == "symlink":
        (tmp_path / "link.key").symlink_to(key_file)
        key_file = tmp_path / "link.key"
    elif problem == "group-writable":
        key_file.chmod(0o620)
    elif problem == "world-readable":
        key_file.chmod(0o604)
    elif problem == "inside-cache":
        root = tmp_path / "keys"
    else:
        key_file.write_bytes(b"short")
    with pytest.raises(CacheKeyError):
        load_cache_key(key_file, root)
    cache = EngineCache(root, key_file=key_file)
    data, hit = cache.get_or_build(_key(b"a"), lambda: b"engine A", INGREDIENTS)
    assert (data, hit) == (b"engine A", False) and cache.stats.unusable >= 1
    assert cache.get(_key(b"a")) is None


def test_a_directory_planted_as_a_lock_does_not_disable_the_engine(tmp_path, caplog):
    cache = EngineCache(tmp_path)
    key = _key(b"a")
    lock = tmp_path / LAYOUT / f"{key}.lock"
    (lock / "inside").mkdir(parents=True)  # non-empty: cannot simply be removed
    data, hit = cache.get_or_build(key, lambda: b"engine A", INGREDIENTS)
    assert (data, hit) == (b"engine A", False)
    assert EngineCache(tmp_path).get(key) == b"engine A"  # stored: the next process hits
    assert any(str(lock) in r.getMessage() for r in caplog.records)  # and the squatter is reported
    (lock / "inside").rmdir()
    data, hit = EngineCache(tmp_path).get_or_build(_key(b"b"), lambda: b"engine B", INGREDIENTS)
    assert data == b"engine B"


def test_an_empty_directory_planted_as_a_lock_is_removed(tmp_path):
    cache = EngineCache(tmp_path)
    key = _key(b"a")
    (tmp_path / LAYOUT / f"{key}.lock").mkdir(parents=True)
    assert cache.get_or_build(key, lambda: b"engine A", INGREDIENTS) == (b"engine A", False)
    assert (tmp_path / LAYOUT / f"{key}.lock").is_file()  # a lock file of ours took its place


def test_readers_racing_a_writer_never_drop_a_good_entry(tmp_path):
    """One writer rewrites one key with different engines (as two builds of one key do); readers
    must see a whole entry or a miss, and never drop one (the engine changes between their reads
    of the record and of the engine file: that is a race, not damage)."""
    key = _key(b"a")
    writer_cache = EngineCache(tmp_path)
    writer_cache.put(key, b"engine 0" * 1000, INGREDIENTS)
    stop = threading.Event()
    wrong: list[bytes] = []
    readers = [EngineCache(tmp_path) for _ in range(3)]

    def read(cache):
        while not stop.is_set():
            data = cache.get(key)
            if data is not None and not (data.startswith(b"engine ") and len(data) == 8000):
                wrong.append(data)

    threads = [threading.Thread(target=read, args=(c,)) for c in readers]
    for t in threads:
        t.start()
    try:
        for i in range(300):
            writer_cache.put(key, f"engine {i % 10}".encode() * 1000, INGREDIENTS)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert wrong == []
    assert sum(c.stats.dropped for c in readers) == 0


def test_a_new_key_file_is_created_private(tmp_path, monkeypatch):
    monkeypatch.setenv("AOT_CACHE_KEY_FILE", str(tmp_path / "conf" / "k"))
    EngineCache(tmp_path / "cache").put(_key(b"a"), b"engine A", INGREDIENTS)
    assert (tmp_path / "conf" / "k").stat().st_mode & 0o777 == 0o600
    assert os.path.getsize(tmp_path / "conf" / "k") == 32


# -- issue 40: the timing cache through a link, a key file in a directory others can write -------------------


def test_the_timing_cache_planted_as_a_link_to_a_secret_is_never_opened(tmp_path):
    """The issue's name exactly; the audit hook sees no open of the secret, only of the link (refused: ELOOP)."""
    import subprocess
    import sys

    secret = tmp_path / "secret"
    secret.write_bytes(b"SECRET")
    root = tmp_path / "cache"
    (root / "timing").mkdir(parents=True)
    (root / "timing" / "trt10.13.0-sm9.0.cache").symlink_to(secret)
    child = f"""
import sys
opened = []
sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == "open" else None)
from runtime_lite.backends.tensorrt.engine_cache import EngineCache
data = EngineCache({str(root)!r}, key_file={str(tmp_path / "k.key")!r}).read_timing("trt10.13.0-sm9.0.cache")
print(data == b"" and {str(secret)!r} not in opened)
"""
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "True", result.stdout + result.stderr


def test_a_timing_cache_hard_linked_or_owned_by_another_user_is_not_read(tmp_path, monkeypatch):
    secret = tmp_path / "secret"
    secret.write_bytes(b"SECRET")
    root = tmp_path / "cache"
    (root / "timing").mkdir(parents=True)
    os.link(secret, root / "timing" / "trt10-sm8.6.cache")  # another name of a file elsewhere
    cache = EngineCache(root, key_file=tmp_path / "k.key")
    assert cache.read_timing("trt10-sm8.6.cache") == b""
    (root / "timing" / "trt10-sm8.6.cache").unlink()
    (root / "timing" / "trt10-sm8.6.cache").write_bytes(b"timings")
    assert cache.read_timing("trt10-sm8.6.cache") == b"timings"  # this user's own, single name: read
    if os.geteuid() == 0:  # root (CI containers) may hand the file to someone else
        os.chown(root / "timing" / "trt10-sm8.6.cache", 4242, -1)
    else:  # the file as another user's
        monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 4242)
    assert cache.read_timing("trt10-sm8.6.cache") == b""


def test_a_key_file_in_a_directory_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    key_file = shared / "engine-cache.key"
    load_cache_key(key_file)
    shared.chmod(0o777)  # world-writable, no sticky bit: anyone may swap the key
    try:
        with pytest.raises(CacheKeyError, match="writable by others"):
            load_cache_key(key_file)
        shared.chmod(0o1777)  # sticky, as /tmp: only the owner may rename it
        assert len(load_cache_key(key_file)) == 32
    finally:
        shared.chmod(0o700)
