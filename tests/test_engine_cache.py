"""The engine cache: keys that cannot serve a wrong engine, one build across processes, corruption, LRU."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from runtime_lite.backends.tensorrt.engine_cache import EngineCache, default_cache_dir, engine_key
from tests import hostile
from tests.helpers import tensorrt_recipe_bytes

INGREDIENTS = {
    "precision": "fp32",
    "profiles": {"x": [[1, 3, 8, 8], [1, 3, 8, 8], [1, 3, 8, 8]]},
    "workspace": 1 << 30,
    "hardware_compatibility": "none",
    "version_compatible": False,
    "device": {
        "tensorrt": "10.13.0",
        "cuda": "12080",
        "gpu": "NVIDIA H100 80GB HBM3",
        "compute_capability": "9.0",
        "platform": "linux-x86_64",
    },
}


def _changed(path: tuple[str, ...], value):
    ingredients = {k: (dict(v) if isinstance(v, dict) else v) for k, v in INGREDIENTS.items()}
    target = ingredients
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return ingredients


@pytest.mark.parametrize(
    "path, value",
    [
        (("precision",), "fp16"),
        (("profiles",), {"x": [[1, 3, 8, 8], [4, 3, 8, 8], [8, 3, 8, 8]]}),
        (("workspace",), 1 << 28),
        (("hardware_compatibility",), "ampere_plus"),
        (("version_compatible",), True),
        (("device", "tensorrt"), "10.13.1"),
        (("device", "cuda"), "13000"),
        (("device", "gpu"), "NVIDIA A100-SXM4-80GB"),
        (("device", "compute_capability"), "8.0"),
        (("device", "platform"), "linux-aarch64"),
    ],
)
def test_every_ingredient_changes_the_key(path, value):
    recipe = tensorrt_recipe_bytes(seed=0)
    assert engine_key(recipe, INGREDIENTS) != engine_key(recipe, _changed(path, value))


def test_a_changed_weight_changes_the_key():
    """ORT's TensorRT EP and Torch-TensorRT key on the graph alone and serve the other model's engine."""
    a, b = tensorrt_recipe_bytes(seed=0), tensorrt_recipe_bytes(seed=0, nudge_weight=True)
    assert a != b
    assert engine_key(a, INGREDIENTS) != engine_key(b, INGREDIENTS)
    assert engine_key(a, INGREDIENTS) == engine_key(tensorrt_recipe_bytes(seed=0), dict(INGREDIENTS))


def test_put_get_round_trip_and_index_record(tmp_path):
    cache = EngineCache(tmp_path)
    key = engine_key(b"recipe", INGREDIENTS)
    assert cache.get(key) is None
    cache.put(key, b"engine bytes", INGREDIENTS)
    assert cache.get(key) == b"engine bytes"
    (entry,) = cache.entries()
    assert entry.key == key and entry.size == len(b"engine bytes")
    assert entry.ingredients["device"]["gpu"] == INGREDIENTS["device"]["gpu"]
    assert sorted(p.suffix for p in cache.directory.iterdir()) == [".engine", ".json", ".lock"]  # the key's lock


def test_a_corrupt_entry_is_dropped_and_rebuilt(tmp_path):
    cache = EngineCache(tmp_path)
    key = engine_key(b"recipe", INGREDIENTS)
    cache.put(key, b"good engine" * 100, INGREDIENTS)
    engine_path = cache.directory / f"{key}.engine"
    data = bytearray(engine_path.read_bytes())
    data[37] ^= 0x01
    engine_path.write_bytes(bytes(data))
    builds = []
    engine, hit = cache.get_or_build(key, lambda: builds.append(1) or b"rebuilt engine", INGREDIENTS)
    assert (engine, hit, builds) == (b"rebuilt engine", False, [1])
    assert cache.stats.dropped == 1
    assert cache.get(key) == b"rebuilt engine"


def test_a_truncated_or_missing_record_is_a_miss(tmp_path):
    cache = EngineCache(tmp_path)
    key = engine_key(b"recipe", INGREDIENTS)
    cache.put(key, b"engine", INGREDIENTS)
    record = cache.directory / f"{key}.json"
    record.write_text(record.read_text()[:10])
    assert cache.get(key) is None
    assert cache.stats.dropped == 1  # a damaged record is dropped with its engine, not left to fail again
    assert not (cache.directory / f"{key}.engine").exists()
    cache.put(key, b"engine", INGREDIENTS)
    record.unlink()
    assert cache.get(key) is None
    assert cache.entries() == []


def test_least_recently_used_entries_are_evicted_beyond_the_budget(tmp_path):
    cache = EngineCache(tmp_path, max_bytes=2500)
    keys = [engine_key(bytes([i]), INGREDIENTS) for i in range(3)]
    for i, key in enumerate(keys[:2]):
        cache.put(key, bytes(1000), INGREDIENTS)
        os.utime(cache.directory / f"{key}.json", (100 + i, 100 + i))
    assert cache.get(keys[0]) is not None  # keys[0] is now the most recently used
    cache.put(keys[2], bytes(1000), INGREDIENTS)
    assert cache.get(keys[1]) is None
    assert cache.get(keys[0]) is not None and cache.get(keys[2]) is not None
    assert cache.stats.evicted == 1


def test_bad_keys_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="64 hex digits"):
        EngineCache(tmp_path).get("../../etc/passwd")


def test_default_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("AOT_CACHE_DIR", str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("AOT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "aot"


def _populate(root: str, log: str, start: float) -> bytes:
    def build() -> bytes:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.5)  # long enough for every other process to arrive while this one builds
        return b"the engine" * 1000

    time.sleep(max(0.0, start - time.time()))
    engine, _ = EngineCache(root).get_or_build(engine_key(b"recipe", INGREDIENTS), build, INGREDIENTS)
    return engine


def test_four_processes_missing_at_once_build_once(tmp_path):
    log = tmp_path / "builds.log"
    start = time.time() + 1.0
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        engines = pool.starmap(_populate, [(str(tmp_path / "cache"), str(log), start)] * 4)
    assert len(log.read_text().splitlines()) == 1
    assert engines == [b"the engine" * 1000] * 4
    assert len(EngineCache(tmp_path / "cache").entries()) == 1
    assert not list((tmp_path / "cache").rglob("*.tmp"))


WRITER = """
import sys
from runtime_lite.backends.tensorrt.engine_cache import EngineCache, engine_key
cache = EngineCache(sys.argv[1])
for i in range(1000):
    data = bytes([i % 251]) * (8 << 20)
    cache.put(engine_key(bytes([i % 251]), {}), data, {"i": i})
"""


def test_killed_cache_writes_never_leave_an_entry_that_reads_wrong(tmp_path):
    """SIGKILL a process writing 8 MB entries at random moments: every entry reads back exact, or is a miss."""
    import random
    import signal
    import subprocess
    import sys

    rng = random.Random(0)
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)])
        time.sleep(rng.uniform(0.3, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    cache = EngineCache(tmp_path)
    entries = cache.entries()
    assert entries, "the writer never completed an entry; the test proved nothing"
    for i in range(251):
        data = cache.get(engine_key(bytes([i]), {}))
        assert data is None or data == bytes([i]) * (8 << 20)
    assert cache.stats.dropped == 0  # the record is written last: no entry was ever visible half-written


# -- a shared directory anyone may write to ------------------------------------------------------------


def _stored(tmp_path, data: bytes = b"engine A") -> tuple[EngineCache, str]:
    cache = EngineCache(tmp_path)
    key = engine_key(data, INGREDIENTS)
    cache.put(key, data, INGREDIENTS)
    return cache, key


def test_an_entry_copied_under_another_key_is_not_served(tmp_path):
    cache, key_a = _stored(tmp_path)
    key_b = engine_key(b"engine B", INGREDIENTS)
    for suffix in ("engine", "json"):
        (cache.directory / f"{key_b}.{suffix}").write_bytes((cache.directory / f"{key_a}.{suffix}").read_bytes())
    assert cache.get(key_b) is None
    assert cache.stats.dropped == 1
    assert cache.get(key_a) == b"engine A"


def test_an_engine_longer_than_its_record_is_not_served(tmp_path):
    cache, key = _stored(tmp_path)
    with open(cache.directory / f"{key}.engine", "ab") as f:
        f.write(b"appended")
    assert cache.get(key) is None
    assert cache.stats.dropped == 1


@pytest.mark.parametrize("target", ["/dev/zero", "outside"])
def test_an_engine_file_symlinked_elsewhere_is_never_read(tmp_path, target):
    cache, key = _stored(tmp_path / "cache")
    outside = tmp_path / "outside"
    outside.write_bytes(b"engine A")  # even the right bytes, through a link, are not ours
    engine = cache.directory / f"{key}.engine"
    engine.unlink()
    engine.symlink_to(outside if target == "outside" else target)
    outcome = hostile.isolated(cache.get, key, timeout=20)
    assert outcome == ("returned", None)
    assert outside.read_bytes() == b"engine A"


def test_a_fifo_as_engine_or_record_neither_blocks_nor_is_served(tmp_path):
    cache, key = _stored(tmp_path)
    for suffix in ("engine", "json"):
        cache.put(key, b"engine A", INGREDIENTS)
        path = cache.directory / f"{key}.{suffix}"
        path.unlink()
        os.mkfifo(path)
        assert hostile.isolated(cache.get, key, timeout=20) == ("returned", None)


def test_stray_files_are_ignored_and_counted(tmp_path):
    cache, key = _stored(tmp_path)
    stray_key = engine_key(b"stray", INGREDIENTS)
    strays = {
        "notes.json": b'{"size": 5}',
        f"{stray_key}.json": b'{"key": "%s", "size": Infinity, "sha256": "%s"}' % (stray_key.encode(), b"0" * 64),
        f"{'f' * 64}.json": b"[1, 2, 3]",
        "README": b"hello",
        f"{'e' * 64}.json": b"[" * 100_000,
    }
    for name, data in strays.items():
        (cache.directory / name).write_bytes(data)
    (cache.directory / "subdir.json").mkdir()
    assert [e.key for e in cache.entries()] == [key]
    assert cache.stats.ignored == len(strays) + 1
    other = engine_key(b"engine C", INGREDIENTS)
    cache.put(other, b"engine C", INGREDIENTS)  # eviction walks the strays without failing
    assert cache.get(other) == b"engine C"
    assert cache.get(stray_key) is None  # a record with an impossible size is dropped, not trusted


def test_a_planted_lock_symlink_creates_nothing_outside_the_cache(tmp_path):
    cache = EngineCache(tmp_path / "cache")
    cache.directory.mkdir(parents=True)
    key = engine_key(b"recipe", INGREDIENTS)
    victim = tmp_path / "victim-created-by-cache"
    (cache.directory / f"{key}.lock").symlink_to(victim)
    engine, hit = cache.get_or_build(key, lambda: b"built", INGREDIENTS)
    assert (engine, hit) == (b"built", False)
    assert not victim.exists()
    assert cache.get(key) == b"built"
