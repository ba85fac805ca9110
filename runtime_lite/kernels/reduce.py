"""Reductions. ``axes=None`` reduces every axis, as ONNX does when no axes are given."""

from __future__ import annotations

import numpy as np

from runtime_lite.kernels.registry import kernel


def _reduction(reduce):
    def run(x, *, axes, keepdims):
        axis = None if axes is None else tuple(axes)
        return np.asarray(reduce(x, axis=axis, keepdims=bool(keepdims))).astype(x.dtype, copy=False)

    return run


for _name, _reduce in {
    "reduce_mean": np.mean,
    "reduce_sum": np.sum,
    "reduce_max": np.max,
    "reduce_min": np.min,
    "reduce_prod": np.prod,
}.items():
    kernel(_name)(_reduction(_reduce))


def _arg_reduce(find):
    """ArgMax / ArgMin as ONNX defines them: int64 indices, the first (or last) of equal extremes."""

    def run(x, *, axis, keepdims, select_last_index):
        if select_last_index:
            index = x.shape[axis] - 1 - find(np.flip(x, axis=axis), axis=axis)
        else:
            index = find(x, axis=axis)
        index = index.astype(np.int64)
        return np.expand_dims(index, axis) if keepdims else index

    return run


kernel("argmax")(_arg_reduce(np.argmax))
kernel("argmin")(_arg_reduce(np.argmin))
