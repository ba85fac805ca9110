"""The .aotb format: a valid msgpack stream, aligned checksummed blobs, deterministic, zero-copy,
and every kind of damage rejected as BundleError with a one-line reason."""

from __future__ import annotations

import copy
import hashlib
import subprocess
import sys

import msgpack
import numpy as np
import pytest

import runtime_lite
from aot.compiler import build as aot_build
from aot.packager import encode_preamble, to_bytes
from runtime_lite import BundleError
from runtime_lite import format as fmt


def rewrite(build, mutate) -> bytes:
    """Re-pack a build's bundle with a mutated header (checksums recomputed, so only the mutation is wrong)."""
    header = copy.deepcopy(build.header)
    mutate(header)
    return to_bytes(header, build.blobs)


def data_start(bundle: bytes) -> int:
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(bundle[: 1 << 20])
    for _ in range(5):  # magic, version, header, digest, padding
        unpacker.unpack()
    return unpacker.tell()


def header_of(bundle: bytes) -> dict:
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(bundle[: 1 << 20])
    unpacker.unpack(), unpacker.unpack()
    return msgpack.unpackb(unpacker.unpack(), raw=False)


def assert_bundle_error(source, *words):
    with pytest.raises(BundleError) as info:
        runtime_lite.load(source)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    return message


def test_bundle_is_a_valid_msgpack_stream(small_bundle):
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(small_bundle))
    unpacker.feed(small_bundle)
    objects = list(unpacker)
    assert objects[0] == fmt.MAGIC
    assert objects[1] == [fmt.FORMAT_MAJOR, fmt.FORMAT_MINOR]
    assert hashlib.sha256(objects[2]).digest() == objects[3]
    header = msgpack.unpackb(objects[2], raw=False)
    assert header["required_features"] == ["host-plan/1"]
    assert {"signature", "plan", "constants", "blobs", "producer", "modules"} <= set(header)
    payloads = [o for o in objects[5:] if isinstance(o, bytes)]
    for record in header["blobs"]:
        assert any(len(p) == record["size"] and hashlib.sha256(p).digest() == record["sha256"] for p in payloads)


def test_blobs_are_aligned_and_checksummed(small_bundle):
    start = data_start(small_bundle)
    header = header_of(small_bundle)
    assert start % fmt.ALIGNMENT == 0
    assert header["blobs"]
    for record in header["blobs"]:
        offset = start + record["offset"]
        assert offset % fmt.ALIGNMENT == 0
        assert hashlib.sha256(small_bundle[offset : offset + record["size"]]).digest() == record["sha256"]


def test_same_input_gives_byte_identical_bundle(small_model, small_bundle, tmp_path):
    import aot

    assert aot.build(small_model).to_bytes() == small_bundle
    model_path = tmp_path / "m.onnx"
    model_path.write_bytes(small_model.SerializeToString())
    out = tmp_path / "fresh.aotb"
    subprocess.run([sys.executable, "-m", "aot.cli.build", str(model_path), "-o", str(out), "-q"], check=True)
    again = tmp_path / "again.aotb"
    subprocess.run([sys.executable, "-m", "aot.cli.build", str(model_path), "-o", str(again), "-q"], check=True)
    assert out.read_bytes() == again.read_bytes()


def test_constants_are_mapped_not_copied(small_build, tmp_path):
    path = tmp_path / "m.aotb"
    small_build.save(path)
    module = runtime_lite.load(path)
    constants = [c for c in module._plan._template if c is not None]
    assert constants
    for array in constants:
        assert not array.flags.writeable and not array.flags.owndata
        base = array
        while getattr(base, "base", None) is not None and not isinstance(base, memoryview):
            base = base.base
        assert isinstance(base, memoryview) and base.obj.__class__.__name__ == "mmap"


def test_path_and_bytes_load_the_same(small_build, small_bundle, small_input, tmp_path):
    path = tmp_path / "m.aotb"
    small_build.save(path)
    a = runtime_lite.load(path).run([small_input])[0]
    b = runtime_lite.load(small_bundle).run([small_input])[0]
    np.testing.assert_array_equal(a, b)


# -- damage -----------------------------------------------------------------------------


def test_not_a_bundle():
    assert_bundle_error(b"PK\x03\x04 this is a zip", "bad magic")
    assert_bundle_error(b"", "bad magic")


def test_missing_file_and_directory(tmp_path):
    assert_bundle_error(tmp_path / "absent.aotb", "cannot read bundle", "absent.aotb")
    assert_bundle_error(tmp_path, "cannot read bundle")
    (tmp_path / "empty.aotb").write_bytes(b"")
    assert_bundle_error(tmp_path / "empty.aotb", "empty")


@pytest.mark.parametrize("fraction", [0.001, 0.01, 0.05, 0.3, 0.7, 0.999])
def test_truncated_bundle(small_bundle, fraction):
    cut = max(len(fmt.MAGIC_BYTES) + 1, int(len(small_bundle) * fraction))
    assert_bundle_error(small_bundle[:cut])


def test_truncation_at_every_preamble_boundary(small_bundle):
    start = data_start(small_bundle)
    for cut in range(len(fmt.MAGIC_BYTES), start + 8):
        assert_bundle_error(small_bundle[:cut])


def test_header_bit_flip_is_caught_by_its_checksum(small_bundle):
    damaged = bytearray(small_bundle)
    damaged[200] ^= 0x10
    assert_bundle_error(bytes(damaged))


def test_blob_bit_flip_is_caught_by_its_checksum(small_bundle):
    start = data_start(small_bundle)
    record = header_of(small_bundle)["blobs"][0]
    damaged = bytearray(small_bundle)
    damaged[start + record["offset"] + 3] ^= 0x01
    assert_bundle_error(bytes(damaged), "blob 0 checksum mismatch")
    runtime_lite.load(bytes(damaged), verify=False)  # an explicit opt-out skips blob hashing


def test_large_bundles_are_hashed_in_parallel_and_still_name_the_bad_blob():
    """Above PARALLEL_HASH_BYTES the blobs are hashed on a thread pool; a flip in any of them is still found."""
    from onnx import helper

    from runtime_lite.format.hashing import PARALLEL_HASH_BYTES
    from tests.helpers import make_model

    weights = {f"w{i}": np.full((1024, 1024), i, np.float32) for i in range(3)}  # 12 MB in three blobs
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["a"]), helper.make_node("MatMul", ["a", "w1"], ["b"]),
             helper.make_node("MatMul", ["b", "w2"], ["y"])]  # fmt: skip
    bundle = aot_build(make_model(nodes, {"x": np.ones((1, 1024), np.float32)}, ["y"], weights)).to_bytes()
    assert len(bundle) > PARALLEL_HASH_BYTES
    runtime_lite.load(bundle)
    records = header_of(bundle)["blobs"]
    last = max(range(len(records)), key=lambda i: records[i]["offset"])
    damaged = bytearray(bundle)
    damaged[data_start(bundle) + records[last]["offset"] + records[last]["size"] - 1] ^= 0x01
    assert_bundle_error(bytes(damaged), f"blob {last} checksum mismatch")


def test_newer_major_version_is_refused(small_bundle):
    damaged = bytearray(small_bundle)
    damaged[len(fmt.MAGIC_BYTES) + 1] = fmt.FORMAT_MAJOR + 1
    assert_bundle_error(bytes(damaged), "newer", "upgrade runtime_lite")


def test_unknown_required_feature_is_refused(small_build):
    bundle = rewrite(small_build, lambda h: h["required_features"].append("quantum-plan/9"))
    assert_bundle_error(bundle, "quantum-plan/9")


def test_blob_pointing_outside_the_file(small_build):
    bundle = rewrite(small_build, lambda h: None)
    header = header_of(bundle)
    header["blobs"][0]["offset"] = 1 << 40
    assert_bundle_error(repack_header(bundle, header), "blobs[0]", "past the end")


def repack_header(bundle: bytes, header: dict) -> bytes:
    """Swap the header of an existing bundle, keeping its data section (offsets stay as given)."""
    return encode_preamble(header) + bundle[data_start(bundle) :]


def add_unwritten_slot(header: dict, use) -> None:
    """Grow the plan by one slot that no instruction writes, and hand it to ``use``.

    The plan reuses slots, so it writes more values than it has slots and one more
    slot stays within the bound the reader enforces."""
    header["plan"]["num_slots"] += 1
    use(header["plan"]["num_slots"] - 1)


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda h: h["constants"][0].update(shape=[1 << 20, 1 << 20]), ["constants[0]"]),
        (lambda h: h["constants"][0].update(dtype="complex128"), ["constants[0].dtype", "complex128"]),
        (lambda h: h["constants"][0].update(blob=999), ["constants[0].blob", "out of range"]),
        (lambda h: h["constants"][0].update(shape="big"), ["constants[0].shape"]),
        (lambda h: h["signature"]["inputs"][0].update(shape=[-1, 3]), ["signature.inputs[0].shape[0]", "negative"]),
        (lambda h: h.pop("plan"), ["header.plan", "missing"]),
        (lambda h: h["plan"].update(num_slots=1 << 30), ["plan.num_slots", "exceeds"]),
        (lambda h: h["plan"]["instructions"][0].update(op="teleport"), ["teleport"]),
        (lambda h: h["plan"]["instructions"][0]["attrs"].update(warp=9), ["unexpected keyword argument 'warp'"]),
        (lambda h: h["plan"]["instructions"][0]["attrs"].pop("strides"), ["missing a required argument: 'strides'"]),
        (lambda h: h["plan"]["instructions"][0].update({"in": [999]}), ["plan.instructions[0].in[0]"]),
        (
            lambda h: add_unwritten_slot(h, lambda slot: h["plan"]["instructions"][0]["in"].__setitem__(0, slot)),
            ["before it is written"],
        ),
        (lambda h: h["plan"]["instructions"][0].update(inplace=5), ["inplace"]),
        (lambda h: add_unwritten_slot(h, lambda slot: h["plan"].update(outputs=[slot])), ["never written"]),
        (lambda h: h["modules"].append({"id": "m0", "backend": "warp-drive"}), ["warp-drive", "install"]),
        (lambda h: h.update(required_features="all"), ["required_features"]),
        (lambda h: h["plan"]["instructions"][0].update(op=True), ["plan.instructions[0].op", "str"]),
    ],
)
def test_bad_header_fields_are_named(small_build, mutate, words):
    assert_bundle_error(rewrite(small_build, mutate), *words)
