"""Constants packed into one payload blob, for backends whose payload carries its weights.

Each array starts on a 64-byte boundary inside the blob (the blob itself is
aligned in the bundle), little-endian, and is described by a ``ConstantRecord``
(runtime_lite/format/records.py), which the run side reads back and views without copying.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime_lite.format.records import ConstantRecord

ALIGN = 64


def append_constant(blob: bytearray, data: Any) -> tuple[int, int]:
    """Append ``data`` aligned; return (offset, nbytes)."""
    array = np.asarray(data, order="C")
    blob.extend(b"\0" * (-len(blob) % ALIGN))
    offset = len(blob)
    blob.extend(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
    return offset, array.nbytes


def constant_record(blob: bytearray, data: Any) -> ConstantRecord:
    """Append ``data`` and describe it with the record the run side reads back."""
    array = np.asarray(data)
    offset, _ = append_constant(blob, array)
    return ConstantRecord.of(array, offset)
