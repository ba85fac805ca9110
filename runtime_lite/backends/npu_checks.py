"""Load-time checks of the NPU's data-movement and mobile ops: attributes in range, shapes that fit.

A kernel's own ``check`` sees its attributes alone; these also see the shapes the
graph declares for the dispatch's inputs and output, so a transpose whose ``perm``
is no permutation, a squeeze of a dim that is not 1, a concat along a missing axis,
a lookup table of the wrong size or a resize to another shape than the node declares
is refused when the bundle loads, as one ``BundleError`` naming the field, rather than
failing in the middle of a run.

Layout ops (reshape, flatten, squeeze, unsqueeze, transpose, slice) are checked by
running their host kernel on a stand-in of the input's shape that has no memory
(``np.broadcast_to`` of one element): numpy does the validation and gives the shape.
The ops that compute get their output shape from their attributes here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from runtime_lite import kernels as host_kernels
from runtime_lite.errors import BundleError

Shape = tuple[int, ...]
LAYOUT_OPS = frozenset({"reshape", "flatten", "squeeze", "unsqueeze", "transpose", "slice"})


class _Misfit(ValueError):
    pass


def _axis(value: Any, rank: int, name: str = "axis") -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not -rank <= value < rank:
        raise _Misfit(f"{name} {value!r} is out of range for rank {rank}")
    return value % rank


def _finite(attrs: dict, *names: str, positive: bool = False) -> None:
    for name in names:
        v = attrs[name]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or (positive and v <= 0):
            raise _Misfit(f"{name} must be a finite{' positive' if positive else ''} number, got {v!r}")


def _slice_attrs(attrs: dict, rank: int) -> None:
    lists = [attrs[k] for k in ("starts", "ends", "axes", "steps")]
    if not all(isinstance(v, list) and len(v) == len(lists[0]) for v in lists):
        raise _Misfit("starts, ends, axes and steps must be lists of one length")
    for axis in attrs["axes"]:
        _axis(axis, rank)
    if any(not isinstance(v, int) or isinstance(v, bool) for v in (x for values in lists for x in values)):
        raise _Misfit("starts, ends, axes and steps must be integers")
    if 0 in attrs["steps"]:
        raise _Misfit("a step of 0")


def _layout(op: str, attrs: dict, shapes: Sequence[Shape], dtypes: Sequence[np.dtype]) -> Shape:
    if op == "slice":
        _slice_attrs(attrs, len(shapes[0]))
    stand_in = np.broadcast_to(np.zeros((), dtypes[0]), shapes[0])
    try:
        return host_kernels.KERNELS[op].fn(stand_in, **attrs).shape
    except (ValueError, TypeError, IndexError, np.exceptions.AxisError) as e:
        raise _Misfit(str(e).split("\n")[0]) from None


def _same(op: str, attrs: dict, shapes: Sequence[Shape], dtypes: Sequence[np.dtype]) -> Shape:
    if op == "hard_sigmoid":
        _finite(attrs, "alpha", "beta")
    if op == "layer_norm":
        _axis(attrs["axis"], len(shapes[0]))
        _finite(attrs, "epsilon", positive=True)
    return shapes[0]


def _reduced(op: str, attrs: dict, shapes: Sequence[Shape], dtypes: Sequence[np.dtype]) -> Shape:
    shape, axes = shapes[0], attrs["axes"]
    if not isinstance(axes, list) or not axes:
        raise _Misfit(f"axes must be a non-empty list, got {axes!r}")
    axes = {_axis(a, len(shape), "axis") for a in axes}
    keep = attrs["keepdims"]
    if keep not in (0, 1):
        raise _Misfit(f"keepdims must be 0 or 1, got {keep!r}")
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)


def _concat(op: str, attrs: dict, shapes: Sequence[Shape], dtypes: Sequence[np.dtype]) -> Shape:
    if op == "int8_concat" and len(attrs["multipliers"]) != len(shapes):
        raise _Misfit(f"{len(shapes)} inputs need {len(shapes)} multipliers, got {len(attrs['multipliers'])}")
    first = shapes[0]
    axis = _axis(attrs["axis"], len(first))
    for s in shapes[1:]:
        if len(s) != len(first) or any(a != b for i, (a, b) in enumerate(zip(s, first)) if i != axis):
            raise _Misfit(f"inputs {list(first)} and {list(s)} differ outside axis {axis}")
    return (*first[:axis], sum(s[axis] for s in shapes), *first[axis + 1 :])


def _resize(op: str, attrs: dict, shapes: Sequence[Shape], dtypes: Sequence[np.dtype]) -> Shape:
    shape, scales, sizes = shapes[0], attrs["scales"], attrs["sizes"]
    given = sizes if sizes is not None else scales
    if len(given) != len(shape):
        raise _Misfit(f"{'sizes' if sizes is not None else 'scales'} need one entry per axis of {list(shape)}")
    return tuple(sizes) if sizes is not None else tuple(int(np.floor(d * s)) for d, s in zip(shape, scales))


def _conv_transpose(op: str, attrs: dict, shapes: Sequence[Shape], dtypes: Sequence[np.dtype]) -> Shape:
    x, w = shapes[0], shapes[1]
    if len(x) != 4 or len(w) != 4 or x[1] != w[0]:
        raise _Misfit(f"input {list(x)} and weight {list(w)} do not fit (weight: C_in, C_out/groups, kH, kW)")
    s, p, d, o = attrs["strides"], attrs["pads"], attrs["dilations"], attrs["output_padding"]
    spatial = [s[i] * (x[2 + i] - 1) + o[i] + (w[2 + i] - 1) * d[i] + 1 - p[i] - p[i + 2] for i in range(2)]
    return (x[0], w[1] * attrs["groups"], *spatial)


def _lut(op: str, attrs: dict, shapes: Sequence[Shape], dtypes: Sequence[np.dtype]) -> Shape:
    if shapes[1] != (256,) or dtypes[1] != np.int8 or dtypes[0] != np.int8:
        raise _Misfit(f"takes an int8 input and an int8[256] table, got {dtypes[1]}{list(shapes[1])}")
    return shapes[0]


SHAPES: dict[str, Callable[..., Shape]] = {
    **dict.fromkeys(LAYOUT_OPS, _layout),
    **dict.fromkeys(("hard_swish", "hard_sigmoid", "layer_norm"), _same),
    "reduce_mean": _reduced,
    "int8_mean": _reduced,
    "concat": _concat,
    "int8_concat": _concat,
    "resize": _resize,
    "conv_transpose2d": _conv_transpose,
    "int8_lut": _lut,
}


def check_dispatch(
    op: str, attrs: dict, shapes: Sequence[Shape], dtypes: Sequence[np.dtype], output: Shape, field: str
) -> None:
    """A single-op dispatch of ``op`` over inputs of ``shapes``: its attributes, and the output it declares."""
    infer = SHAPES.get(op)
    if infer is None:
        return
    try:
        shape = tuple(infer(op, attrs, shapes, dtypes))
    except _Misfit as e:
        raise BundleError(f"bundle field '{field}.body[0].attrs': {op}: {e}") from None
    if shape != tuple(output):
        raise BundleError(
            f"bundle field '{field}.shape': {op} of {[list(s) for s in shapes]} with these attributes gives "
            f"{list(shape)}, but the node declares {list(output)}"
        )
