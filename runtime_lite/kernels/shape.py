"""Data movement: reshape, transpose, slicing, concatenation, padding, gathering.

Kernels marked ``view=True`` return numpy views that share memory with their
first input; the compiler's memory planner never writes into their results.
"""

from __future__ import annotations

import math

import numpy as np

from runtime_lite.errors import describe
from runtime_lite.execution.limits import check_allocation
from runtime_lite.kernels.cost import always_view, nbytes, promoted, views
from runtime_lite.kernels.geometry import check_same_pad_attrs, same_pads
from runtime_lite.kernels.registry import kernel

#: A shape tensor holds one entry per axis: more than a bundle's rank limit (32) is not a shape.
MAX_SHAPE_ENTRIES = 32


def shape_dims(values, what: str) -> tuple[int, ...]:
    """Integer dims from an attribute or a shape tensor, refusing anything else.

    The entry count is checked first: converting a 6 M-element "shape" would allocate
    hundreds of MB of Python ints before any budget could refuse it.
    """
    if np.size(values) > MAX_SHAPE_ENTRIES:
        raise ValueError(f"{what}: a shape of {np.size(values)} entries (more than {MAX_SHAPE_ENTRIES} axes)")
    dims = tuple(int(d) for d in np.asarray(values, dtype=np.int64).reshape(-1))
    if any(d < 0 for d in dims):
        raise ValueError(f"{what}: negative dim in {list(dims)}")
    return dims


def _signed_dims(values, what: str) -> tuple[int, ...]:
    """A reshape target (0 and -1 allowed), its entry count checked before any conversion."""
    if np.size(values) > MAX_SHAPE_ENTRIES:
        raise ValueError(f"{what}: a shape of {np.size(values)} entries (more than {MAX_SHAPE_ENTRIES} axes)")
    return tuple(int(d) for d in np.asarray(values).reshape(-1))


def resolve_reshape(in_shape, target, allowzero=0) -> tuple[int, ...]:
    """ONNX Reshape: 0 copies the input dim (unless allowzero), one -1 is inferred.

    Where the target holds a 0 (an empty batch: ``view(batch, seq, -1, 64)`` with batch 0)
    any -1 fits a size-0 tensor; it is inferred from the non-zero dims on both sides, as
    onnxruntime does and as aot's shape inference assumed (``[0, 5, 32] -> [0, 5, -1, 8]``
    gives 4 heads, not 0), so the layers after it see the shapes they were compiled for.
    """
    if not allowzero and any(d == 0 for d in target[len(in_shape) :]):
        raise ValueError(f"reshape: a 0 in {list(target)} copies a dim that input {list(in_shape)} lacks")
    dims = [in_shape[i] if (d == 0 and not allowzero) else int(d) for i, d in enumerate(target)]
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        total = math.prod(in_shape)
        if known:
            inferred = total // known
        else:
            nonzero_in = math.prod(d for d in in_shape if d)
            nonzero_known = math.prod(d for d in dims if d not in (0, -1))
            inferred = nonzero_in // nonzero_known if nonzero_in % nonzero_known == 0 else 0
        dims[dims.index(-1)] = inferred
    return tuple(dims)


def _expand_cost(x, target=None, *, shape) -> int:
    return nbytes(np.broadcast_shapes(x.shape, shape_dims(target if target is not None else shape, "expand")), x.dtype)


def _tile_cost(x, *, repeats) -> int:
    """np.tile repeats one axis at a time: its last intermediate is as large as the result."""
    repeats = shape_dims(repeats, "tile")
    if len(repeats) != x.ndim:
        return 0  # refused by the kernel before it allocates
    return 2 * nbytes([d * r for d, r in zip(x.shape, repeats)], x.dtype)


def _concat_cost(*xs, axis) -> int:
    return sum(x.size for x in xs) * promoted(*xs).itemsize if xs else 0


def _pad_cost(x, *, pads, mode, value) -> int:
    rank = x.ndim
    if len(pads) != 2 * rank or not all(isinstance(p, int) and not isinstance(p, bool) for p in pads):
        return 0  # refused by the kernel before it allocates
    return nbytes([max(d + b + e, 0) for d, b, e in zip(x.shape, pads[:rank], pads[rank:])], x.dtype)


def _gather_cost(data, indices, *, axis) -> int:
    """The result, and numpy's int64 (intp) copy of the indices."""
    if data.ndim and -data.ndim <= axis < data.ndim:
        axis %= data.ndim
        out = nbytes(data.shape[:axis] + indices.shape + data.shape[axis + 1 :], data.dtype)
    else:
        out = nbytes(indices.shape, data.dtype)
    return out + nbytes(indices.shape, 8)


def _gather_elements_cost(data, indices, *, axis) -> int:
    """A mask, two int64 index arrays, numpy's own index arrays, and the result (indices-shaped)."""
    return nbytes(indices.shape, 1 + 8 * 4 + data.dtype.itemsize)


def _constant_of_shape_cost(target, *, value, dtype) -> int:
    return nbytes(shape_dims(target, "constant_of_shape"), np.dtype(dtype))


def _range_scalars(start, limit, delta, op: str = "range") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Range's bounds as scalars: one element each, as onnxruntime takes them ([] or [1]: an If computed as a
    select hands one over as [1]); ValueError naming the operand that holds more."""
    bounds = []
    for name, value in (("start", start), ("limit", limit), ("delta", delta)):
        value = np.asarray(value)
        if value.size != 1:
            raise ValueError(f"{op}: {name} must hold one value, got shape {list(value.shape)}")
        bounds.append(value.reshape(()))
    return bounds[0], bounds[1], bounds[2]


def _range_cost(start, limit, delta) -> int:
    start, limit, delta = _range_scalars(start, limit, delta)
    dtype = np.result_type(start, limit, delta)
    if delta == 0:
        return 0  # refused by the kernel before it allocates
    count = max(0, math.ceil((float(limit) - float(start)) / float(delta)))
    return nbytes([count], dtype)


@kernel("reshape", view=True, cost=views)
def reshape(x, target=None, *, shape, allowzero):
    if target is not None:
        shape = list(_signed_dims(target, "reshape"))
    return x.reshape(resolve_reshape(x.shape, shape, allowzero))


def flatten_axis(axis: int, rank: int) -> int:
    """ONNX Flatten's axis, in 0..rank: a negative one counts from the end, and ``rank`` itself is legal (the
    whole tensor in the first dim: (n, 1), as HF's masks exported by torch.onnx's legacy exporter use it). A
    bundle's value past either end is clamped, never wrapped round."""
    return min(max(axis + rank if axis < 0 else axis, 0), rank)


@kernel("flatten", view=True, cost=views)
def flatten(x, *, axis):
    axis = flatten_axis(axis, x.ndim)
    lead = 1
    for d in x.shape[:axis]:
        lead *= d
    return x.reshape(lead, -1) if x.size else x.reshape(lead, int(np.prod(x.shape[axis:])))


@kernel("transpose", view=True, cost=always_view)
def transpose(x, *, perm):
    return np.transpose(x, perm)


@kernel("squeeze", view=True, cost=always_view)
def squeeze(x, *, axes):
    return np.squeeze(x, axis=None if axes is None else tuple(axes))


@kernel("unsqueeze", view=True, cost=always_view)
def unsqueeze(x, *, axes):
    return np.expand_dims(x, tuple(axes))


@kernel("expand", cost=_expand_cost)
def expand(x, target=None, *, shape):
    """ONNX Expand broadcasts both ways; the result is copied so it is writable and owned."""
    out = np.broadcast_shapes(x.shape, shape_dims(target if target is not None else shape, "expand"))
    check_allocation(out, x.dtype, "expand output")
    return np.array(np.broadcast_to(x, out))


@kernel("tile", cost=_tile_cost)
def tile(x, *, repeats):
    repeats = shape_dims(repeats, "tile")
    if len(repeats) != x.ndim:
        raise ValueError(f"tile: {len(repeats)} repeats for a rank-{x.ndim} input")
    check_allocation([d * r for d, r in zip(x.shape, repeats)], x.dtype, "tile output")
    return np.tile(x, repeats)


@kernel("concat", cost=_concat_cost)
def concat(*xs, axis):
    return np.concatenate(xs, axis=axis)


@kernel("split", view=True, cost=always_view, outputs=lambda attrs: max(1, len(attrs["sizes"])))
def split(x, *, axis, sizes):
    bounds = np.cumsum(sizes)[:-1]
    return tuple(np.split(x, bounds, axis=axis))


def onnx_slice(dim: int, start: int, end: int, step: int) -> slice:
    """Clamp ONNX Slice bounds as the spec does; for negative steps an end of -1 means 'past index 0'."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
        return slice(start, end, step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


@kernel("slice", view=True, cost=always_view)
def slice_(x, *, starts, ends, axes, steps):
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        index[axis] = onnx_slice(x.shape[axis], start, end, step)
    return x[tuple(index)]


@kernel("dynamic_slice", view=True, cost=always_view)
def dynamic_slice(x, starts, ends, *, axes, steps):
    """ONNX Slice whose bounds are computed at run time (``x[:, :seq]`` with a symbolic seq)."""
    starts, ends = np.asarray(starts).reshape(-1), np.asarray(ends).reshape(-1)
    if not len(starts) == len(ends) == len(axes):
        raise ValueError(f"dynamic_slice: {len(starts)} starts and {len(ends)} ends for {len(axes)} axes")
    return slice_(x, starts=[int(v) for v in starts], ends=[int(v) for v in ends], axes=axes, steps=steps)


@kernel("pad", cost=_pad_cost)
def pad(x, *, pads, mode, value):
    """ONNX Pad over every axis; negative pads crop."""
    rank = x.ndim
    if len(pads) != 2 * rank or not all(isinstance(p, int) and not isinstance(p, bool) for p in pads):
        raise ValueError(f"pad: a rank-{rank} input needs {2 * rank} integer pads, got {describe(pads)}")
    begins, ends = pads[:rank], pads[rank:]
    for axis, (d, b, e) in enumerate(zip(x.shape, begins, ends)):
        if max(-b, 0) + max(-e, 0) > d:  # crops first, then pads: a crop past the axis is no ONNX Pad
            raise ValueError(f"pad: pads ({b}, {e}) crop more than axis {axis} holds ({d})")
    check_allocation([d + b + e for d, b, e in zip(x.shape, begins, ends)], x.dtype, "pad output")
    if any(p < 0 for p in pads):
        x = x[tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(begins, ends)))]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=np.asarray(value, x.dtype))
    return np.pad(x, widths, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])


def _same_pad_widths(x, kernel_shape, strides, dilations, lower) -> list[int]:
    nd = len(kernel_shape)
    if x.ndim < nd:
        raise ValueError(f"same_pad: a rank-{x.ndim} input has fewer than {nd} spatial axes")
    pads = same_pads(x.shape[x.ndim - nd :], kernel_shape, strides, dilations, bool(lower))
    lead = [0] * (x.ndim - nd)
    return lead + pads[:nd] + lead + pads[nd:]


def _same_pad_cost(x, *, kernel_shape, strides, dilations, lower, value) -> int:
    return _pad_cost(x, pads=_same_pad_widths(x, kernel_shape, strides, dilations, lower), mode="constant", value=value)


@kernel("same_pad", check=check_same_pad_attrs, cost=_same_pad_cost)
def same_pad(x, *, kernel_shape, strides, dilations, lower, value):
    """Pad the trailing spatial axes as auto_pad SAME does for this input's size, so a VALID window op
    after it computes the SAME result: the padding of a size known only at run time, for a stride above 1.
    A filled array with the input assigned into it (np.pad's per-call overhead is most of a small map's time)."""
    widths = _same_pad_widths(x, kernel_shape, strides, dilations, lower)
    rank = x.ndim
    shape = [d + b + e for d, b, e in zip(x.shape, widths[:rank], widths[rank:])]
    check_allocation(shape, x.dtype, "same_pad output")
    padded = np.full(shape, np.asarray(value, x.dtype), x.dtype)
    padded[tuple(slice(b, b + d) for b, d in zip(widths[:rank], x.shape))] = x
    return padded


@kernel("gather", cost=_gather_cost)
def gather(data, indices, *, axis):
    if data.ndim:
        axis = axis % data.ndim if -data.ndim <= axis < data.ndim else axis  # np.take rejects the rest
        check_allocation(data.shape[:axis] + indices.shape + data.shape[axis + 1 :], data.dtype, "gather output")
    return np.take(data, indices, axis=axis)


@kernel("gather_elements", cost=_gather_elements_cost)
def gather_elements(data, indices, *, axis):
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    return np.take_along_axis(data, indices, axis=axis)


@kernel("shape", cost=lambda x, **_: 8 * x.ndim)
def shape(x, *, start, end):
    return np.array(x.shape[start:end], dtype=np.int64)


@kernel("constant_of_shape", cost=_constant_of_shape_cost)
def constant_of_shape(target, *, value, dtype):
    shape = shape_dims(target, "constant_of_shape")
    check_allocation(shape, np.dtype(dtype), "constant_of_shape output")
    return np.full(shape, value, dtype=dtype)


@kernel("range", cost=_range_cost)
def range_(start, limit, delta):
    start, limit, delta = _range_scalars(start, limit, delta)
    dtype = np.result_type(start, limit, delta)
    if delta == 0:
        raise ValueError("range: delta is 0")
    count = max(0, math.ceil((float(limit) - float(start)) / float(delta)))
    check_allocation([count], dtype, "range output")
    return np.arange(start, limit, delta, dtype=dtype)
