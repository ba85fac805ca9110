"""Matrix products: BLAS through numpy.matmul, large ones spread over the threads by gemm.py."""

from __future__ import annotations

import numpy as np

from runtime_lite.execution.limits import check_allocation
from runtime_lite.kernels import gemm
from runtime_lite.kernels.cost import nbytes, promoted
from runtime_lite.kernels.registry import kernel


def _copies(a: np.ndarray, b: np.ndarray) -> int:
    """Operands BLAS cannot read in place: non-contiguous ones, and both when numpy must cast one."""
    if a.dtype != b.dtype:
        wide = promoted(a, b)
        return nbytes(a.shape, wide) + nbytes(b.shape, wide)
    return sum(x.nbytes for x in (a, b) if not (x.flags.c_contiguous or x.flags.f_contiguous))


def _matmul_cost(a, b) -> int:
    """The product, and the operand copies BLAS needs."""
    return nbytes(matmul_shape(a.shape, b.shape), promoted(a, b)) + _copies(a, b)


def _dense_cost(x, w, b=None) -> int:
    if x.ndim < 1 or w.ndim != 2:
        return 0  # refused by the kernel before it allocates
    out = x.shape[:-1] + w.shape[:1]
    bias = nbytes(out, promoted(x, w, b)) if b is not None and promoted(x, w, b) != promoted(x, w) else 0
    return nbytes(out, promoted(x, w)) + _copies(x, w) + bias


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy.matmul's result shape, computed before it allocates (a [N, 1] @ [1, M] is N x M)."""
    if not a or not b:
        raise ValueError("matmul: operands must not be scalars")
    rows = a[-2:-1] if len(a) > 1 else ()
    cols = b[-1:] if len(b) > 1 else ()
    return np.broadcast_shapes(a[:-2], b[:-2]) + rows + cols


def rows_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` with every leading dim of ``a`` folded into the rows of one GEMM when ``b`` is a matrix.

    numpy.matmul runs a stacked ``[..., M, K] @ [K, N]`` as one BLAS call per leading
    index: a transformer's ``[197, 1, 768] @ [768, 2304]`` became 197 matrix-vector
    products, each streaming the whole weight (6x slower than one GEMM). Folding is a
    view whenever the leading dims collapse, which they do for contiguous and
    permuted-channels activations alike; otherwise reshape copies ``a`` once.
    """
    if a.ndim < 2 or b.ndim < 2:
        return np.matmul(a, b)
    if b.ndim != 2 or a.ndim < 3:
        return gemm.matmul(a, b)
    rows = a.reshape(-1, a.shape[-1])
    return gemm.matmul(rows, b).reshape(a.shape[:-1] + b.shape[1:])


@kernel("matmul", cost=_matmul_cost)
def matmul(a, b):
    check_allocation(matmul_shape(a.shape, b.shape), a.dtype, "matmul output")
    return rows_matmul(a, b)


@kernel("dense", cost=_dense_cost)
def dense(x, w, b=None):
    """``x @ w.T + b`` with ``w`` laid out (units, in_features), as TVM's nn.dense.

    ``w.T`` is a transposed view; BLAS reads it with its transpose flag, no copy.
    """
    if x.ndim < 1 or w.ndim != 2:
        raise ValueError(f"dense: input {list(x.shape)} and weight {list(w.shape)} (units, in) do not fit")
    check_allocation(x.shape[:-1] + w.shape[:1], x.dtype, "dense output")
    y = rows_matmul(x, w.T)
    if b is not None:
        y += b
    return y
