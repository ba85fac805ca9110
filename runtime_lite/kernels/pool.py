"""Max and average pooling (N-d, with dilation and ceil mode).

Pooling works on blocks of whole (n, c) planes, about ``POOL_BLOCK_BYTES`` at a
time, so every pass over a block stays in cache (at batch 8 the old whole-tensor
passes took 14 times their batch-1 time). Within a block the planes are copied into
a padded buffer and reduced *flat*: a window's max or sum separates along the axes,
and along one axis it is a combine of the flat buffer with itself shifted by
``tap * dilation * axis_stride``. Every shifted operand is then one long contiguous
run, which numpy vectorises; positions whose window crosses a plane edge come out
as garbage and are never read, because only window starts are sampled at the end.
Python loops run over blocks and kernel taps, never over pixels.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from runtime_lite.execution.limits import check_allocation
from runtime_lite.kernels.cost import nbytes
from runtime_lite.kernels.geometry import check_pool_attrs, spatial_geometry
from runtime_lite.kernels.registry import kernel

#: Bytes of padded input reduced per block: small enough that its passes stay in L2.
POOL_BLOCK_BYTES = 1 << 20


def pooled_extent(size: int, k: int, stride: int, dilation: int, pad_begin: int, pad_end: int, ceil_mode: int) -> int:
    """ONNX's pooling output size; in ceil mode the last window must start inside the input or left pad."""
    span = size + pad_begin + pad_end - dilation * (k - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def _pool_geometry(x, kernel_shape, strides, pads, dilations, ceil_mode):
    nd = len(kernel_shape)
    if x.ndim != nd + 2:
        raise ValueError(f"pool: a {nd}-d window needs a rank-{nd + 2} input, got {list(x.shape)}")
    spatial_geometry("pool", x.shape[2:], kernel_shape, strides, pads, dilations)
    in_shape = x.shape[2:]
    out_shape = tuple(
        pooled_extent(in_shape[i], kernel_shape[i], strides[i], dilations[i], pads[i], pads[i + nd], ceil_mode)
        for i in range(nd)
    )
    # Ceil mode may need windows that run past the right pad: widen the padding to cover them.
    ends = [
        max(
            pads[i + nd],
            (out_shape[i] - 1) * strides[i] + dilations[i] * (kernel_shape[i] - 1) + 1 - in_shape[i] - pads[i],
        )
        for i in range(nd)
    ]
    check_allocation(x.shape[:2] + out_shape, x.dtype, "pool output")
    check_allocation([in_shape[i] + pads[i] + ends[i] for i in range(nd)], x.dtype, "pool padded plane")
    return out_shape, [(pads[i], ends[i]) for i in range(nd)]


def _pool_cost(x, *, kernel_shape, strides, pads, dilations, ceil_mode, count_include_pad=0) -> int:
    """The result, the padded block and its two scratch buffers, a copy of a strided input, the divisor."""
    out_shape, widths = _pool_geometry(x, kernel_shape, strides, pads, dilations, ceil_mode)
    n, c = x.shape[:2]
    plane = nbytes([size + lo + hi for size, (lo, hi) in zip(x.shape[2:], widths)], x.dtype)
    per_block = max(1, min(n * c, POOL_BLOCK_BYTES // max(1, plane)))
    copy = 0 if x.flags.c_contiguous else x.nbytes
    return nbytes(x.shape[:2] + out_shape, x.dtype) + 3 * per_block * plane + copy + 2 * nbytes(out_shape, 8)


def window_reduce(x, combine, fill, kernel_shape, strides, dilations, out_shape, widths) -> np.ndarray:
    """Reduce every window of ``x`` (N, C, *spatial) with ``combine`` (np.maximum, np.add).

    ``widths`` pads each spatial axis with ``fill`` (begin, end) first.
    """
    n, c = x.shape[:2]
    in_shape = x.shape[2:]
    if tuple(kernel_shape) == in_shape and not any(lo or hi for lo, hi in widths) and all(d == 1 for d in dilations):
        # one window covering each plane (global pooling): a plain reduction, no shifted passes
        reduced = combine.reduce(x.reshape(n, c, math.prod(in_shape)), axis=2)  # no -1: n may be 0
        return reduced.reshape((n, c) + (1,) * len(in_shape))
    padded_shape = tuple(size + lo + hi for size, (lo, hi) in zip(in_shape, widths))
    plane = math.prod(padded_shape)
    planes = x.reshape((n * c,) + in_shape)
    y = np.empty((n * c,) + tuple(out_shape), x.dtype)
    per_block = max(1, min(n * c, POOL_BLOCK_BYTES // max(1, plane * x.itemsize)))
    padded = np.full((per_block,) + padded_shape, fill, x.dtype)
    scratch = (np.empty(per_block * plane, x.dtype), np.empty(per_block * plane, x.dtype))
    interior = tuple(slice(lo, lo + size) for size, (lo, _) in zip(in_shape, widths))
    starts = tuple(slice(0, stride * (extent - 1) + 1, stride) for stride, extent in zip(strides, out_shape))
    # element offset between neighbouring taps along each axis of the flat buffer
    axis_steps = [d * math.prod(padded_shape[i + 1 :]) for i, d in enumerate(dilations)]
    for first in range(0, n * c, per_block):
        count = min(per_block, n * c - first)
        block = padded[:count]
        block[(slice(None),) + interior] = planes[first : first + count]
        reduced = holder = block.reshape(-1)
        passes = 0
        for k, step in zip(kernel_shape, axis_steps):
            if k == 1:
                continue
            length = reduced.size - (k - 1) * step
            holder = scratch[passes % 2]  # never the buffer being read
            passes += 1
            target = holder[:length]
            combine(reduced[:length], reduced[step : step + length], out=target)
            for tap in range(2, k):
                combine(target, reduced[tap * step : tap * step + length], out=target)
            reduced = target
        source = holder[: count * plane].reshape(block.shape)
        y[first : first + count] = source[(slice(None),) + starts]
    return y.reshape((n, c) + tuple(out_shape))


def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


@kernel("max_pool1d", "max_pool2d", "max_pool3d", check=check_pool_attrs, cost=_pool_cost)
def max_pool(x, *, kernel_shape, strides, pads, dilations, ceil_mode):
    out_shape, widths = _pool_geometry(x, kernel_shape, strides, pads, dilations, ceil_mode)
    return window_reduce(x, np.maximum, _lowest(x.dtype), kernel_shape, strides, dilations, out_shape, widths)


def _window_counts(k, stride, dilation, pad_begin, limit_lo, limit_hi, out):
    """Per output position along one axis: how many taps land inside [limit_lo, limit_hi)."""
    starts = np.arange(out) * stride - pad_begin
    taps = starts[:, None] + np.arange(k)[None, :] * dilation
    return ((taps >= limit_lo) & (taps < limit_hi)).sum(axis=1)


@functools.lru_cache(maxsize=128)  # bounded: a service sees many input sizes over its life
def _avg_divisor(in_shape, out_shape, kernel_shape, strides, pads, dilations, count_include_pad, dtype):
    """Per output position, how many taps its window averages; a scalar when every window is full."""
    nd = len(kernel_shape)
    divisor = np.ones((), np.float64)
    for i in range(nd):
        lo, hi = (-pads[i], in_shape[i] + pads[i + nd]) if count_include_pad else (0, in_shape[i])
        counts = _window_counts(kernel_shape[i], strides[i], dilations[i], pads[i], lo, hi, out_shape[i])
        divisor = np.multiply.outer(divisor, counts)
    divisor = np.maximum(divisor, 1).astype(dtype)
    if divisor.min() == divisor.max():  # every window full: a scalar divides faster
        divisor = divisor.reshape(-1)[:1].reshape(())
    divisor.flags.writeable = False  # shared by every caller of the cache
    return divisor


@kernel("avg_pool1d", "avg_pool2d", "avg_pool3d", check=check_pool_attrs, cost=_pool_cost)
def avg_pool(x, *, kernel_shape, strides, pads, dilations, ceil_mode, count_include_pad):
    in_shape = x.shape[2:]
    out_shape, widths = _pool_geometry(x, kernel_shape, strides, pads, dilations, ceil_mode)
    y = window_reduce(x, np.add, 0, kernel_shape, strides, dilations, out_shape, widths)
    y /= _avg_divisor(
        tuple(in_shape),
        tuple(out_shape),
        tuple(kernel_shape),
        tuple(strides),
        tuple(pads),
        tuple(dilations),
        count_include_pad,
        x.dtype,
    )
    return y
