"""Constants inside a backend payload blob: zero-copy, bounds-checked views."""

from __future__ import annotations

import math

import numpy as np

from runtime_lite.errors import BundleError


def view_constant(weights: memoryview | None, shape: tuple[int, ...], dtype: np.dtype, offset: int, field: str):
    """A read-only view of one array in ``weights``; BundleError if it would reach outside the blob."""
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if weights is None or offset < 0 or offset + nbytes > len(weights):
        raise BundleError(f"bundle field '{field}' points outside the weights payload")
    try:
        array = np.frombuffer(weights, dtype=dtype.newbyteorder("<"), count=count, offset=offset).reshape(shape)
    except ValueError as e:  # a shape numpy cannot represent, whatever checked it before
        raise BundleError(f"bundle field '{field}': shape {list(shape)} of {dtype}: {e}") from None
    array.flags.writeable = False  # weights are shared by every run and may be the caller's own buffer
    return array
