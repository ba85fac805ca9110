"""Matrix products. Both hand the work to BLAS through numpy.matmul."""

from __future__ import annotations

import numpy as np

from runtime_lite.kernels import kernel


@kernel("matmul")
def matmul(a, b):
    return np.matmul(a, b)


@kernel("dense")
def dense(x, w, b=None):
    """``x @ w.T + b`` with ``w`` laid out (units, in_features), as TVM's nn.dense.

    ``w.T`` is a transposed view; BLAS reads it with its transpose flag, no copy.
    """
    y = np.matmul(x, w.T)
    if b is not None:
        y += b
    return y
