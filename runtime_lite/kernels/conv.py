"""N-d convolution and transposed convolution lowered to GEMM.

Layout is NCHW (N, C, *spatial) with OIHW weights, as ONNX defines them. Two
lowerings, picked per call from the shapes:

* pointwise (1x1, no padding): the input already is the GEMM operand,
  ``W[O, C] @ X[C, H*W]`` with no copy at stride 1;
* everything else: im2col through an ``as_strided`` window view (one copy) and a
  matmul batched over groups. Depthwise convolutions take this path too: measured on
  ShuffleNet's shapes, a (1 x 9) @ (9 x H*W) matmul per channel is about twice as fast
  as summing nine shifted, scaled views.

Python loops only ever run over kernel offsets, never over pixels.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from runtime_lite.kernels import kernel


def output_extent(size: int, k: int, stride: int, dilation: int) -> int:
    return (size - dilation * (k - 1) - 1) // stride + 1


def pad_spatial(x: np.ndarray, pads, value=0) -> np.ndarray:
    """Pad the spatial axes of an N, C, *spatial array; ``pads`` is ONNX's [begins..., ends...]."""
    nd = x.ndim - 2
    if not any(pads):
        return x
    widths = [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)]
    return np.pad(x, widths, mode="constant", constant_values=value)


def window_view(x: np.ndarray, kernel_shape, strides, dilations) -> np.ndarray:
    """A read-only (N, C, *kernel, *out) view of every sliding window of a padded input."""
    nd = len(kernel_shape)
    out = [output_extent(x.shape[2 + i], kernel_shape[i], strides[i], dilations[i]) for i in range(nd)]
    sp = x.strides[2:]
    view_strides = (
        x.strides[:2] + tuple(sp[i] * dilations[i] for i in range(nd)) + tuple(sp[i] * strides[i] for i in range(nd))
    )
    return as_strided(x, x.shape[:2] + tuple(kernel_shape) + tuple(out), view_strides, writeable=False)


@kernel("conv1d", "conv2d", "conv3d")
def conv(x, w, b=None, *, strides, pads, dilations, groups=1):
    n, c = x.shape[:2]
    o = w.shape[0]
    kernel_shape = w.shape[2:]
    nd = len(kernel_shape)
    x = pad_spatial(x, pads)
    out_shape = tuple(output_extent(x.shape[2 + i], kernel_shape[i], strides[i], dilations[i]) for i in range(nd))
    if groups == 1 and all(k == 1 for k in kernel_shape):
        if any(s != 1 for s in strides):
            x = x[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
        y = np.matmul(w.reshape(o, c), x.reshape(n, c, -1))
    else:
        windows = window_view(x, kernel_shape, strides, dilations)
        k = (c // groups) * math.prod(kernel_shape)
        cols = windows.reshape(n, groups, k, math.prod(out_shape))
        y = np.matmul(w.reshape(groups, o // groups, k), cols)
    y = y.reshape((n, o) + out_shape)
    if b is not None:
        y += b.reshape((o,) + (1,) * nd)
    return y


@kernel("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def conv_transpose(x, w, b=None, *, strides, pads, dilations, output_padding, groups=1):
    """Transposed convolution as GEMM then col2im: scatter-add one strided view per kernel tap."""
    n, c = x.shape[:2]
    og = w.shape[1]
    o = og * groups
    kernel_shape = w.shape[2:]
    nd = len(kernel_shape)
    in_shape = x.shape[2:]
    full = tuple(
        strides[i] * (in_shape[i] - 1) + dilations[i] * (kernel_shape[i] - 1) + 1 + output_padding[i] for i in range(nd)
    )
    cg = c // groups
    taps = math.prod(kernel_shape)
    # w: (C, O/g, *k) -> per group (O/g * taps, C/g), so cols = w_g^T @ x_g.
    wg = w.reshape(groups, cg, og * taps).transpose(0, 2, 1)
    cols = np.matmul(wg, x.reshape(n, groups, cg, -1))  # (n, g, og*taps, L)
    cols = cols.reshape((n, groups, og) + tuple(kernel_shape) + tuple(in_shape))
    y = np.zeros((n, groups, og) + full, dtype=cols.dtype)
    for tap in np.ndindex(*kernel_shape):
        index = [slice(None)] * 3
        for i in range(nd):
            start = tap[i] * dilations[i]
            index.append(slice(start, start + strides[i] * (in_shape[i] - 1) + 1, strides[i]))
        y[tuple(index)] += cols[(slice(None),) * 3 + tap]
    y = y.reshape((n, o) + full)
    crop = tuple(slice(pads[i], full[i] - pads[i + nd]) for i in range(nd))
    y = y[(slice(None), slice(None)) + crop]
    if b is not None:
        y = y + b.reshape((o,) + (1,) * nd)
    return np.ascontiguousarray(y)
