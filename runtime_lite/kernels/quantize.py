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


def _dynamic_quantize_cost(x) -> int:
    """``x / scale`` in float, its rounding and the uint8 result."""
    return 2 * nbytes(x.shape, np.dtype(np.float32)) + nbytes(x.shape, np.dtype(np.uint8))


@kernel("dynamic_quantize", cost=_dynamic_quantize_cost, outputs=3)
def dynamic_quantize(x):
    """ONNX DynamicQuantizeLinear, as onnxruntime computes it: the range [min(x, 0), max(x, 0)] over 255 steps
    (scale 1 for an all-zero x), zero point rounded half to even; ``(y, scale, zero_point)``."""
    x = np.asarray(x, np.float32)
    low = np.float32(min(float(x.min()), 0.0)) if x.size else np.float32(0)
    high = np.float32(max(float(x.max()), 0.0)) if x.size else np.float32(0)
    scale = np.float32(1) if high == low else np.float32((high - low) / np.float32(255))
    zero_point = np.rint(np.clip(np.float32(0) - low / scale, 0, 255)).astype(np.uint8)
    y = np.clip(np.rint(x / scale) + np.float32(zero_point), 0, 255).astype(np.uint8)
    return y, np.asarray(scale, np.float32), np.asarray(zero_point, np.uint8)
