"""Pooling reduced flat in blocks of planes, against onnxruntime.

The block size is lowered here so that small tensors are split into many blocks
(with a short last one), and a kernel of extent 1 sits between two real axes, so a
pass must never read the buffer it writes.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from runtime_lite.kernels import pool as pool_kernel
from tests.helpers import assert_matches_onnxruntime, make_model, rand

CASES = {
    "max 3x3 s2 padded": ("MaxPool", (2, 5, 12, 11), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "max ceil mode": ("MaxPool", (1, 3, 9, 10), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "max dilated": (
        "MaxPool",
        (1, 2, 11, 9),
        dict(kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 1], pads=[0, 1, 1, 0]),
    ),
    "max 3-d with a unit axis": ("MaxPool", (1, 3, 5, 4, 6), dict(kernel_shape=[3, 1, 3], pads=[1, 0, 1, 1, 0, 1])),
    "max 1-d": ("MaxPool", (3, 2, 15), dict(kernel_shape=[4], strides=[3])),
    "average excluding pads": (
        "AveragePool",
        (2, 3, 10, 9),
        dict(kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 1, 1]),
    ),
    "average including pads": (
        "AveragePool",
        (1, 4, 7, 8),
        dict(kernel_shape=[3, 2], pads=[1, 0, 1, 1], count_include_pad=1, ceil_mode=1, strides=[2, 2]),
    ),
}


@pytest.mark.parametrize("block_bytes", [1 << 20, 1000], ids=["one-block", "many-blocks"])
@pytest.mark.parametrize("name", list(CASES))
def test_pooling_matches_onnxruntime(name, block_bytes, monkeypatch):
    monkeypatch.setattr(pool_kernel, "POOL_BLOCK_BYTES", block_bytes)
    op, shape, attrs = CASES[name]
    x = rand(*shape, seed=4)
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x}, rtol=1e-6, atol=1e-6)


def test_integer_max_pool_pads_with_the_lowest_value(monkeypatch):
    monkeypatch.setattr(pool_kernel, "POOL_BLOCK_BYTES", 64)
    x = np.full((2, 3, 5, 5), -128, np.int8)
    x[:, :, 2, 2] = np.arange(6, dtype=np.int8).reshape(2, 3)
    y = pool_kernel.max_pool(x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 1], ceil_mode=0)
    assert y.dtype == np.int8 and y.shape == (2, 3, 3, 3)
    np.testing.assert_array_equal(y[:, :, 1, 1], np.arange(6).reshape(2, 3))
    assert (y[:, :, 0, 0] == -128).all()  # the padding never wins


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_a_window_as_large_as_the_map_is_a_plain_reduction(op):
    x = rand(2, 6, 7, 7, seed=5)
    model = make_model([helper.make_node(op, ["x"], ["y"], kernel_shape=[7, 7])], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x}, rtol=1e-6, atol=1e-6)
