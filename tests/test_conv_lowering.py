"""Each lowering of convolution against onnxruntime: pointwise, grouped pointwise, im2col, blocked im2col,
batch folded into one GEMM, shifted GEMMs, channels-last depthwise.

The kernel picks its lowering from the shapes; the thresholds are moved here so small
tensors take the batch-folded or the blocked path (many blocks, each a few output
rows), and the result must not change. Every lowering is spied on, so each test also
checks that the lowering it is about is the one that ran.
"""

from __future__ import annotations

from collections import Counter

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


GEMM_MODES = ["one-im2col", "blocked-im2col", "batch-folded"]
#: The lowering each case takes with the thresholds of each GEMM mode (a string: in every mode).
EXPECTED = {
    "pointwise strided": {"one-im2col": "_pointwise", "blocked-im2col": "_pointwise", "batch-folded": "_fold_batch"},
    "grouped pointwise": "_pointwise",
    "3x3 padded dilated": {
        "one-im2col": "_im2col",
        "blocked-im2col": "_blocked_im2col",
        "batch-folded": "_fold_batch",
    },
    "depthwise": "_depthwise_channels_last",
    "depthwise channels-last": "_depthwise_channels_last",
    "depthwise large map": "_depthwise_blocks",
    "shifted GEMMs": "_shifted_gemms",
    "shifted GEMMs dilated, uneven pads": "_shifted_gemms",
    "1-d": {"one-im2col": "_im2col", "blocked-im2col": "_blocked_im2col", "batch-folded": "_fold_batch"},
    "3-d": {"one-im2col": "_im2col", "blocked-im2col": "_blocked_im2col", "batch-folded": "_fold_batch"},
}
LOWERINGS = (
    "_depthwise_channels_last",
    "_shifted_gemms",
    "_fold_batch",
    "_pointwise",
    "_depthwise_blocks",
    "_blocked_im2col",
    "_im2col",
)


def expected_lowering(name: str, gemm: str) -> str:
    expected = EXPECTED[name]
    return expected if isinstance(expected, str) else expected[gemm]


def force(gemm: str, monkeypatch) -> Counter:
    """Thresholds set for ``gemm``; returns the calls of each lowering, counted from here on."""
    folded = 10**9 if gemm == "batch-folded" else 0  # every map small enough, or none
    monkeypatch.setattr(conv_kernel, "BATCH_FOLD_PIXELS", folded)
    monkeypatch.setattr(conv_kernel, "BATCH_FOLD_POINTWISE_PIXELS", folded)
    if gemm == "blocked-im2col":
        monkeypatch.setattr(conv_kernel, "BLOCKED_IM2COL_BYTES", 0)
        monkeypatch.setattr(conv_kernel, "IM2COL_BLOCK_BYTES", 256)
    calls: Counter = Counter()
    for lowering in LOWERINGS:
        original = getattr(conv_kernel, lowering)

        def spy(*args, _lowering=lowering, _original=original, **kwargs):
            calls[_lowering] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(conv_kernel, lowering, spy)
    return calls


def test_every_lowering_is_covered():
    covered = {expected_lowering(name, gemm) for name in CASES for gemm in GEMM_MODES}
    assert covered == set(LOWERINGS)
    assert all(hasattr(conv_kernel, lowering) for lowering in LOWERINGS)


@pytest.mark.parametrize("gemm", GEMM_MODES)
@pytest.mark.parametrize("name", list(CASES))
def test_lowering_matches_onnxruntime(name, gemm, monkeypatch):
    if name == "depthwise large map":
        assert not conv_kernel._small_output((40, 40), (3, 3), [1, 1], [1, 1, 1, 1], [1, 1])  # im2col path
    if name.startswith("shifted GEMMs"):
        assert CASES[name][1][0] <= conv_kernel.SHIFTED_GEMM_MAX_OUTPUTS
    if name == "depthwise channels-last":
        assert conv_kernel._small_output((9, 8), (3, 2), [2, 1], [1, 0, 2, 1], [1, 2])
    x_shape, w_shape, attrs = CASES[name]
    calls = force(gemm, monkeypatch)
    model = make_model(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)],
        {"x": rand(*x_shape, seed=1)},
        ["y"],
        {"w": rand(*w_shape, seed=2), "b": rand(w_shape[0], seed=3)},
    )
    assert_matches_onnxruntime(model, {"x": rand(*x_shape, seed=1)}, rtol=1e-5, atol=1e-5)
    assert set(calls) == {expected_lowering(name, gemm)}, dict(calls)


#: One case per lowering: the case and the GEMM mode that force it.
ONE_PER_LOWERING = {
    "_depthwise_channels_last": ("depthwise channels-last", "batch-folded"),
    "_shifted_gemms": ("shifted GEMMs", "batch-folded"),
    "_fold_batch": ("3x3 padded dilated", "batch-folded"),
    "_pointwise": ("pointwise strided", "one-im2col"),
    "_depthwise_blocks": ("depthwise large map", "one-im2col"),
    "_blocked_im2col": ("3-d", "blocked-im2col"),
    "_im2col": ("3x3 padded dilated", "one-im2col"),
}


@pytest.mark.parametrize("lowering", LOWERINGS)
def test_without_bias_every_lowering_adds_nothing(lowering, monkeypatch):
    name, gemm = ONE_PER_LOWERING[lowering]
    assert expected_lowering(name, gemm) == lowering
    x_shape, w_shape, attrs = CASES[name]
    nd = len(w_shape) - 2
    x, w = rand(*x_shape, seed=1), rand(*w_shape, seed=2)
    options = dict(
        strides=attrs.get("strides", [1] * nd),
        pads=attrs.get("pads", [0] * 2 * nd),
        dilations=attrs.get("dilations", [1] * nd),
        groups=attrs.get("group", 1),
    )
    calls = force(gemm, monkeypatch)
    without = conv_kernel.conv(x, w, None, **options)
    with_zero = conv_kernel.conv(x, w, np.zeros(w_shape[0], np.float32), **options)
    assert calls == {lowering: 2}
    assert without.flags.c_contiguous
    np.testing.assert_array_equal(without, with_zero)
