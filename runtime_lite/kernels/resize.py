"""ONNX Resize, nearest and (n-)linear, one axis at a time.

Linear interpolation is separable, so resizing an N-d tensor is a 1-d resize per
axis whose size changes; each is a gather of two neighbours and a blend, which
stays vectorised. Coordinate mapping follows the ONNX reference evaluator.
"""

from __future__ import annotations

import numpy as np

from runtime_lite.errors import describe
from runtime_lite.execution.limits import check_allocation
from runtime_lite.kernels.cost import nbytes
from runtime_lite.kernels.registry import kernel
from runtime_lite.kernels.shape import shape_dims

COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                    "half_pixel_symmetric")  # fmt: skip
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def source_coordinates(mode: str, out_size: int, in_size: int, scale: float) -> np.ndarray:
    """Where each output index samples the input, in input pixel units (ONNX coordinate_transformation_mode)."""
    y = np.arange(out_size, dtype=np.float64)
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if out_size > 1 else np.full(out_size, -0.5)
    if mode == "align_corners":
        return y * (in_size - 1) / (out_size - 1) if out_size > 1 else np.zeros(out_size)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    if mode == "half_pixel_symmetric":
        adjustment = out_size / (scale * in_size)
        offset = in_size / 2 * (1 - adjustment)
        return offset + (y + 0.5) / scale - 0.5
    raise ValueError(f"unsupported coordinate_transformation_mode {mode!r}")


def _nearest_index(x: np.ndarray, nearest_mode: str) -> np.ndarray:
    if nearest_mode == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if nearest_mode == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if nearest_mode == "floor":
        return np.floor(x)
    if nearest_mode == "ceil":
        return np.ceil(x)
    raise ValueError(f"unsupported nearest_mode {nearest_mode!r}")


def _resize_axis(x, axis, out_size, scale, mode, coordinate_mode, nearest_mode):
    in_size = x.shape[axis]
    coords = source_coordinates(coordinate_mode, out_size, in_size, scale)
    if mode == "nearest":
        index = np.clip(_nearest_index(coords, nearest_mode), 0, in_size - 1).astype(np.intp)
        return np.take(x, index, axis=axis)
    coords = np.clip(coords, 0, in_size - 1)
    lo = np.floor(coords).astype(np.intp)
    hi = np.minimum(lo + 1, in_size - 1)
    frac = (coords - lo).astype(x.dtype if x.dtype.kind == "f" else np.float32)
    shape = [1] * x.ndim
    shape[axis] = out_size
    frac = frac.reshape(shape)
    a = np.take(x, lo, axis=axis)
    b = np.take(x, hi, axis=axis)
    return (a + (b - a) * frac).astype(x.dtype, copy=False)


def _check_resize_attrs(attrs: dict) -> None:
    if attrs.get("mode", "nearest") not in ("nearest", "linear"):
        raise ValueError(f"attribute mode must be nearest or linear, got {describe(attrs.get('mode'))}")
    if attrs.get("coordinate_transformation_mode", "half_pixel") not in COORDINATE_MODES:
        raise ValueError(
            f"unsupported coordinate_transformation_mode {describe(attrs.get('coordinate_transformation_mode'))}"
        )
    if attrs.get("nearest_mode", "round_prefer_floor") not in NEAREST_MODES:
        raise ValueError(f"unsupported nearest_mode {describe(attrs.get('nearest_mode'))}")
    scales, sizes = attrs.get("scales"), attrs.get("sizes")
    if (scales is None) == (sizes is None):
        raise ValueError("exactly one of the attributes scales and sizes must be given")
    if scales is not None and not (
        isinstance(scales, list)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1 << 20 for v in scales)
    ):
        raise ValueError(f"attribute scales must be positive finite numbers, got {describe(scales)}")
    if sizes is not None and not (
        isinstance(sizes, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in sizes)
    ):
        raise ValueError(f"attribute sizes must be non-negative integers, got {describe(sizes)}")


def _resize_cost(x, *, mode, scales, sizes, coordinate_transformation_mode, nearest_mode) -> int:
    """Per resized axis: its coordinates, and for linear two gathers, their blend and the cast back (wide)."""
    if len(scales if sizes is None else sizes) != x.ndim:
        return 0  # refused by the kernel before it allocates
    if sizes is None:
        sizes = [int(np.floor(d * s)) for d, s in zip(x.shape, scales)]
    wide = max(x.dtype.itemsize, 8 if x.dtype.kind != "f" else 0)
    shape, total = list(x.shape), 0
    for axis, out_size in enumerate(sizes):
        shape[axis] = out_size
        total += 6 * nbytes(shape, wide) + 6 * nbytes([out_size], 8)
    return total


@kernel("resize", check=_check_resize_attrs, cost=_resize_cost)
def resize(
    x,
    *,
    mode,
    scales,
    sizes,
    coordinate_transformation_mode,
    nearest_mode,
):
    """Exactly one of ``scales`` / ``sizes`` (one entry per axis) describes the output."""
    if len(scales if sizes is None else sizes) != x.ndim:
        raise ValueError(f"resize: scales/sizes need one value per axis of {list(x.shape)}")
    if sizes is None:
        sizes = [int(np.floor(d * s)) for d, s in zip(x.shape, scales)]
        ratio = list(scales)
    else:
        ratio = [o / d if d else 1.0 for o, d in zip(sizes, x.shape)]
    check_allocation(sizes, x.dtype, "resize output")
    for axis, (out_size, scale) in enumerate(zip(sizes, ratio)):
        if out_size != x.shape[axis] or scale != 1.0:
            check_allocation(x.shape[:axis] + (out_size,) + x.shape[axis + 1 :], x.dtype, "resize step")
            x = _resize_axis(x, axis, out_size, scale, mode, coordinate_transformation_mode, nearest_mode)
    return x


def _check_dynamic_resize_attrs(attrs: dict) -> None:
    _check_resize_attrs({**attrs, "scales": None, "sizes": []})


def _dynamic_resize_cost(x, sizes, *, mode, coordinate_transformation_mode, nearest_mode) -> int:
    dims = shape_dims(sizes, "dynamic_resize")
    if len(dims) != x.ndim:
        return 0  # refused by the kernel before it allocates
    return _resize_cost(x, mode=mode, scales=None, sizes=list(dims), coordinate_transformation_mode="",
                        nearest_mode="")  # fmt: skip


@kernel("dynamic_resize", check=_check_dynamic_resize_attrs, cost=_dynamic_resize_cost)
def dynamic_resize(x, sizes, *, mode, coordinate_transformation_mode, nearest_mode):
    """ONNX Resize to ``sizes`` computed at run time (an image of any height and width resized to another's size)."""
    return resize(
        x, mode=mode, scales=None, sizes=list(shape_dims(sizes, "dynamic_resize")),
        coordinate_transformation_mode=coordinate_transformation_mode, nearest_mode=nearest_mode,
    )  # fmt: skip
