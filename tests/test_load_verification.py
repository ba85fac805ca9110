"""A verifying load whose weight hashes run beside the backends' initialisation (issue 27, load time).

What verification guarantees does not change: a corrupt blob still fails ``load`` with the
one-line "bundle blob N checksum mismatch", no Module comes back, no hashing thread is left
running, and a payload a backend parses (a recipe, a plan record) is verified before the
backend sees it. Only payloads a backend declares plain tensors (``Backend.tensor_payloads``)
are handed over while their hash still runs. Corruption here is a real flipped byte in a real
bundle file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import sys
import threading
import time

import msgpack
import numpy as np
import pytest

import aot
import runtime_lite
import runtime_lite.backends.onnxruntime as onnxruntime_backend
from runtime_lite import BundleError
from runtime_lite.backends import Backend, register_backend
from runtime_lite.errors import PlacementError
from runtime_lite.execution.module import _tensor_only_blobs
from runtime_lite.format import hashing, reader, source
from runtime_lite.format.hashing import PendingHashes
from runtime_lite.format.reader import DEFER_MIN_BYTES
from tests.helpers import onnxruntime_outputs, wide_model

X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
VERIFY_THREAD = "runtime_lite-verify"


@pytest.fixture(scope="module")
def delegated():
    """(the model, its onnxruntime build)."""
    model = wide_model()
    return model, aot.build(model, targets=["onnxruntime"], log=None)


def _layout(data: bytes) -> tuple[dict, int]:
    """(the header as written, where the data section starts)."""
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(data[: 1 << 20])
    _, _, header, _, _ = (unpacker.unpack() for _ in range(5))  # magic, version, header, digest, padding
    return msgpack.unpackb(header, raw=False), unpacker.tell()


def _payload(build, key: str) -> int:
    (module,) = build.header["modules"]
    return module["payloads"][key]


def _damaged(build, tmp_path, blob: int, where: int = -1):
    """The bundle file with one byte of ``blob`` flipped (``where``: its offset inside the blob)."""
    data = bytearray(build.to_bytes())
    header, start = _layout(bytes(data))
    record = header["blobs"][blob]
    data[start + record["offset"] + (where % record["size"])] ^= 0x40
    path = tmp_path / "damaged.aotb"
    path.write_bytes(bytes(data))
    return path


@pytest.fixture(autouse=True)
def two_cpus(monkeypatch):
    """Test double for a machine of at least two CPUs (with one, nothing overlaps and nothing is deferred)."""
    cpus = max(2, hashing.usable_cpus())
    monkeypatch.setattr(reader, "usable_cpus", lambda: cpus)
    monkeypatch.setattr(hashing, "usable_cpus", lambda: cpus)


def _verify_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == VERIFY_THREAD]


@pytest.fixture
def sessions(monkeypatch):
    """Spy on the onnxruntime backend: each session built, whether it was closed, and the hashing threads
    alive while it was built."""
    built: list[dict] = []
    real = onnxruntime_backend.Session

    class SpiedSession(real):
        def __init__(self, *args, **kwargs):
            record = {"hashing": len(_verify_threads()), "closed": False}
            built.append(record)
            super().__init__(*args, **kwargs)
            self._record = record

        def close(self):
            self._record["closed"] = True
            super().close()

    monkeypatch.setattr(onnxruntime_backend, "Session", SpiedSession)
    return built


@pytest.fixture
def hashing_waits_for_the_session(monkeypatch):
    """Test double for a busy machine's scheduler: each hashing thread starts only once a session is being built
    (or after 30 s). On a loaded 2-core machine the real threads could finish before the session starts, or not
    start until it is built; holding them makes "the session is built while the hash runs" a property of the load's
    order alone: a load that waited for the hash before building the session would see no hashing thread."""
    session_started = threading.Event()
    real_hash, real_session = PendingHashes._hash, onnxruntime_backend.Session

    def held_hash(self, share):
        session_started.wait(timeout=30)
        real_hash(self, share)

    class SignallingSession(real_session):
        def __init__(self, *args, **kwargs):
            session_started.set()
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(PendingHashes, "_hash", held_hash)
    monkeypatch.setattr(onnxruntime_backend, "Session", SignallingSession)


def test_the_weights_are_hashed_while_the_session_is_built_and_the_load_still_verifies(
    delegated, tmp_path, hashing_waits_for_the_session, sessions
):
    model, build = delegated
    weights = _payload(build, "fallback_weights")
    header, _ = _layout(build.to_bytes())
    assert _tensor_only_blobs(header) == {weights}
    assert header["blobs"][weights]["size"] >= DEFER_MIN_BYTES
    path = tmp_path / "m.aotb"
    build.save(path)
    module = runtime_lite.load(path)
    assert sessions[0]["hashing"] >= 1  # the session was built while the weights' hash ran
    assert not _verify_threads()  # and load returned only after it finished
    assert np.allclose(module.run({"x": X})[0], onnxruntime_outputs(model, {"x": X})[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("where", [0, -1])
def test_a_corrupt_weight_blob_fails_the_load_as_before_and_leaves_nothing_running(
    delegated, tmp_path, sessions, where
):
    _, build = delegated
    weights = _payload(build, "fallback_weights")
    with pytest.raises(BundleError) as info:
        runtime_lite.load(_damaged(build, tmp_path, weights, where))
    assert str(info.value) == f"bundle blob {weights} checksum mismatch (the file is corrupt)"
    assert not _verify_threads()
    assert sessions and all(s["closed"] for s in sessions)  # the session built over the bad weights is gone


@pytest.mark.parametrize("payload", ["recipe", "fallback"])
def test_a_corrupt_structural_payload_is_refused_before_the_backend_sees_it(delegated, tmp_path, monkeypatch, payload):
    _, build = delegated
    initialised = []
    monkeypatch.setattr(onnxruntime_backend.OnnxRuntimeBackend, "init", lambda *a: initialised.append(a))
    blob = _payload(build, payload)
    with pytest.raises(BundleError) as info:
        runtime_lite.load(_damaged(build, tmp_path, blob))
    assert str(info.value) == f"bundle blob {blob} checksum mismatch (the file is corrupt)"
    assert initialised == []  # the backend never got the module: nothing parsed, nothing handed to onnxruntime
    assert not _verify_threads()


def test_the_checksum_error_wins_over_what_a_backend_made_of_the_corrupt_weights(delegated, tmp_path, monkeypatch):
    """The backend fails first (here: onnxruntime is required but missing); the corruption is the cause."""
    _, build = delegated
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # test double: a host without onnxruntime
    intact = tmp_path / "intact.aotb"
    build.save(intact)
    damaged = _damaged(build, tmp_path, _payload(build, "fallback_weights"))
    with pytest.raises(PlacementError):
        runtime_lite.load(intact, require="onnxruntime")
    with pytest.raises(BundleError, match="checksum mismatch"):
        runtime_lite.load(damaged, require="onnxruntime")
    assert not _verify_threads()


def test_with_one_cpu_every_blob_is_verified_before_the_backends_start(delegated, tmp_path, sessions, monkeypatch):
    _, build = delegated
    monkeypatch.setattr(reader, "usable_cpus", lambda: 1)
    path = tmp_path / "m.aotb"
    build.save(path)
    runtime_lite.load(path)
    assert sessions[0]["hashing"] == 0
    weights = _payload(build, "fallback_weights")
    with pytest.raises(BundleError, match=f"^bundle blob {weights} checksum mismatch"):
        runtime_lite.load(_damaged(build, tmp_path, weights))
    assert len(sessions) == 1  # refused before any session


def test_an_interrupt_during_initialisation_stops_the_hashing(delegated, tmp_path, monkeypatch):
    _, build = delegated
    path = tmp_path / "m.aotb"
    build.save(path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(onnxruntime_backend, "recipe_session", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runtime_lite.load(path)
    assert not _verify_threads()


# -- which blobs may wait: the declaration, and every other use of a blob ------------------------------


class _NoDeclaration(Backend):
    name = "test-undeclared"


def test_only_payloads_a_backend_declares_tensors_are_deferred_and_never_a_shared_blob(delegated):
    _, build = delegated
    header, _ = _layout(build.to_bytes())
    weights = _payload(build, "fallback_weights")
    register_backend(_NoDeclaration())
    module = header["modules"][0]
    for changed, expected in [
        ({**header, "modules": [{**module, "backend": "test-undeclared"}]}, set()),  # declares nothing
        ({**header, "modules": [{**module, "backend": "not-installed"}]}, set()),
        # the weights blob also named as another module's recipe, or as a host-plan constant
        ({**header, "modules": [module, {**module, "payloads": {"recipe": weights}}]}, set()),
        ({**header, "constants": [*header.get("constants", []), {"blob": weights}]}, set()),
        ({**header, "modules": "garbage"}, set()),
        ({**header, "modules": [{**module, "payloads": {"fallback_weights": [weights]}}]}, set()),
        ({**header, "modules": [module, 7]}, set()),
        ({**header, "constants": [{"blob": [weights]}, {"blob": {}}, "x"]}, {weights}),  # refused later, by name
        ({**header, "modules": [{**module, "payloads": {**module["payloads"], "recipe": [1]}}]}, {weights}),
    ]:
        assert _tensor_only_blobs(changed) == expected
    assert _tensor_only_blobs(header) == {weights}
    assert Backend.tensor_payloads == frozenset()  # the default: everything verified first


def test_pending_hashes_name_the_first_bad_blob_and_cancel_between_chunks(monkeypatch):
    blobs = [np.full(n, i, np.uint8).tobytes() for i, n in enumerate([3 << 20, 1 << 20, 2 << 20])]
    jobs = [(i, memoryview(b), hashlib.sha256(b).digest()) for i, b in enumerate(blobs)]
    PendingHashes(jobs).wait()
    bad = [(i, view, digest if i == 0 else b"\0" * 32) for i, view, digest in jobs]
    with pytest.raises(BundleError, match=r"^bundle blob 1 checksum mismatch \(the file is corrupt\)$"):
        PendingHashes(bad).wait()
    monkeypatch.setattr(hashing, "CHUNK_BYTES", 1 << 20)
    pending = PendingHashes([(0, memoryview(bytes(64 << 20)), b"")])
    pending.cancel()
    assert not _verify_threads()


# -- a large file is read by two threads: the back half on its own ------------------------------------------


def _read_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "runtime_lite-read"]


def test_a_large_bundle_is_read_in_two_halves_and_every_byte_is_the_files(delegated, tmp_path, monkeypatch):
    """The back half (from a 2 MiB boundary) is read with ``preadv`` on its own thread while the loading thread
    reads the front; the hash of each blob still sees the file's bytes (a zero page would be a mismatch)."""
    model, build = delegated
    path = tmp_path / "m.aotb"
    build.save(path)
    size = path.stat().st_size
    real_preadv, offsets = os.preadv, []

    def spying_preadv(fd, buffers, offset):
        offsets.append((offset, threading.current_thread().name))
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(source, "PARALLEL_READ_BYTES", 1 << 20)
    monkeypatch.setattr(source, "READ_STEP", 256 << 10)
    monkeypatch.setattr(source.os, "preadv", spying_preadv)
    module = runtime_lite.load(path)
    assert offsets and offsets[0] == (size // 2 & ~((2 << 20) - 1), "runtime_lite-read")
    assert offsets[-1][0] + (256 << 10) >= size
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(module.run({"x": x})[0], onnxruntime_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-5)
    header, start = _layout(build.to_bytes())
    blob = header["blobs"][_payload(build, "fallback_weights")]
    assert start + blob["offset"] + blob["size"] - 5 >= offsets[0][0]  # the byte below lies in the back half
    with pytest.raises(BundleError, match="checksum mismatch"):
        runtime_lite.load(_damaged(build, tmp_path, _payload(build, "fallback_weights"), where=-5))
    assert not _read_threads() and not _verify_threads()


@pytest.mark.parametrize("failure", ["shrank", "io error"])
def test_a_back_half_that_fails_to_read_is_one_line_and_leaves_no_thread(delegated, tmp_path, monkeypatch, failure):
    """Test double for a file cut short (or a disk error) under the back half's thread: ``os.preadv`` fails."""
    _, build = delegated
    path = tmp_path / "m.aotb"
    build.save(path)

    def failing_preadv(fd, buffers, offset):
        if failure == "shrank":
            return 0
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(source, "PARALLEL_READ_BYTES", 1 << 20)
    monkeypatch.setattr(source.os, "preadv", failing_preadv)
    with pytest.raises(BundleError) as info:
        runtime_lite.load(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert ("shrank while it was being read" if failure == "shrank" else "Input/output error") in message
    assert not _read_threads() and not _verify_threads()


def test_a_load_that_fails_before_the_back_half_is_in_stops_its_thread(delegated, tmp_path, monkeypatch):
    """A header that fails its check ends the load while the back half is still being read (test double: a slow
    ``preadv``): its thread stops within a step and is joined before the file is closed."""
    _, build = delegated
    data = bytearray(build.to_bytes())
    _, start = _layout(bytes(data))
    data[64] ^= 0x01  # inside the header: its sha256 check fails
    path = tmp_path / "bad.aotb"
    path.write_bytes(bytes(data))
    real_preadv, calls = os.preadv, []

    def slow_preadv(fd, buffers, offset):
        calls.append(offset)
        time.sleep(0.05)
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(source, "PARALLEL_READ_BYTES", 1 << 20)
    monkeypatch.setattr(source, "READ_STEP", 64 << 10)
    monkeypatch.setattr(source.os, "preadv", slow_preadv)
    with pytest.raises(BundleError):
        runtime_lite.load(path)
    assert calls and len(calls) < ((len(data) - (len(data) // 2 & ~((2 << 20) - 1))) >> 16)  # stopped early
    assert not _read_threads()


# -- the hash follows the private read: a read that fails releases it -----------------------------------


@pytest.mark.parametrize("failure", ["shrank", "io error"])
def test_a_read_that_fails_under_a_running_hash_is_one_line_and_leaves_nothing_running(
    delegated, tmp_path, monkeypatch, failure
):
    """Test double for a file cut short (or a disk error) while it is read: ``os.readv`` stops after 2 MiB,
    once the weights' hash has started waiting for them."""
    _, build = delegated
    path = tmp_path / "m.aotb"
    build.save(path)
    real_readv, served = os.readv, [0]
    started = []

    def failing_readv(fd, buffers):
        if served[0] >= 2 << 20:
            started.append(len(_verify_threads()))
            if failure == "shrank":
                return 0
            raise OSError(errno.EIO, "Input/output error")
        count = real_readv(fd, [buffers[0][: (2 << 20) - served[0]]])
        served[0] += count
        return count

    monkeypatch.setattr(source.os, "readv", failing_readv)
    with pytest.raises(BundleError) as info:
        runtime_lite.load(path)
    message = str(info.value)
    assert "\n" not in message
    assert ("shrank while it was being read" if failure == "shrank" else "Input/output error") in message
    assert started and started[0] >= 1  # the hash was running, waiting for the bytes that never came
    assert not _verify_threads()


def test_the_hash_starts_before_the_file_is_read_and_sees_every_byte(delegated, tmp_path, monkeypatch):
    """The file is read in steps while the weights' hash follows; each byte it hashes was read first.

    Test double: a disk slower than the hash (``os.readv`` pauses 2 ms per 256 KiB step)."""
    _, build = delegated
    path = tmp_path / "m.aotb"
    build.save(path)
    real_readv = os.readv

    def slow_readv(fd, buffers):
        time.sleep(0.002)
        return real_readv(fd, buffers)

    monkeypatch.setattr(source.os, "readv", slow_readv)
    monkeypatch.setattr(source, "READ_STEP", 256 << 10)
    monkeypatch.setattr(hashing, "WAIT_BYTES", 256 << 10)
    monkeypatch.setattr(hashing, "CHUNK_BYTES", 256 << 10)
    runtime_lite.load(path)  # every chunk hashed only once read: any zero page would be a mismatch
    with pytest.raises(BundleError, match="checksum mismatch"):
        runtime_lite.load(_damaged(build, tmp_path, _payload(build, "fallback_weights"), where=3 << 20))
    assert not _verify_threads()
