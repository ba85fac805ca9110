"""QuantizeLinear / DequantizeLinear, per tensor or per axis."""

from __future__ import annotations

import numpy as np

from runtime_lite.kernels.cost import nbytes, promoted
from runtime_lite.kernels.registry import kernel


def _quantize_cost(x, scale, zero_point=None, *, axis, dtype) -> int:
    """``x / scale`` (promoted), its rounding, the clip, and the result in ``dtype``."""
    wide = max(promoted(x, scale).itemsize, x.dtype.itemsize)
    return 3 * nbytes(x.shape, wide) + nbytes(x.shape, np.dtype(dtype))


def _dequantize_cost(x, scale, zero_point=None, *, axis) -> int:
    """The widened integers, their product with the scale (numpy promotes int32 * float32 to float64), the result."""
    wide = np.dtype(np.int32 if x.dtype.itemsize < 4 else np.int64)
    product = np.result_type(wide, scale.dtype)
    return nbytes(x.shape, wide) + nbytes(x.shape, product) + nbytes(x.shape, scale.dtype)


def _along(param: np.ndarray, axis: int, shape: tuple[int, ...]) -> np.ndarray:
    """Reshape a per-axis (1-d) parameter so it broadcasts along ``axis``; scalars pass through."""
    if param.ndim == 0 or param.size == 1:
        return param.reshape(())
    if not -len(shape) <= axis < len(shape) or param.shape != (shape[axis],):
        raise ValueError(f"a per-axis parameter of shape {list(param.shape)} does not fit axis {axis} of {list(shape)}")
    along = [1] * len(shape)
    along[axis] = -1
    return param.reshape(along)


@kernel("quantize", cost=_quantize_cost)
def quantize(x, scale, zero_point=None, *, axis, dtype):
    """y = saturate(round_half_even(x / scale) + zero_point)."""
    info = np.iinfo(dtype)
    q = np.rint(x / _along(scale, axis, x.shape).astype(x.dtype, copy=False))
    if zero_point is not None:
        q += _along(zero_point, axis, x.shape).astype(q.dtype)
    return np.clip(q, info.min, info.max).astype(dtype)


@kernel("dequantize", cost=_dequantize_cost)
def dequantize(x, scale, zero_point=None, *, axis):
    """y = (x - zero_point) * scale, in the scale's float type."""
    wide = x.astype(np.int32 if x.dtype.itemsize < 4 else np.int64)
    if zero_point is not None:
        wide -= _along(zero_point, axis, x.shape).astype(wide.dtype)
    return (wide * _along(scale, axis, x.shape)).astype(scale.dtype, copy=False)
