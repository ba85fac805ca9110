"""Indexed reads and writes (gather_nd, scatter_nd, scatter_elements), cumulative sums,
triangles and top-k.

Indices come from the model's inputs or from a bundle, neither of which is trusted:
every index is checked against the axis it addresses before it is used, negative
ones count from the end as ONNX says, and an index out of range raises IndexError
naming the op, the index and the axis size (never a wrong read, never a write
outside the output). Every kernel here returns a fresh array.
"""

from __future__ import annotations

import math

import numpy as np

from runtime_lite.kernels.cost import nbytes
from runtime_lite.kernels.registry import kernel

#: Bytes per index that ``checked_indices`` and numpy's fancy indexing allocate: int64 copies,
#: the wrapped indices, the out-of-range mask and its parts, numpy's own intp arrays.
INDEX_SCRATCH = 8 * 5 + 4


def _gather_nd_cost(data, indices, *, batch_dims) -> int:
    if indices.ndim < 1 or not 0 <= batch_dims < indices.ndim or batch_dims + indices.shape[-1] > data.ndim:
        return 0  # refused by the kernel before it allocates
    rows = math.prod(indices.shape[:-1])
    row = nbytes(data.shape[batch_dims + indices.shape[-1] :], data.dtype)
    return indices.size * INDEX_SCRATCH + rows * (8 + 2 * row)


def _scatter_cost(data, indices, updates, **_) -> int:
    """The copy of ``data`` written into, the checked indices, numpy's index arrays and a reshaped updates."""
    return data.nbytes + indices.size * INDEX_SCRATCH + updates.nbytes


def _cumsum_cost(x, *, axis, exclusive, reverse) -> int:
    return 3 * x.nbytes


def _trilu_cost(x, *, upper, k) -> int:
    """The result and numpy's mask over the last two axes."""
    return x.nbytes + (nbytes(x.shape[-2:], 1) if x.ndim >= 2 else 0)


def _topk_cost(x, *, k, axis, largest, sorted) -> int:  # noqa: A002
    """Two int64 orders over the whole input (argsort and its flip), then k per row: indices and values."""
    if not -x.ndim <= axis < max(x.ndim, 1) or not x.ndim:
        return 0  # refused by the kernel before it allocates
    size = x.shape[axis]
    chosen = k if isinstance(k, int) and 0 <= k <= size else size
    rows = x.size // size if size else 0
    return 3 * nbytes(x.shape, 8) + rows * chosen * (3 * 8 + x.dtype.itemsize)


#: ONNX scatter reductions -> the numpy ufunc whose ``.at`` applies them unbuffered.
SCATTER_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def checked_indices(indices: np.ndarray, sizes, op: str) -> np.ndarray:
    """``indices`` as int64 with negatives wrapped, checked against ``sizes`` (broadcast on the last axis)."""
    if indices.dtype.kind not in "iu":
        raise TypeError(f"{op}: indices must be integers, got {indices.dtype}")
    sizes = np.asarray(sizes, np.int64)
    wrapped = np.where(indices < 0, indices.astype(np.int64) + sizes, indices.astype(np.int64))
    bad = (wrapped < 0) | (wrapped >= sizes)
    if bad.any():
        position = np.argwhere(bad)[0]
        size = int(np.broadcast_to(sizes, bad.shape)[tuple(position)])
        raise IndexError(f"{op}: index {int(indices[tuple(position)])} is out of range for an axis of size {size}")
    return wrapped


def _index_depth(data: np.ndarray, indices: np.ndarray, batch_dims: int, op: str) -> int:
    if indices.ndim < 1:
        raise ValueError(f"{op}: indices must have rank >= 1")
    depth = indices.shape[-1]
    if not 0 <= batch_dims < indices.ndim or batch_dims + depth > data.ndim:
        raise ValueError(
            f"{op}: indices {list(indices.shape)} (batch_dims {batch_dims}) do not fit data {list(data.shape)}"
        )
    if indices.shape[:batch_dims] != data.shape[:batch_dims]:
        raise ValueError(f"{op}: batch dims of indices {list(indices.shape)} and data {list(data.shape)} differ")
    return depth


@kernel("gather_nd", cost=_gather_nd_cost)
def gather_nd(data, indices, *, batch_dims):
    """ONNX GatherND: each row of ``indices``' last axis addresses a slice of ``data`` (after the batch axes)."""
    depth = _index_depth(data, indices, batch_dims, "gather_nd")
    batch_shape = data.shape[:batch_dims]
    batches = int(np.prod(batch_shape, dtype=np.int64))
    rows = checked_indices(indices, data.shape[batch_dims : batch_dims + depth], "gather_nd")
    rows = rows.reshape(batches, math.prod(indices.shape[batch_dims:-1]), depth)  # no -1: batches may be 0
    flat = data.reshape((batches,) + data.shape[batch_dims:])
    picked = flat[(np.arange(batches)[:, None], *np.moveaxis(rows, -1, 0))]
    return picked.reshape(indices.shape[:-1] + data.shape[batch_dims + depth :])


def _scatter(out: np.ndarray, index: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "none":
        out[index] = updates
    elif reduction in SCATTER_REDUCTIONS:
        SCATTER_REDUCTIONS[reduction].at(out, index, updates)
    else:
        raise ValueError(f"reduction {reduction!r} is not one of none, {', '.join(SCATTER_REDUCTIONS)}")
    return out


@kernel("scatter_nd", cost=_scatter_cost)
def scatter_nd(data, indices, updates, *, reduction):
    """ONNX ScatterND: a copy of ``data`` with the slices ``indices`` addresses replaced (or reduced) by ``updates``."""
    depth = _index_depth(data, indices, 0, "scatter_nd")
    want = indices.shape[:-1] + data.shape[depth:]
    if updates.shape != want:
        raise ValueError(f"scatter_nd: updates have shape {list(updates.shape)}, expected {list(want)}")
    count = math.prod(indices.shape[:-1])  # not -1: an empty scatter (no rows, or rows of no index) has no -1
    rows = checked_indices(indices, data.shape[:depth], "scatter_nd").reshape(count, depth)
    updates = updates.reshape((count,) + data.shape[depth:])
    if depth == 0:  # every row addresses the whole of data: applied in order, as onnxruntime does
        out = np.array(data, copy=True)
        for update in updates:
            if reduction == "none":
                out[...] = update
            else:
                _combine(out, update, reduction)
        return out
    return _scatter(np.array(data, copy=True), tuple(rows.T), updates, reduction)


def _combine(out: np.ndarray, update: np.ndarray, reduction: str) -> None:
    if reduction not in SCATTER_REDUCTIONS:
        raise ValueError(f"reduction {reduction!r} is not one of none, {', '.join(SCATTER_REDUCTIONS)}")
    SCATTER_REDUCTIONS[reduction](out, update, out=out)


@kernel("scatter_elements", cost=_scatter_cost)
def scatter_elements(data, indices, updates, *, axis, reduction):
    """ONNX ScatterElements: ``out[..., indices[i, j, ...], ...] = updates[i, j, ...]`` along ``axis``."""
    if not data.ndim == indices.ndim == updates.ndim or indices.shape != updates.shape:
        raise ValueError(
            f"scatter_elements: indices {list(indices.shape)} and updates {list(updates.shape)} must have one shape "
            f"and data's rank {data.ndim}"
        )
    axis = axis + data.ndim if axis < 0 else axis
    if not 0 <= axis < data.ndim:
        raise ValueError(f"scatter_elements: axis {axis} out of range for rank {data.ndim}")
    for i, (n, limit) in enumerate(zip(indices.shape, data.shape)):
        if i != axis and n > limit:
            raise IndexError(
                f"scatter_elements: indices {list(indices.shape)} exceed data {list(data.shape)} on axis {i}"
            )
    index = list(np.ogrid[tuple(slice(n) for n in indices.shape)])
    index[axis] = checked_indices(indices, data.shape[axis], "scatter_elements")
    return _scatter(np.array(data, copy=True), tuple(index), updates, reduction)


@kernel("cumsum", cost=_cumsum_cost)
def cumsum(x, *, axis, exclusive, reverse):
    """ONNX CumSum in the input's dtype; ``exclusive`` shifts by one so each sum leaves out its own element."""
    if reverse:
        x = np.flip(x, axis)
    total = np.cumsum(x, axis=axis, dtype=x.dtype)
    if exclusive:
        shifted = np.zeros_like(total)
        lead = [slice(None)] * x.ndim
        tail = list(lead)
        lead[axis], tail[axis] = slice(1, None), slice(None, -1)
        shifted[tuple(lead)] = total[tuple(tail)]
        total = shifted
    return np.ascontiguousarray(np.flip(total, axis)) if reverse else total


@kernel("trilu", cost=_trilu_cost)
def trilu(x, *, upper, k):
    """ONNX Trilu: keep the upper (or lower) triangle of the last two axes from diagonal ``k``, zero the rest."""
    if x.ndim < 2:
        raise ValueError(f"trilu: needs rank >= 2, got {list(x.shape)}")
    return np.triu(x, int(k)) if upper else np.tril(x, int(k))


@kernel("topk", cost=_topk_cost, outputs=2)
def topk(x, *, k, axis, largest, sorted):  # noqa: A002 - ONNX's attribute name
    """ONNX TopK: the ``k`` largest (or smallest) along ``axis`` and their int64 indices.

    Equal values keep the lower index first, as ONNX requires. A full stable sort
    is used so that holds across the selection boundary too; ``sorted=0`` (order
    unspecified) returns the sorted order as well.
    """
    size = x.shape[axis]
    if not isinstance(k, int) or not 0 <= k <= size:
        raise ValueError(f"topk: k = {k!r} is out of range for an axis of size {size}")
    if largest:
        # Ascending stable sort of the reversed axis, read backwards: descending, ties by lower index.
        order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        order = (size - 1) - np.flip(order, axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, indices, axis=axis), indices
