"""``max(x, c)`` and ``min(x, c)`` for a scalar ``c``, at the speed of two contiguous arrays.

numpy 2.4 runs ``np.maximum`` and ``np.minimum`` through its SIMD loop only when
both operands are contiguous; with a scalar operand it takes a scalar loop, which
made ReLU 3 to 4 times slower than an add of the same size (0.58 against 0.13 ms on
ResNet-50's first 64x112x112 activation). Viewing ``x`` as rows and broadcasting one
contiguous row of ``c`` against them takes the SIMD loop; the row is 64 kB, so it
stays in cache. NaN handling is numpy's own: the same ufunc runs either way.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

#: Length of the constant row that ``x`` is compared against, in elements.
ROW = 16384


@lru_cache(maxsize=64)
def _constant_row(value: object, dtype: np.dtype) -> np.ndarray:
    row = np.full(ROW, value, dtype)
    row.flags.writeable = False
    return row


def bounded(ufunc: np.ufunc, x: np.ndarray, value: object, out: np.ndarray | None = None) -> np.ndarray:
    """``ufunc(x, value, out=out)`` for ``np.maximum`` or ``np.minimum`` and a scalar ``value``."""
    bound = np.asarray(value, x.dtype)
    if not x.flags.c_contiguous or (out is not None and not out.flags.c_contiguous) or x.dtype.kind not in "fiu":
        return ufunc(x, bound, out=out)
    if out is None:
        out = np.empty(x.shape, x.dtype)
    row = _constant_row(bound.item(), x.dtype)
    source, target = x.reshape(-1), out.reshape(-1)
    size = source.size
    bulk = size - size % ROW
    if bulk:
        ufunc(source[:bulk].reshape(-1, ROW), row, out=target[:bulk].reshape(-1, ROW))
    if size > bulk:
        ufunc(source[bulk:], row[: size - bulk], out=target[bulk:])
    return out


def clamp(x: np.ndarray, low: object | None, high: object | None, out: np.ndarray | None = None) -> np.ndarray:
    """``np.clip(x, low, high, out=out)``: ``min(max(x, low), high)``, either bound optional."""
    y = x if low is None else bounded(np.maximum, x, low, out)
    if high is not None:
        y = bounded(np.minimum, y, high, out if low is None else y)
    elif y is x and out is not None and out is not x:
        np.copyto(out, x)
        y = out
    return y
