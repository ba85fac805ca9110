"""ONNX ops real models bring that the frontend once refused, each against onnxruntime on random inputs.

Resize mode 'cubic' (torchvision's bicubic interpolate), RoiAlign (torchvision's detection heads), and the
audio front end's DFT / STFT / MelWeightMatrix; onnx's own node tests for each run in
tests/test_op_coverage.py (docs/coverage.md).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.helpers import build_and_load, make_model, onnxruntime_outputs, rand


def _matches(model, feeds, rtol=1e-5, atol=1e-5):
    ours = build_and_load(model).run(feeds)
    expected = onnxruntime_outputs(model, feeds)
    worst = 0.0
    for a, b in zip(ours, expected, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
        worst = max(worst, float(np.abs(a.astype(np.float64) - b).max(initial=0)))
    return worst


# -- Resize, cubic --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("coord", "attrs", "scales"),
    [
        ("pytorch_half_pixel", {}, [1, 1, 2.0, 1.5]),  # torchvision's bicubic, align_corners=False
        ("align_corners", {}, [1, 1, 2.0, 3.0]),
        ("half_pixel", {"cubic_coeff_a": -0.5, "exclude_outside": 1}, [1, 1, 0.5, 0.75]),
        ("asymmetric", {}, [1, 1, 1.0, 2.5]),
    ],
)
def test_resize_cubic(coord, attrs, scales):
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="cubic", coordinate_transformation_mode=coord,
                            **attrs)  # fmt: skip
    x = rand(2, 3, 8, 12, seed=1)
    inits = {"scales": np.array(scales, np.float32)}
    model = make_model([node], {"x": x}, ["y"], inits, opset=13, input_shapes={"x": ["N", 3, 8, 12]})
    _matches(model, {"x": x})
    _matches(model, {"x": x[:1]})


def test_resize_cubic_to_sizes():
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic")
    x = rand(1, 2, 9, 7, seed=2)
    model = make_model([node], {"x": x}, ["y"], {"sizes": np.array([1, 2, 13, 4], np.int64)}, opset=13)
    _matches(model, {"x": x})


def test_resize_cubic_over_a_run_time_size_is_refused_in_one_line():
    from aot.errors import UnsupportedOpsError

    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="cubic")
    x = rand(1, 2, 9, 7, seed=2)
    model = make_model([node], {"x": x}, ["y"], {"scales": np.array([1, 1, 2, 2], np.float32)}, opset=13,
                       input_shapes={"x": [1, 2, "H", "W"]})  # fmt: skip
    with pytest.raises(UnsupportedOpsError, match=r"^Resize node 'y': cubic resize of axis 2 \('H' to None\)"):
        build_and_load(model)


# -- RoiAlign -------------------------------------------------------------------------------------------


def _boxes(count: int, seed: int, size: float = 32.0) -> np.ndarray:
    rs = np.random.RandomState(seed)
    corner = rs.uniform(-4, size * 0.8, size=(count, 2))
    extent = rs.uniform(0.5, size * 0.7, size=(count, 2))
    return np.concatenate([corner, corner + extent], axis=1).astype(np.float32)


@pytest.mark.parametrize(
    ("mode", "coord", "sampling_ratio"),
    [
        ("avg", "half_pixel", 0),
        ("avg", "output_half_pixel", 2),
        ("max", "half_pixel", 2),
        ("max", "output_half_pixel", 0),
    ],
)
def test_roi_align(mode, coord, sampling_ratio):
    node = helper.make_node("RoiAlign", ["x", "rois", "index"], ["y"], mode=mode, coordinate_transformation_mode=coord,
                            output_height=5, output_width=4, sampling_ratio=sampling_ratio, spatial_scale=0.5)  # fmt: skip
    x = rand(2, 6, 16, 20, seed=3)
    rois, index = _boxes(7, seed=4), np.array([0, 1, 1, 0, 1, 0, 0], np.int64)
    model = make_model([node], {"x": x, "rois": rois, "index": index}, ["y"], {}, opset=16,
                       input_shapes={"x": ["N", 6, "H", "W"], "rois": ["R", 4], "index": ["R"]})  # fmt: skip
    _matches(model, {"x": x, "rois": rois, "index": index}, rtol=1e-4, atol=1e-5)
    _matches(model, {"x": x[:1, :, :9], "rois": rois[:3] * 0.5, "index": np.zeros(3, np.int64)}, rtol=1e-4, atol=1e-5)


def test_roi_align_opset_10_samples_without_the_half_pixel_offset():
    node = helper.make_node(
        "RoiAlign", ["x", "rois", "index"], ["y"], output_height=3, output_width=3, sampling_ratio=2
    )
    x, rois, index = rand(1, 2, 10, 10, seed=5), _boxes(4, seed=6, size=10), np.zeros(4, np.int64)
    model = make_model([node], {"x": x, "rois": rois, "index": index}, ["y"], {}, opset=10)
    _matches(model, {"x": x, "rois": rois, "index": index}, rtol=1e-4, atol=1e-5)


# -- DFT, STFT, MelWeightMatrix ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("opset", "parts", "attrs", "length"),
    [
        (17, 1, {}, None),
        (17, 2, {"inverse": 1}, None),
        (17, 1, {"onesided": 1}, 12),  # zero-padded
        (20, 2, {}, 7),  # truncated
        (20, 2, {"inverse": 1}, None),
        (20, 1, {"onesided": 1}, None),
    ],
)
def test_dft(opset, parts, attrs, length):
    x = rand(3, 10, 4, parts, seed=7)
    names = ["x", "n" if length else ""] + (["axis"] if opset >= 20 else [])
    if opset < 20:
        attrs = {**attrs, "axis": 1}
    inits = {"axis": np.array(-3, np.int64)} if opset >= 20 else {}
    if length:
        inits["n"] = np.array(length, np.int64)
    node = helper.make_node("DFT", names, ["y"], **attrs)
    model = make_model([node], {"x": x}, ["y"], inits, opset=opset, input_shapes={"x": ["N", 10, 4, parts]})
    _matches(model, {"x": x}, rtol=1e-4, atol=1e-4)
    _matches(model, {"x": x[:1]}, rtol=1e-4, atol=1e-4)


def test_stft_and_mel_spectrogram():
    """An audio front end: STFT with a Hann window, power spectrum, times MelWeightMatrix."""
    nodes = [
        helper.make_node("HannWindow", ["size"], ["window"]),
        helper.make_node("STFT", ["signal", "step", "window", "size"], ["spec"]),
        helper.make_node("Mul", ["spec", "spec"], ["squared"]),
        helper.make_node("ReduceSum", ["squared", "last"], ["power"], keepdims=0),
        helper.make_node("MelWeightMatrix", ["mels", "size", "rate", "low", "high"], ["mel_matrix"]),
        helper.make_node("MatMul", ["power", "mel_matrix"], ["y"]),
    ]
    inits = {"size": np.array(64, np.int64), "step": np.array(16, np.int64), "last": np.array([-1], np.int64),
             "mels": np.array(20, np.int64), "rate": np.array(8000, np.int64), "low": np.array(20.0, np.float32),
             "high": np.array(3800.0, np.float32)}  # fmt: skip
    signal = rand(2, 400, 1, seed=8)
    model = make_model(nodes, {"signal": signal}, ["y"], inits, opset=17, input_shapes={"signal": ["N", 400, 1]})
    _matches(model, {"signal": signal}, rtol=1e-4, atol=1e-4)
