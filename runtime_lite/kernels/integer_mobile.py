"""The integer kernels mobile networks need beside products: lookup tables, averages, requantized concat.

What an NPU computes, without float, for the ops between its convolutions
(docs/npu.md, "int8"):

* ``int8_lut``: hard-swish, hard-sigmoid (any elementwise function of one int8) as a
  256-entry table indexed by the int8 value; the compiler fills the table by running
  the float graph's own ``dequantize -> op -> quantize`` on all 256 inputs, so the
  lookup equals the float graph bit for bit;
* ``int8_mean``: global average pooling: the int8 values summed in int32 over the
  spatial axes, then ``sum * s_x / (count * s_y)`` as one fixed-point requantization
  (Q31 multiplier and shift, rounded half away from zero: integer.py's ``requantize``);
* ``int8_concat``: each int8 input requantized to the output's scale (an input
  already at that scale has multiplier 2**30, shift 30: an exact copy), then joined.

The requantization constants are attributes (one per tensor, or per input of a concat),
checked when a bundle loads: multipliers in [0, 2**31), shifts in [1, 62].

All zero points are 0 for the mean and the concat (the patterns' checks make sure);
the table takes any zero point, since it is computed from the quantized semantics.
"""

from __future__ import annotations

import numpy as np

from runtime_lite.kernels.cost import nbytes
from runtime_lite.kernels.integer import _check_activation, _check_int8, requantize
from runtime_lite.kernels.registry import kernel

#: Entries of a lookup table: one per int8 value, -128 first.
TABLE_SIZE = 256
#: The fixed-point form of a rescale by 1: an input already at the output's scale is copied.
IDENTITY_MULTIPLIER, IDENTITY_SHIFT = 1 << 30, 30


def _lut_cost(x, table) -> int:
    return nbytes(x.shape, 2) + x.size  # the uint8 index (as int16 arithmetic) and the int8 result


@kernel("int8_lut", cost=_lut_cost)
def int8_lut(x, table):
    """``table[x + 128]``: an elementwise function of int8 values, looked up."""
    _check_int8("int8_lut", x=x, table=table)
    if table.shape != (TABLE_SIZE,):
        raise ValueError(f"int8_lut: table must be int8[{TABLE_SIZE}], got {list(table.shape)}")
    return table[x.view(np.uint8) ^ np.uint8(0x80)]  # two's complement + 128 is the sign bit flipped


def _check_requantize(multipliers: list, shifts: list) -> None:
    for name, values, low, high in (("multiplier", multipliers, 0, 2**31 - 1), ("shift", shifts, 1, 62)):
        if not all(isinstance(v, int) and not isinstance(v, bool) and low <= v <= high for v in values):
            raise ValueError(f"attribute {name}s must be integers in [{low}, {high}], got {values!r}")
    if len(multipliers) != len(shifts):
        raise ValueError(f"{len(multipliers)} multipliers but {len(shifts)} shifts: one of each per input")


def _check_mean_attrs(attrs: dict) -> None:
    axes = attrs["axes"]
    if not (isinstance(axes, list) and axes and all(isinstance(a, int) and not isinstance(a, bool) for a in axes)):
        raise ValueError(f"attribute axes must be a non-empty list of integers, got {axes!r}")
    if attrs["keepdims"] not in (0, 1):
        raise ValueError(f"attribute keepdims must be 0 or 1, got {attrs['keepdims']!r}")
    _check_requantize([attrs["multiplier"]], [attrs["shift"]])
    _check_activation(attrs["act_min"], attrs["act_max"])


def _mean_cost(x, *, axes, keepdims, multiplier, shift, act_min, act_max) -> int:
    reduced = {a % max(x.ndim, 1) for a in axes}
    kept = [1 if i in reduced else d for i, d in enumerate(x.shape)]
    return 4 * nbytes(kept, 8)  # the int64 sums, the product, its magnitude, the clip


@kernel("int8_mean", check=_check_mean_attrs, cost=_mean_cost)
def int8_mean(x, *, axes, keepdims, multiplier, shift, act_min, act_max):
    """The int8 values' sum over ``axes`` (exact, in int64), requantized once to the output's scale."""
    _check_int8("int8_mean", x=x)
    if any(not -x.ndim <= a < x.ndim for a in axes):
        raise ValueError(f"int8_mean: axes {axes} out of range for rank {x.ndim}")
    total = x.sum(axis=tuple(axes), dtype=np.int64, keepdims=bool(keepdims))
    return requantize(total, np.int64(multiplier), np.int64(shift), act_min, act_max)


def _check_concat_attrs(attrs: dict) -> None:
    if not isinstance(attrs["axis"], int) or isinstance(attrs["axis"], bool):
        raise ValueError(f"attribute axis must be an integer, got {attrs['axis']!r}")
    multipliers, shifts = attrs["multipliers"], attrs["shifts"]
    if not (isinstance(multipliers, list) and isinstance(shifts, list)):
        raise ValueError("attributes multipliers and shifts must be lists")
    _check_requantize(multipliers, shifts)


def _concat_cost(*xs, axis, multipliers, shifts) -> int:
    total = sum(x.size for x in xs)
    return 4 * total * 8 + total  # requantize's int64 temporaries, the int8 result


@kernel("int8_concat", check=_check_concat_attrs, cost=_concat_cost)
def int8_concat(*xs, axis, multipliers, shifts):
    """Each int8 input requantized to the output's scale by its multiplier and shift, then joined on ``axis``."""
    _check_int8("int8_concat", **{f"input {i}": x for i, x in enumerate(xs)})
    if len(multipliers) != len(xs):
        raise ValueError(f"int8_concat: {len(xs)} inputs but {len(multipliers)} multipliers")
    parts = [
        x if (m, s) == (IDENTITY_MULTIPLIER, IDENTITY_SHIFT) else requantize(x, np.int64(m), np.int64(s), -128, 127)
        for x, m, s in zip(xs, multipliers, shifts)
    ]
    return np.concatenate(parts, axis=axis)
