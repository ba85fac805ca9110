"""Reading and verifying .aotb bundles (the layout is in docs/bundle-format.md).

Nothing in a bundle is trusted until checked: the magic and version before the
header is parsed, the header's sha256 before it is decoded, every declared size
against the file before anything is allocated, and each blob's sha256 before its
bytes are used (or, for the weights a backend declares plain tensors, while they are
handed over and before ``load`` returns: runtime_lite/format/hashing.py). A path is
read once into private read-only memory (or, with ``map_file``, mapped;
runtime_lite/format/source.py says why), and constants become read-only numpy views
of that buffer: blobs are never copied again.
"""

from __future__ import annotations

import gc
import hashlib
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Union

import msgpack
import numpy as np

from runtime_lite import format as fmt
from runtime_lite.errors import BundleError
from runtime_lite.format.fields import expect, expect_index, expect_key
from runtime_lite.format.hashing import PendingHashes, usable_cpus, verify_now
from runtime_lite.format.records import BlobRecord, HostConstant
from runtime_lite.format.source import BundleBuffer, open_bundle

BundleSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


@dataclass
class Bundle:
    """A verified bundle: its header and a zero-copy view of each blob."""

    version: tuple[int, int]
    header: dict[str, Any]
    blobs: list[memoryview]
    constants: list[np.ndarray]
    buffer: BundleBuffer
    #: sha256 of the header, hex. The header holds every blob's sha256, so this names the whole bundle.
    digest: str
    #: Blobs whose sha256 is still being checked (``read_bundle(defer=...)``); None when every blob is done.
    pending: PendingHashes | None = None

    @property
    def source(self) -> str | None:
        """The path the bundle was read from; None for bytes."""
        return self.buffer.path


#: Decoded containers and their items, summed over one record: what a record may cost in Python
#: objects, whatever its size in bytes (16 MB of empty maps would otherwise decode to 1.3 GB).
MAX_DECODED_ITEMS = 4_000_000


def _unpacker(stream, max_bytes: int) -> msgpack.Unpacker:
    # Explicit limits: a hostile length prefix must fail, not allocate. Reads of 64 KiB, not msgpack's
    # default 1 MiB: a small bundle's preamble is a few KiB, and each read copies (and, mapped, faults in) it.
    limits = {**_LIMITS, "max_bin_len": max_bytes}
    return msgpack.Unpacker(
        stream,
        raw=False,
        strict_map_key=True,
        max_buffer_size=max_bytes,
        read_size=min(max_bytes, PREAMBLE_READ),
        **limits,
    )


PREAMBLE_READ = 64 << 10


_LIMITS = {
    "max_bin_len": 1 << 20,
    "max_str_len": 1 << 20,
    "max_array_len": 1 << 20,
    "max_map_len": 1 << 16,
    "max_ext_len": 0,
}


class _ItemBudget:
    """A msgpack hook that counts every decoded container and its items, and stops at the budget."""

    def __init__(self, limit: int, what: str):
        self.left = limit
        self.what = what

    def __call__(self, container):
        self.left -= len(container) + 1
        if self.left < 0:
            raise BundleError(f"{self.what} decodes to more than {MAX_DECODED_ITEMS} objects")
        return container


def decode_record(data: bytes, what: str = "bundle header", max_bin_len: int = 1 << 20) -> Any:
    """Decode a msgpack record (the header, a backend's plan) within explicit limits, no extension types.

    Python's cyclic GC is paused while decoding: a record is a tree of fresh
    containers, and the collector walking them as they are created took more than
    half the decode time of large plans (20k instructions: 143 -> 60 ms).
    """
    # Every container and every item takes at least one byte, so a record decodes to at most twice
    # as many objects as it has bytes: below the budget's half, counting (a Python call per
    # container) cannot find anything and is skipped.
    hooks = (
        {}
        if 2 * len(data) <= MAX_DECODED_ITEMS
        else dict.fromkeys(("object_hook", "list_hook"), _ItemBudget(MAX_DECODED_ITEMS, what))
    )
    collecting = gc.isenabled()
    gc.disable()
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            **hooks,
            **{**_LIMITS, "max_bin_len": max_bin_len},
        )
    except BundleError:
        raise
    except Exception as e:  # msgpack signals malformed data with many exception types
        raise BundleError(f"{what} is not valid msgpack ({type(e).__name__}: {e})") from None
    finally:
        if collecting:
            gc.enable()


class _ViewReader:
    """A file-like reader over a bundle's bytes that copies only the bytes msgpack asks for (reading them in
    first where the bundle is still being read)."""

    def __init__(self, buffer: BundleBuffer, start: int):
        self.view = buffer.view
        self.buffer = buffer
        self.pos = start

    def read(self, n: int = -1) -> bytes:
        end = len(self.view) if n < 0 else min(len(self.view), self.pos + n)
        self.buffer.ensure(end)
        chunk = bytes(self.view[self.pos : end])
        self.pos = end
        return chunk


def _what_it_is(buf: memoryview) -> str:
    """A hint for the models people pass by mistake: they must be compiled first."""
    start = bytes(buf[:4])
    if start == b"PK\x03\x04":
        return "; it is a zip archive, e.g. a torch.export .pt2: compile it with aot-build first"
    # An ONNX ModelProto as onnx writes it begins with field 1, ir_version, a small varint.
    if len(start) >= 2 and start[0] == 0x08 and 1 <= start[1] <= 20:
        return "; it looks like an ONNX model: compile it with aot-build first (aot-build MODEL.onnx -o MODEL.aotb)"
    return ""


def _read_preamble(buffer: BundleBuffer) -> tuple[tuple[int, int], bytes, str, int]:
    """Parse magic, version, header bytes, header digest and padding; return the verified digest (hex)
    and where data starts."""
    buffer.ensure(PREAMBLE_READ)
    buf = buffer.view
    if bytes(buf[: len(fmt.MAGIC_BYTES)]) != fmt.MAGIC_BYTES:
        raise BundleError("not an aot bundle (bad magic: the file does not start with 'AOTBUNDLE')" + _what_it_is(buf))
    unpacker = _unpacker(_ViewReader(buffer, len(fmt.MAGIC_BYTES)), fmt.MAX_HEADER_BYTES)
    try:
        version = next(unpacker)
        if (
            not isinstance(version, list)
            or len(version) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in version)
        ):
            raise BundleError("bundle format version is not a [major, minor] pair")
        major, minor = version
        if major > fmt.FORMAT_MAJOR:
            raise BundleError(
                f"bundle format {major}.{minor} is newer than this runtime_lite reads "
                f"(up to {fmt.FORMAT_MAJOR}.x); upgrade runtime_lite"
            )
        if major < 1:
            raise BundleError(f"bundle format {major}.{minor} is not a released format")
        header_bytes = next(unpacker)
        digest = next(unpacker)
        padding = next(unpacker)
        data_start = len(fmt.MAGIC_BYTES) + unpacker.tell()
    except BundleError:
        raise
    except StopIteration:
        raise BundleError("bundle is truncated inside its header") from None
    except Exception as e:  # msgpack signals malformed data with many exception types
        raise BundleError(f"bundle header is not valid msgpack ({type(e).__name__}: {e})") from None
    if not isinstance(header_bytes, bytes) or not isinstance(digest, bytes) or not isinstance(padding, bytes):
        raise BundleError("bundle preamble is malformed (header, digest and padding must be binary)")
    if hashlib.sha256(header_bytes).digest() != digest:
        raise BundleError("bundle header checksum mismatch (the file is corrupt)")
    if data_start % fmt.ALIGNMENT:
        raise BundleError(f"bundle data section starts at {data_start}, not a multiple of {fmt.ALIGNMENT}")
    return (major, minor), header_bytes, digest.hex(), data_start


def _read_blobs(
    header: dict, buffer: BundleBuffer, data_start: int, verify: bool, defer: Collection[int] = ()
) -> tuple[list[memoryview], PendingHashes | None]:
    """Each blob record as a view into the file: aligned, inside the data section, no two overlapping.

    Disjoint ranges bound verification by the file size: overlapping records could
    make the reader hash one region of the file again and again. With ``verify``, the
    blobs in ``defer`` are hashed on background threads (the PendingHashes returned),
    which start while the rest of the file is still being read; every other blob is
    verified before this returns, which is also when the whole file has been read.
    """
    buf = buffer.view
    records = expect_key(header, "blobs", list, "header")
    data_size = len(buf) - data_start
    ranges: list[tuple[int, int, int]] = []
    digests: list[bytes] = []
    for i, raw in enumerate(records):
        field = f"blobs[{i}]"
        record = BlobRecord.from_record(raw, field)
        offset, size = record.offset, record.size
        if offset + size > data_size:
            raise BundleError(
                f"bundle field '{field}' points past the end of the file "
                f"(needs {offset + size} data bytes, file has {data_size}); the bundle is truncated"
            )
        ranges.append((offset, size, i))
        digests.append(record.sha256)
    end, previous = 0, None
    for offset, size, i in sorted(ranges):
        if offset < end:
            raise BundleError(f"bundle field 'blobs[{i}]' overlaps blob {previous}")
        end, previous = offset + size, i
    starts = [data_start + offset for offset, _, _ in ranges]
    blobs = [buf[start : start + size] for start, (_, size, _) in zip(starts, ranges)]
    if not verify:
        buffer.finish()
        return blobs, None
    jobs = [(i, blob, digest) for i, (blob, digest) in enumerate(zip(blobs, digests))]
    later = [job for job in jobs if job[0] in defer]
    pending = None
    if sum(len(blob) for _, blob, _ in later) >= DEFER_MIN_BYTES and usable_cpus() > 1:  # one CPU: nothing overlaps

        def ready(index: int, want: int) -> int:
            got = buffer.wait_for(starts[index] + want)
            return -1 if got < 0 else got - starts[index]

        pending = PendingHashes(later, ready)
    try:
        buffer.finish()
        verify_now([job for job in jobs if pending is None or job[0] not in defer])
    except BaseException:
        if pending is not None:
            buffer.abandon()  # a hash still waiting for bytes stops
            pending.cancel()
        raise
    return blobs, pending


#: Deferring fewer bytes than this costs more (a thread) than hashing them at once saves.
DEFER_MIN_BYTES = 1 << 20


def _read_constants(header: dict, blobs: list[memoryview]) -> list[np.ndarray]:

    constants = []
    for i, raw in enumerate(expect_key(header, "constants", list, "header")):
        field = f"constants[{i}]"
        record = HostConstant.from_record(raw, field)
        dtype, shape = record.dtype, record.shape
        blob = blobs[expect_index(record.blob, len(blobs), f"{field}.blob")]
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if count * dtype.itemsize != len(blob):
            raise BundleError(
                f"bundle field '{field}' declares {dtype.name}{list(shape)} "
                f"({count * dtype.itemsize} bytes) but its blob holds {len(blob)} bytes"
            )
        try:
            array = np.frombuffer(blob, dtype=dtype, count=count).reshape(shape)
        except ValueError as e:  # a shape numpy cannot represent, whatever checked it before
            raise BundleError(f"bundle field '{field}': {dtype.name}{list(shape)}: {e}") from None
        array.flags.writeable = False
        constants.append(array)
    return constants


def read_bundle(
    source: BundleSource,
    *,
    verify: bool = True,
    map_file: bool = False,
    defer: Callable[[dict], Collection[int]] | None = None,
) -> Bundle:
    """Parse and verify a bundle from a path or bytes; raise BundleError with a one-line reason.

    A path is read into private memory unless ``map_file`` (runtime_lite/format/source.py says why).
    ``defer``, given the decoded (not yet checked) header, names blobs whose sha256 may
    finish in the background: they come back in ``Bundle.pending``, which the caller must
    ``wait()`` for before anything trusts those blobs (or ``cancel()``).
    """
    buffer = open_bundle(source, map_file=map_file, incremental=True)
    try:
        version, header_bytes, digest, data_start = _read_preamble(buffer)
        header = decode_record(header_bytes, "bundle header", max_bin_len=fmt.MAX_HEADER_BYTES)
        expect(header, dict, "header")
        features = expect_key(header, "required_features", list, "header")
        for i, feature in enumerate(features):
            expect(feature, str, f"header.required_features[{i}]")
            if feature not in fmt.KNOWN_FEATURES:
                raise BundleError(
                    f"bundle requires feature {feature!r}, which this runtime_lite does not implement; "
                    "upgrade runtime_lite"
                )
        later = defer(header) if verify and defer is not None else ()
        blobs, pending = _read_blobs(header, buffer, data_start, verify, later)
    except BaseException:
        buffer.abandon()  # the file closed, not left to the garbage collector
        raise
    try:
        constants = _read_constants(header, blobs)
    except BaseException:
        if pending is not None:
            pending.cancel()
        raise
    return Bundle(version, header, blobs, constants, buffer, digest, pending)
