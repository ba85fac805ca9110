"""Max and average pooling (N-d, with dilation and ceil mode) and LRN.

Pooling reduces over shifted strided views of the padded input, one spatial axis at
a time (windows are boxes, so sums and maxima separate), so the only Python loop is
over kernel taps.
"""

from __future__ import annotations

import numpy as np

from runtime_lite.kernels import kernel


def pooled_extent(size: int, k: int, stride: int, dilation: int, pad_begin: int, pad_end: int, ceil_mode: int) -> int:
    """ONNX's pooling output size; in ceil mode the last window must start inside the input or left pad."""
    span = size + pad_begin + pad_end - dilation * (k - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def _pool_geometry(x, kernel_shape, strides, pads, dilations, ceil_mode):
    nd = len(kernel_shape)
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
    return out_shape, [(0, 0), (0, 0)] + [(pads[i], ends[i]) for i in range(nd)]


def separable_window_reduce(x: np.ndarray, combine, kernel_shape, strides, dilations, out_shape) -> np.ndarray:
    """Reduce every window with ``combine`` (np.add, np.maximum), one spatial axis at a time.

    A box's sum or max is the reduction along one axis of the reduction along the
    others, so a k x k window costs 2k passes instead of k * k (3x3: 6 instead of 9),
    and each later pass runs on a smaller array.
    """
    y = x
    for axis, (k, stride, dilation, extent) in enumerate(zip(kernel_shape, strides, dilations, out_shape), start=2):
        span = stride * (extent - 1) + 1
        reduced = _along(y, axis, 0, span, stride).copy()
        for t in range(1, k):
            combine(reduced, _along(y, axis, t * dilation, span, stride), out=reduced)
        y = reduced
    return y


def _along(x: np.ndarray, axis: int, start: int, span: int, stride: int) -> np.ndarray:
    index = [slice(None)] * x.ndim
    index[axis] = slice(start, start + span, stride)
    return x[tuple(index)]


def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


@kernel("max_pool1d", "max_pool2d", "max_pool3d")
def max_pool(x, *, kernel_shape, strides, pads, dilations, ceil_mode=0):
    out_shape, widths = _pool_geometry(x, kernel_shape, strides, pads, dilations, ceil_mode)
    if any(w != (0, 0) for w in widths):
        x = np.pad(x, widths, mode="constant", constant_values=_lowest(x.dtype))
    return separable_window_reduce(x, np.maximum, kernel_shape, strides, dilations, out_shape)


def _window_counts(k, stride, dilation, pad_begin, limit_lo, limit_hi, out):
    """Per output position along one axis: how many taps land inside [limit_lo, limit_hi)."""
    starts = np.arange(out) * stride - pad_begin
    taps = starts[:, None] + np.arange(k)[None, :] * dilation
    return ((taps >= limit_lo) & (taps < limit_hi)).sum(axis=1)


_DIVISOR_CACHE: dict[tuple, np.ndarray] = {}


def _avg_divisor(in_shape, out_shape, kernel_shape, strides, pads, dilations, count_include_pad, dtype):
    key = (
        in_shape,
        out_shape,
        tuple(kernel_shape),
        tuple(strides),
        tuple(pads),
        tuple(dilations),
        count_include_pad,
        dtype,
    )
    divisor = _DIVISOR_CACHE.get(key)
    if divisor is None:
        nd = len(kernel_shape)
        divisor = np.ones((), np.float64)
        for i in range(nd):
            lo, hi = (-pads[i], in_shape[i] + pads[i + nd]) if count_include_pad else (0, in_shape[i])
            counts = _window_counts(kernel_shape[i], strides[i], dilations[i], pads[i], lo, hi, out_shape[i])
            divisor = np.multiply.outer(divisor, counts)
        divisor = np.maximum(divisor, 1).astype(dtype)
        if divisor.min() == divisor.max():  # every window full: a scalar divides faster
            divisor = divisor.reshape(-1)[:1].reshape(())
        _DIVISOR_CACHE[key] = divisor  # a benign race: every thread computes the same array
    return divisor


@kernel("avg_pool1d", "avg_pool2d", "avg_pool3d")
def avg_pool(x, *, kernel_shape, strides, pads, dilations, ceil_mode=0, count_include_pad=0):
    in_shape = x.shape[2:]
    out_shape, widths = _pool_geometry(x, kernel_shape, strides, pads, dilations, ceil_mode)
    if any(w != (0, 0) for w in widths):
        x = np.pad(x, widths, mode="constant")
    y = separable_window_reduce(x, np.add, kernel_shape, strides, dilations, out_shape)
    y /= _avg_divisor(tuple(in_shape), out_shape, kernel_shape, strides, pads, dilations, count_include_pad, x.dtype)
    return y


@kernel("lrn")
def lrn(x, *, size, alpha=1e-4, beta=0.75, bias=1.0):
    """Local response normalisation across channels, window [c - floor((size-1)/2), c + ceil((size-1)/2)]."""
    before = (size - 1) // 2
    after = size - 1 - before
    c = x.shape[1]
    square = np.square(x)
    padded = np.pad(square, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    window = np.zeros_like(square)
    for i in range(size):
        window += padded[:, i : i + c]
    denom = np.power(np.asarray(bias, x.dtype) + np.asarray(alpha / size, x.dtype) * window, np.asarray(beta, x.dtype))
    return x / denom
