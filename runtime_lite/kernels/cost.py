"""What a kernel call will allocate, computed from its operands' shapes and dtypes before it runs.

Every kernel declares a ``cost`` when it registers (``@kernel(..., cost=...)``; the
registry refuses one without): a function with the kernel's own signature that
returns the bytes the call may allocate at its peak, its outputs and its scratch
together. The host plan calls it before each instruction and refuses the
instruction when the run's live activations plus that figure would pass
``max_memory`` (runtime_lite/execution/plan.py), so a budget holds before numpy is
asked for the memory, whatever kernel a bundle names. ``tests/test_kernel_budgets.py``
runs every kernel under tracemalloc and checks that its cost bounds what it really
allocated, so a cost cannot quietly fall behind its kernel.

A cost reads only ``shape``, ``dtype`` and ``nbytes`` (and a few small operands that
are themselves shapes or indices), never the data, so it costs microseconds. When
the kernel writes in place (``out`` given) the output is not allocated and only the
scratch counts. A cost may raise ValueError or TypeError for operands the kernel
would refuse too; the instruction then fails the same way.

The helpers here cover the common shapes of cost; kernels with geometry (conv,
pools, resize) compute theirs next to the kernel from the same geometry code.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

Cost = Callable[..., int]

#: What numpy may allocate on its own besides the arrays a cost counts (ufunc buffers of
#: 8,192 elements, array headers, cached constant rows); tests allow this much slack.
FIXED_OVERHEAD = 128 << 10


def nbytes(shape, dtype: Any) -> int:
    """Bytes of an array of ``shape`` and ``dtype`` (or itemsize); Python ints, so no overflow."""
    itemsize = dtype if isinstance(dtype, int) else np.dtype(dtype).itemsize
    return (math.prod(shape) if type(shape) is tuple else math.prod(int(d) for d in shape)) * itemsize


def broadcast_shape(*operands: np.ndarray) -> tuple[int, ...]:
    first = operands[0].shape
    if all(x.shape == first for x in operands[1:]):
        return first
    return np.broadcast_shapes(*(x.shape for x in operands))


@functools.lru_cache(maxsize=1024)
def _ufunc_itemsize(ufunc: np.ufunc, dtypes: tuple[np.dtype, ...]) -> int:
    """Itemsize of what ``ufunc`` returns for these operand dtypes (an int ``exp`` returns float64)."""
    try:
        resolved = ufunc.resolve_dtypes(dtypes + (None,) * ufunc.nout)
    except (TypeError, ValueError, AttributeError):  # the kernel will refuse it too; assume the widest
        return max(8, *(d.itemsize for d in dtypes))
    return max(d.itemsize for d in resolved[ufunc.nin :])


def ufunc_result(ufunc: np.ufunc, *operands: np.ndarray) -> int:
    """Bytes of ``ufunc(*operands)``'s result (broadcast shape, resolved dtype)."""
    first = operands[0]
    if all(x.shape == first.shape and x.dtype == first.dtype for x in operands[1:]):  # the common case, fast
        return first.size * _ufunc_itemsize(ufunc, (first.dtype,) * len(operands))
    return nbytes(broadcast_shape(*operands), _ufunc_itemsize(ufunc, tuple(x.dtype for x in operands)))


def work_itemsize(x: np.ndarray) -> int:
    """Bytes per element of the temporaries numpy makes from ``x``: its own for floats, but float64 for
    integers and bools (``exp``, ``/``, ``expm1`` of an int8 tensor are float64, 8x its size)."""
    return x.dtype.itemsize if x.dtype.kind in "fc" else max(8, x.dtype.itemsize)


def quick(cost: Cost, free_in_place: bool = False) -> Cost:
    """Mark ``cost`` as a few attribute reads, cheaper than the plan's memory of costs (execution/plan.py);
    ``free_in_place``: it is 0 whenever ``out`` is an array (the plan then skips the call)."""
    cost.quick = True
    cost.free_in_place = free_in_place
    return cost


def like(times: float = 1.0, dtype: Any = None, scratch: float = 0.0) -> Cost:
    """``times`` results the size of operand 0 (in ``dtype``, default its working dtype: see
    ``work_itemsize``), plus ``scratch`` more temporaries of that size; in place (``out`` given)
    only the scratch and ``times - 1`` results count."""

    def cost(x, *_, out=None, **__) -> int:
        if dtype is None:
            size = x.nbytes if x.dtype.kind in "fc" else x.size * work_itemsize(x)
        else:
            size = nbytes(x.shape, dtype)
        results = times - (1 if out is not None else 0)
        return int(size * results + nbytes(x.shape, work_itemsize(x)) * scratch)

    return quick(cost, free_in_place=times == 1 and not scratch)


def ufunc_cost(ufunc: np.ufunc, times: float = 1.0) -> Cost:
    """A ufunc's result (``times`` of it: 2 where the kernel casts it back), none when written in place."""

    def cost(*operands, out=None, **_) -> int:
        return 0 if out is not None else int(times * ufunc_result(ufunc, *operands))

    return quick(cost, free_in_place=True)


@quick
def views(x, *_, **__) -> int:
    """A view of operand 0 costs nothing; numpy copies a reshape of a non-contiguous array (counted)."""
    return 0 if x.flags.c_contiguous else x.nbytes


@quick
def always_view(*_, **__) -> int:
    """Strided views (transpose, slice, split, squeeze) never copy."""
    return 0


def promoted(*operands: np.ndarray) -> np.dtype:
    first = operands[0].dtype
    if all(x.dtype == first for x in operands[1:]):
        return first
    return np.result_type(*(x.dtype for x in operands))


__all__ = [
    "FIXED_OVERHEAD",
    "Cost",
    "always_view",
    "broadcast_shape",
    "like",
    "nbytes",
    "promoted",
    "quick",
    "work_itemsize",
    "ufunc_cost",
    "ufunc_result",
    "views",
]
