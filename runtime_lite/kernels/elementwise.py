"""Elementwise arithmetic, comparison and logic with ONNX broadcasting and dtype rules.

ONNX requires both operands of a binary op to share a dtype and the result to keep
it; numpy would promote (int / int -> float64, float32 ** int64 -> float64), so the
kernels that can promote cast back explicitly.
"""

from __future__ import annotations

import numpy as np

from runtime_lite.execution.limits import check_allocation
from runtime_lite.kernels.bounds import clamp
from runtime_lite.kernels.cost import like, nbytes, promoted, ufunc_cost, ufunc_result
from runtime_lite.kernels.registry import kernel


def check_broadcast(*operands) -> None:
    """Broadcasting can multiply sizes (an [N, 1] and a [1, M] make N x M): check before numpy allocates."""
    shape = np.broadcast_shapes(*(x.shape for x in operands))
    check_allocation(shape, max(x.dtype.itemsize for x in operands), "broadcast result")


UNARY_UFUNCS = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "negative": np.negative,
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.rint,  # ONNX Round is round-half-to-even, as rint is
    "sign": np.sign,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "logical_not": np.logical_not,
}

BINARY_UFUNCS = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}

COMPARISONS = {
    "equal": np.equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
}


def _unary(ufunc):
    def run(x, *, out=None):
        return ufunc(x, out=out)

    return run


def _binary(ufunc):
    def run(a, b, *, out=None):
        if a.shape != b.shape and out is None:
            check_broadcast(a, b)
        return ufunc(a, b, out=out)

    return run


for _name, _ufunc in UNARY_UFUNCS.items():
    kernel(_name, inplace=(0,), cost=ufunc_cost(_ufunc))(_unary(_ufunc))
for _name, _ufunc in BINARY_UFUNCS.items():
    kernel(_name, inplace=(0, 1), cost=ufunc_cost(_ufunc))(_binary(_ufunc))
for _name, _ufunc in COMPARISONS.items():
    kernel(_name, cost=ufunc_cost(_ufunc))(_binary(_ufunc))


def _divide_cost(a, b, *, out=None) -> int:
    """Integers: the quotient, the remainder and the sign masks (one byte each), then the result."""
    result = ufunc_result(np.divide if a.dtype.kind not in "iu" else np.floor_divide, a, b)
    if a.dtype.kind in "iu":
        return 3 * result + 4 * nbytes(np.broadcast_shapes(a.shape, b.shape), 1)
    return 0 if out is not None else result


def _cast_back_cost(ufunc):
    """numpy's promoted result, then the copy cast back to operand 0's dtype (ONNX keeps it)."""

    def cost(a, b, **_) -> int:
        result = ufunc_result(ufunc, a, b)
        back = nbytes(np.broadcast_shapes(a.shape, b.shape), a.dtype)
        return result + (back if promoted(a, b) != a.dtype else 0)

    return cost


def _where_cost(condition, x, y) -> int:
    shape = np.broadcast_shapes(condition.shape, x.shape, y.shape)
    return nbytes(shape, promoted(x, y))


def _reciprocal_cost(x, *, out=None) -> int:
    return 0 if out is not None else ufunc_result(np.divide, x, x)


def _power_cost(base, exponent) -> int:
    """The exponent cast to the base's dtype (integers), the power, and the cast back."""
    return _cast_back_cost(np.power)(base, exponent) + nbytes(exponent.shape, base.dtype)


@kernel("reciprocal", inplace=(0,), cost=_reciprocal_cost)
def reciprocal(x, *, out=None):
    return np.divide(np.ones((), x.dtype), x, out=out)


@kernel("divide", inplace=(0, 1), cost=_divide_cost)
def divide(a, b, *, out=None):
    if a.dtype.kind in "iu":
        # ONNX integer division truncates toward zero (C semantics), numpy floors.
        q = np.floor_divide(a, b)
        q += ((np.remainder(a, b) != 0) & ((a < 0) ^ (b < 0))).astype(q.dtype)
        if out is not None:
            out[...] = q
            return out
        return q
    return np.divide(a, b, out=out)


@kernel("mod", cost=_cast_back_cost(np.fmod))
def mod(a, b, *, fmod):
    return (np.fmod(a, b) if fmod else np.mod(a, b)).astype(a.dtype, copy=False)


@kernel("power", cost=_power_cost)
def power(base, exponent):
    if base.dtype.kind in "iu" and exponent.dtype.kind in "iu":
        return np.power(base, exponent.astype(base.dtype, copy=False))
    return np.power(base, exponent).astype(base.dtype, copy=False)


@kernel("where", cost=_where_cost)
def where(condition, x, y):
    if not condition.shape == x.shape == y.shape:
        check_broadcast(condition, x, y)
    return np.where(condition, x, y)


@kernel("clip", inplace=(0,), cost=like())
def clip(x, *, min, max, out=None):  # noqa: A002 - ONNX's attribute names
    if min is None and max is None:
        return x  # in place, ``out`` is ``x`` itself
    return clamp(x, min, max, out)


@kernel("cast", cost=lambda x, *, to: nbytes(x.shape, to))
def cast(x, *, to):
    return x.astype(to)


@kernel("copy", cost=like())
def copy(x):
    """Materialise a fresh array (used where an output must not alias an input)."""
    return np.array(x, copy=True)
