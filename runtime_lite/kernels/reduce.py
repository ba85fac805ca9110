"""Reductions. ``axes=None`` reduces every axis, as ONNX does when no axes are given."""

from __future__ import annotations

import numpy as np

from runtime_lite.kernels.registry import kernel


def _extreme(dtype: np.dtype, largest: bool):
    """What max (``largest``) or min of an empty set is, as ONNX defines it: the other end of the dtype's range."""
    if dtype.kind == "b":
        return not largest
    if dtype.kind == "f":
        return -np.inf if largest else np.inf
    info = np.iinfo(dtype)
    return info.min if largest else info.max


def _reduction(reduce):
    def run(x, *, axes, keepdims):
        axis = None if axes is None else tuple(axes)
        if x.size == 0 and reduce in (np.max, np.min):  # numpy refuses an empty max; ONNX gives the identity
            initial = _extreme(x.dtype, reduce is np.max)
            return np.asarray(reduce(x, axis=axis, keepdims=bool(keepdims), initial=initial)).astype(x.dtype)
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
