"""QuantizeLinear / DequantizeLinear, per tensor or per axis."""

from __future__ import annotations

import numpy as np

from runtime_lite.kernels import kernel


def _along(param: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """Reshape a per-axis (1-d) parameter so it broadcasts along ``axis``; scalars pass through."""
    if param.ndim == 0 or param.size == 1:
        return param.reshape(())
    shape = [1] * ndim
    shape[axis] = -1
    return param.reshape(shape)


@kernel("quantize")
def quantize(x, scale, zero_point=None, *, axis=1, dtype="uint8"):
    """y = saturate(round_half_even(x / scale) + zero_point)."""
    info = np.iinfo(dtype)
    q = np.rint(x / _along(scale, axis, x.ndim).astype(x.dtype, copy=False))
    if zero_point is not None:
        q += _along(zero_point, axis, x.ndim).astype(q.dtype)
    return np.clip(q, info.min, info.max).astype(dtype)


@kernel("dequantize")
def dequantize(x, scale, zero_point=None, *, axis=1):
    """y = (x - zero_point) * scale, in the scale's float type."""
    wide = x.astype(np.int32 if x.dtype.itemsize < 4 else np.int64)
    if zero_point is not None:
        wide -= _along(zero_point, axis, x.ndim).astype(wide.dtype)
    return (wide * _along(scale, axis, x.ndim)).astype(scale.dtype, copy=False)
