"""Each lowering of convolution against onnxruntime: pointwise, grouped pointwise, im2col, blocked im2col,
batch folded into one GEMM, shifted GEMMs, depthwise as one einsum over its taps.

The kernel picks its lowering from the shapes; the thresholds are moved here so small
tensors take the batch-folded or the blocked path (many blocks, each a few output
rows), and the result must not change. Every lowering is spied on, so each test also
checks that the lowering it is about is the one that ran.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import helper

from runtime_lite.kernels import conv as conv_kernel
from tests.helpers import assert_matches_onnxruntime, make_model, rand

CASES = {
    "pointwise strided": ((2, 8, 9, 9), (6, 8, 1, 1), dict(strides=[2, 2], group=1)),
    "grouped pointwise": ((1, 12, 5, 5), (12, 3, 1, 1), dict(group=4)),
    "3x3 padded dilated": ((2, 3, 20, 20), (8, 3, 3, 3), dict(strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2])),
    "depthwise": ((1, 6, 7, 7), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),
    "depthwise taps": (
        (2, 5, 9, 8),
        (5, 1, 3, 2),
        dict(group=5, strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2]),
    ),
    "depthwise taps, column phases": (
        (1, 3, 11, 13),
        (3, 1, 3, 5),
        dict(group=3, strides=[3, 2], pads=[0, 2, 1, 1], dilations=[2, 3]),
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
    "depthwise": "_depthwise_taps",
    "depthwise taps": "_depthwise_taps",
    "depthwise taps, column phases": "_depthwise_taps",
    "depthwise large map": "_depthwise_blocks",
    "shifted GEMMs": "_shifted_gemms",
    "shifted GEMMs dilated, uneven pads": "_shifted_gemms",
    "1-d": {"one-im2col": "_im2col", "blocked-im2col": "_blocked_im2col", "batch-folded": "_fold_batch"},
    "3-d": {"one-im2col": "_im2col", "blocked-im2col": "_blocked_im2col", "batch-folded": "_fold_batch"},
}
LOWERINGS = (
    "_depthwise_taps",
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
        assert not conv_kernel._taps_depthwise((40, 40), (3, 3))  # im2col path
    if name.startswith("shifted GEMMs"):
        assert CASES[name][1][0] <= conv_kernel.SHIFTED_GEMM_MAX_OUTPUTS
    if name.startswith("depthwise taps"):
        monkeypatch.setattr(conv_kernel, "TAPS_DEPTHWISE_PARALLEL_MACS", 0)  # row blocks on the threads,
        monkeypatch.setattr(conv_kernel, "TAPS_DEPTHWISE_BLOCK_BYTES", 1)  # one output row each
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
    "_depthwise_taps": ("depthwise taps", "batch-folded"),
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


def _depthwise_reference(x, w, b, strides, pads, dilations) -> np.ndarray:
    """Depthwise 2-d convolution in float64, one shifted slice per tap: slow and obviously right."""
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    padded = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]))
    padded[:, :, pads[0] : pads[0] + h, pads[1] : pads[1] + wd] = x
    oh = (padded.shape[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (padded.shape[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    y = np.zeros((n, c, oh, ow)) + (0 if b is None else b.astype(np.float64)[:, None, None])
    for i, j in np.ndindex(kh, kw):
        top, left = i * dilations[0], j * dilations[1]
        rows = slice(top, top + strides[0] * (oh - 1) + 1, strides[0])
        columns = slice(left, left + strides[1] * (ow - 1) + 1, strides[1])
        y += padded[:, :, rows, columns] * w[:, 0, i, j].astype(np.float64)[:, None, None]
    return y


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 2), st.integers(1, 6), st.integers(1, 9), st.integers(1, 9),  # n, c, h, w
    st.integers(1, 5), st.integers(1, 5), st.integers(1, 3), st.integers(1, 3),  # kernel, strides
    st.integers(1, 2), st.integers(1, 3), st.lists(st.integers(0, 2), min_size=4, max_size=4),
    st.booleans(), st.booleans(), st.booleans(),
)  # fmt: skip
def test_depthwise_taps_matches_reference(n, c, h, wd, kh, kw, sh, sw, dh, dw, pads, bias, strided_input, blocks):
    """Any geometry (column phases for every stride and dilation), bias or not, a strided input, row blocks."""
    assume(h + pads[0] + pads[2] >= dh * (kh - 1) + 1 and wd + pads[1] + pads[3] >= dw * (kw - 1) + 1)
    rng = np.random.default_rng(n * 1000 + c * 100 + h * 10 + wd)
    x = rng.standard_normal((n, 2 * c if strided_input else c, h, wd)).astype(np.float32)
    x = x[:, ::2] if strided_input else x
    w = rng.standard_normal((c, 1, kh, kw)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32) if bias else None
    expected = _depthwise_reference(x, w, b, [sh, sw], pads, [dh, dw])
    saved = conv_kernel.TAPS_DEPTHWISE_PARALLEL_MACS, conv_kernel.TAPS_DEPTHWISE_BLOCK_BYTES
    if blocks:
        conv_kernel.TAPS_DEPTHWISE_PARALLEL_MACS, conv_kernel.TAPS_DEPTHWISE_BLOCK_BYTES = 0, 1
    try:
        got = conv_kernel._depthwise_taps(x, w, b, [sh, sw], pads, [dh, dw], expected.shape[2:])
    finally:
        conv_kernel.TAPS_DEPTHWISE_PARALLEL_MACS, conv_kernel.TAPS_DEPTHWISE_BLOCK_BYTES = saved
    assert got.shape == expected.shape and got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_depthwise_taps_keeps_a_channels_last_layout(bias):
    """An NCHW view of a channels-last array (ConvNeXt's permutes) comes back in that layout, same values."""
    rng = np.random.default_rng(4)
    channels_last = rng.standard_normal((2, 9, 7, 5)).astype(np.float32)  # (N, H, W, C)
    x = channels_last.transpose(0, 3, 1, 2)
    w = rng.standard_normal((5, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32) if bias else None
    options = dict(strides=[1, 2], pads=[1, 1, 1, 1], dilations=[1, 1], groups=5)
    got = conv_kernel.conv(x, w, b, **options)
    assert got.transpose(0, 2, 3, 1).flags.c_contiguous and not got.flags.c_contiguous
    np.testing.assert_allclose(got, _depthwise_reference(x, w, b, [1, 2], [1, 1, 1, 1], [1, 1]), rtol=1e-5, atol=1e-5)
    contiguous = conv_kernel.conv(np.ascontiguousarray(x), w, b, **options)
    assert contiguous.flags.c_contiguous
    np.testing.assert_array_equal(contiguous, got)


def test_depthwise_tap_weights_count_against_the_run_budget():
    """A 1 x 25 kernel on one long row: the repeated tap weights are 25x the output, checked first."""
    from runtime_lite.execution.limits import BudgetExceeded, RunLimits

    x = np.zeros((1, 64, 1, 4096), np.float32)  # output 1 MB, tap weights 26 MB
    w = np.zeros((64, 1, 1, 25), np.float32)
    token = RunLimits(max_memory=8 << 20).activate()
    try:
        with pytest.raises(BudgetExceeded, match="depthwise tap weights"):
            conv_kernel.conv(x, w, None, strides=[1, 1], pads=[0, 12, 0, 12], dilations=[1, 1], groups=64)
    finally:
        RunLimits.reset(token)
