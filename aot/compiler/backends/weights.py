"""Constants packed into one payload blob, for backends whose payload carries its weights.

Each array starts on a 64-byte boundary inside the blob (the blob itself is
aligned in the bundle), little-endian, so the run side maps it with
``runtime_lite.backends.weights.view_constant`` without copying.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ALIGN = 64


def append_constant(blob: bytearray, data: Any) -> tuple[int, int]:
    """Append ``data`` aligned; return (offset, nbytes)."""
    array = np.asarray(data, order="C")
    blob.extend(b"\0" * (-len(blob) % ALIGN))
    offset = len(blob)
    blob.extend(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
    return offset, array.nbytes


def constant_record(blob: bytearray, data: Any) -> dict[str, Any]:
    """Append ``data`` and describe it the way ``view_constant`` reads it back."""
    array = np.asarray(data)
    offset, nbytes = append_constant(blob, array)
    return {"shape": list(array.shape), "dtype": array.dtype.name, "offset": offset, "nbytes": nbytes}
