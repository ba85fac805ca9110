"""Bitwise masks and float-class tests.

Exporters write attention masks with bitwise ops on integer and bool tensors, and
every Hugging Face transformer exported by ``torch.onnx`` guards a softmax with
IsNaN. The bitwise ops take bools as well as integers (numpy's bitwise ufuncs do),
since ``torch.export`` programs apply them to bool masks.
"""

from __future__ import annotations

import numpy as np

from runtime_lite.kernels.cost import like, nbytes, ufunc_cost
from runtime_lite.kernels.registry import kernel

BITWISE_UFUNCS = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}


def _bitwise(ufunc):
    def run(a, b, *, out=None):
        return ufunc(a, b, out=out)

    return run


for _name, _ufunc in BITWISE_UFUNCS.items():
    kernel(_name, inplace=(0, 1), cost=ufunc_cost(_ufunc))(_bitwise(_ufunc))


@kernel("bitwise_not", inplace=(0,), cost=ufunc_cost(np.invert))
def bitwise_not(x, *, out=None):
    return np.invert(x, out=out)


@kernel("isnan", cost=like(dtype=bool))
def isnan(x):
    return np.isnan(x)


@kernel("isinf", cost=lambda x, **_: nbytes(x.shape, bool))
def isinf(x, *, detect_positive, detect_negative):
    if detect_positive and detect_negative:
        return np.isinf(x)
    if detect_positive:
        return np.isposinf(x)
    if detect_negative:
        return np.isneginf(x)
    return np.zeros(x.shape, bool)
