"""Each lowering of convolution against onnxruntime: pointwise, grouped pointwise, im2col, blocked im2col,
batch folded into one GEMM, shifted GEMMs, channels-last depthwise.

The kernel picks its lowering from the shapes; the thresholds are lowered here so
small tensors take the blocked path (many blocks, each a few output rows), and the
result must not change.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from runtime_lite.kernels import conv as conv_kernel
from tests.helpers import assert_matches_onnxruntime, make_model, rand

CASES = {
    "pointwise strided": ((2, 8, 9, 9), (6, 8, 1, 1), dict(strides=[2, 2], group=1)),
    "grouped pointwise": ((1, 12, 5, 5), (12, 3, 1, 1), dict(group=4)),
    "3x3 padded dilated": ((2, 3, 20, 20), (8, 3, 3, 3), dict(strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2])),
    "depthwise": ((1, 6, 7, 7), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),
    "depthwise channels-last": (
        (2, 5, 9, 8),
        (5, 1, 3, 2),
        dict(group=5, strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2]),
    ),
    "depthwise large map": ((1, 4, 40, 40), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1])),
    "shifted GEMMs": ((2, 5, 9, 8), (7, 5, 3, 3), dict(pads=[1, 1, 1, 1])),
    "shifted GEMMs dilated, uneven pads": ((1, 3, 8, 6), (4, 3, 3, 4), dict(pads=[0, 2, 1, 0], dilations=[2, 2])),
    "1-d": ((2, 3, 9), (4, 3, 3), dict(pads=[1, 1])),
    "3-d": ((2, 2, 6, 7, 8), (3, 2, 3, 2, 3), dict(strides=[1, 2, 1], pads=[1, 0, 1, 1, 0, 1], dilations=[1, 1, 2])),
}


@pytest.mark.parametrize("gemm", ["one-im2col", "blocked-im2col", "batch-folded"])
@pytest.mark.parametrize("name", list(CASES))
def test_lowering_matches_onnxruntime(name, gemm, monkeypatch):
    if name == "depthwise large map":
        assert not conv_kernel._small_output((40, 40), (3, 3), [1, 1], [1, 1, 1, 1], [1, 1])  # im2col path
    if name.startswith("shifted GEMMs"):
        assert CASES[name][1][0] <= conv_kernel.SHIFTED_GEMM_MAX_OUTPUTS
    if name == "depthwise channels-last":
        assert conv_kernel._small_output((9, 8), (3, 2), [2, 1], [1, 0, 2, 1], [1, 2])
    x_shape, w_shape, attrs = CASES[name]
    folded = 10**9 if gemm == "batch-folded" else 0  # every map small enough, or none
    monkeypatch.setattr(conv_kernel, "BATCH_FOLD_PIXELS", folded)
    monkeypatch.setattr(conv_kernel, "BATCH_FOLD_POINTWISE_PIXELS", folded)
    if gemm == "blocked-im2col":
        monkeypatch.setattr(conv_kernel, "BLOCKED_IM2COL_BYTES", 0)
        monkeypatch.setattr(conv_kernel, "IM2COL_BLOCK_BYTES", 256)
    model = make_model(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)],
        {"x": rand(*x_shape, seed=1)},
        ["y"],
        {"w": rand(*w_shape, seed=2), "b": rand(w_shape[0], seed=3)},
    )
    assert_matches_onnxruntime(model, {"x": rand(*x_shape, seed=1)}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["shifted GEMMs", "3x3 padded dilated", "pointwise strided", "3-d"])
def test_without_bias_every_lowering_adds_nothing(name, monkeypatch):
    monkeypatch.setattr(conv_kernel, "BATCH_FOLD_PIXELS", 10**9)
    monkeypatch.setattr(conv_kernel, "BATCH_FOLD_POINTWISE_PIXELS", 10**9)
    x_shape, w_shape, attrs = CASES[name]
    nd = len(w_shape) - 2
    x, w = rand(*x_shape, seed=1), rand(*w_shape, seed=2)
    options = dict(
        strides=attrs.get("strides", [1] * nd),
        pads=attrs.get("pads", [0] * 2 * nd),
        dilations=attrs.get("dilations", [1] * nd),
        groups=attrs.get("group", 1),
    )
    without = conv_kernel.conv(x, w, None, **options)
    with_zero = conv_kernel.conv(x, w, np.zeros(w_shape[0], np.float32), **options)
    assert without.flags.c_contiguous
    np.testing.assert_array_equal(without, with_zero)
