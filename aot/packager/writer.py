"""Write .aotb bundles: a msgpack stream with 64-byte-aligned, checksummed blobs.

The layout (docs/bundle-format.md) is produced by ``write_stream``; ``save``
wraps it in an atomic write: the bundle is written to a temporary file beside
the target, flushed to disk, then renamed over it, so a reader never sees half a
bundle and a failed build leaves no file behind.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

import msgpack

from aot.errors import BuildError
from runtime_lite import files
from runtime_lite import format as fmt
from runtime_lite.errors import BundleError
from runtime_lite.execution.module import check_bundle
from runtime_lite.format.records import BlobRecord

MAX_BLOB_BYTES = (1 << 32) - 1  # a msgpack bin32 length


@dataclass
class BlobTable:
    """Blobs deduplicated by content; ``add`` returns the index a header refers to."""

    payloads: list[memoryview]
    digests: list[bytes]

    def __init__(self) -> None:
        self.payloads, self.digests = [], []
        self._index: dict[bytes, int] = {}

    def add(self, data: Any) -> int:
        view = memoryview(data)
        if view.ndim > 1 and 0 in view.shape:  # an empty [0, 3] array: memoryview cannot cast zeros in its shape
            view = memoryview(b"")
        view = view.cast("B")
        if len(view) > MAX_BLOB_BYTES:
            raise BuildError(f"a blob of {len(view)} bytes exceeds the format's 4 GiB limit per blob")
        digest = hashlib.sha256(view).digest()
        index = self._index.get(digest)
        if index is None:
            index = self._index[digest] = len(self.payloads)
            self.payloads.append(view)
            self.digests.append(digest)
        return index

    @property
    def total_bytes(self) -> int:
        return sum(len(p) for p in self.payloads)


def _padding(position: int, reserve: int, required: bool) -> bytes:
    """A msgpack bin object that makes ``position + len(pad) + reserve`` a multiple of ALIGNMENT."""
    gap = (-(position + reserve)) % fmt.ALIGNMENT
    if gap == 0 and not required:
        return b""
    if gap < 2:  # a bin8 object is at least 2 bytes
        gap += fmt.ALIGNMENT
    return msgpack.packb(b"\0" * (gap - 2), use_bin_type=True)


def _layout(blobs: BlobTable) -> list[dict[str, Any]]:
    """Offsets of every blob payload, relative to the data section start."""
    records, position = [], 0
    for payload, digest in zip(blobs.payloads, blobs.digests):
        position += len(_padding(position, 5, required=False)) + 5  # pad, then the bin32 header
        records.append(BlobRecord(position, len(payload), digest).to_record())
        position += len(payload)
    return records


def encode_preamble(header: dict[str, Any]) -> bytes:
    """Magic, version, the encoded header, its sha256, and the padding that aligns the data section."""
    header_bytes = msgpack.packb(header, use_bin_type=True)
    preamble = (
        fmt.MAGIC_BYTES
        + msgpack.packb([fmt.FORMAT_MAJOR, fmt.FORMAT_MINOR])
        + msgpack.packb(header_bytes, use_bin_type=True)
        + msgpack.packb(hashlib.sha256(header_bytes).digest(), use_bin_type=True)
    )
    return preamble + _padding(len(preamble), 0, required=True)


def write_stream(out: BinaryIO, header: dict[str, Any], blobs: BlobTable) -> int:
    """Write a whole bundle to ``out``; return its size in bytes."""
    header = dict(header, blobs=_layout(blobs))
    preamble = encode_preamble(header)
    out.write(preamble)
    position = 0
    for payload, record in zip(blobs.payloads, header["blobs"]):
        pad = _padding(position, 5, required=False)
        out.write(pad)
        out.write(b"\xc6" + len(payload).to_bytes(4, "big"))
        out.write(payload)
        position += len(pad) + 5 + len(payload)
        assert position - len(payload) == record["offset"]
    return len(preamble) + position


def to_bytes(header: dict[str, Any], blobs: BlobTable) -> bytes:
    buffer = io.BytesIO()
    write_stream(buffer, header, blobs)
    return buffer.getvalue()


def atomic_write(
    path: str | os.PathLike[str],
    write: Callable[[BinaryIO], int],
    what: str = "bundle",
    check: Callable[[str], None] | None = None,
) -> int:
    """Write a file all-or-nothing (see ``runtime_lite.files.atomic_write``); BuildError names the path."""
    try:
        return files.atomic_write(path, write, check)
    except OSError as e:
        raise BuildError(f"cannot write {what} '{os.fspath(path)}': {e.strerror or e}") from None


def read_back(source: str | bytes) -> None:
    """Refuse a written bundle that runtime_lite would refuse (header, signature, plan; no engines run)."""
    try:
        check_bundle(source)
    except BundleError as e:
        raise BuildError(f"internal error: the bundle written does not read back in runtime_lite: {e}") from None


def save(path: str | os.PathLike[str], header: dict[str, Any], blobs: BlobTable) -> int:
    """Atomically write the bundle to ``path``, read it back, then rename; return its size.

    Raises BuildError naming the path, or the field runtime_lite refused.
    """
    return atomic_write(path, lambda out: write_stream(out, header, blobs), check=read_back)


def atomic_write_text(path: str | os.PathLike[str], text: str, what: str = "file") -> int:
    data = text.encode()
    return atomic_write(path, lambda out: out.write(data), what)
