"""Matrix products. Both hand the work to BLAS through numpy.matmul."""

from __future__ import annotations

import numpy as np

from runtime_lite.kernels import kernel
from runtime_lite.limits import check_allocation


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy.matmul's result shape, computed before it allocates (a [N, 1] @ [1, M] is N x M)."""
    if not a or not b:
        raise ValueError("matmul: operands must not be scalars")
    rows = a[-2:-1] if len(a) > 1 else ()
    cols = b[-1:] if len(b) > 1 else ()
    return np.broadcast_shapes(a[:-2], b[:-2]) + rows + cols


@kernel("matmul")
def matmul(a, b):
    check_allocation(matmul_shape(a.shape, b.shape), a.dtype, "matmul output")
    return np.matmul(a, b)


@kernel("dense")
def dense(x, w, b=None):
    """``x @ w.T + b`` with ``w`` laid out (units, in_features), as TVM's nn.dense.

    ``w.T`` is a transposed view; BLAS reads it with its transpose flag, no copy.
    """
    if x.ndim < 1 or w.ndim != 2:
        raise ValueError(f"dense: input {list(x.shape)} and weight {list(w.shape)} (units, in) do not fit")
    check_allocation(x.shape[:-1] + w.shape[:1], x.dtype, "dense output")
    y = np.matmul(x, w.T)
    if b is not None:
        y += b
    return y
