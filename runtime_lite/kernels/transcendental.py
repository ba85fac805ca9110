"""Inverse and hyperbolic trigonometry, log/exp variants, truncation, atan2 and bit shifts.

Each is one numpy ufunc, so the host computes what numpy's libm does in the input's
own dtype (``log1p`` and ``expm1`` stay accurate near zero, where ``log(1 + x)`` would
not). A new family in its own module, beside ``elementwise``, so the ops the NPU and
TensorRT patterns know stay where they were.
"""

from __future__ import annotations

import numpy as np

from runtime_lite.errors import describe
from runtime_lite.kernels.cost import broadcast_shape, nbytes, ufunc_cost
from runtime_lite.kernels.elementwise import check_broadcast
from runtime_lite.kernels.registry import kernel

UFUNCS = {
    "acos": np.arccos,
    "acosh": np.arccosh,
    "asin": np.arcsin,
    "asinh": np.arcsinh,
    "atan": np.arctan,
    "atanh": np.arctanh,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "log2": np.log2,
    "log10": np.log10,
    "trunc": np.trunc,
}


def _unary(ufunc):
    def run(x, *, out=None):
        with np.errstate(all="ignore"):  # acos(2) is NaN, as in every framework
            return ufunc(x, out=out)

    return run


for _name, _ufunc in UFUNCS.items():
    kernel(_name, inplace=(0,), cost=ufunc_cost(_ufunc))(_unary(_ufunc))


@kernel("atan2", inplace=(0, 1), cost=ufunc_cost(np.arctan2))
def atan2(a, b, *, out=None):
    if a.shape != b.shape and out is None:
        check_broadcast(a, b)
    return np.arctan2(a, b, out=out)


def _check_direction(attrs: dict) -> None:
    if attrs.get("direction") not in ("LEFT", "RIGHT"):
        raise ValueError(f"attribute direction must be LEFT or RIGHT, got {describe(attrs.get('direction'))}")


def _bit_shift_cost(a, b, *, direction) -> int:
    """The mask, the clamped shift, the shifted values and the result: four of the broadcast shape."""
    return 4 * nbytes(broadcast_shape(a, b), max(a.dtype.itemsize, b.dtype.itemsize))


@kernel("bit_shift", check=_check_direction, cost=_bit_shift_cost)
def bit_shift(a, b, *, direction):
    """ONNX BitShift: bits shifted out are lost; a shift past the width gives 0, or the sign for a signed right shift."""
    check_broadcast(a, b)
    width = a.dtype.itemsize * 8
    too_far = b >= width
    if direction == "RIGHT" and a.dtype.kind == "i":  # arithmetic: shifting by width - 1 already leaves the sign
        return np.right_shift(a, np.minimum(b, width - 1).astype(a.dtype)).astype(a.dtype, copy=False)
    shift = np.where(too_far, 0, b).astype(a.dtype)
    shifted = np.left_shift(a, shift) if direction == "LEFT" else np.right_shift(a, shift)
    return np.where(too_far, np.zeros((), a.dtype), shifted).astype(a.dtype, copy=False)
