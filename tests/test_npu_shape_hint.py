"""The NPU's hint for symbolic input dims proposes a shape the model takes: one at which the graph's shapes infer.

The least size is no safe example: a detector downsamples, upsamples and concatenates with a skip path (YOLOv8,
NudeNet), so a 1x1 image fails at the concat. The hint tries a batch of 1 and working sizes (224 first, as the
auto backend samples a region) inside the dims' bounds, and names the dims when none of them infers.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import helper

import aot
from aot.cli.build import input_shapes
from aot.errors import AotError
from tests.helpers import assert_matches_onnxruntime, make_model, rand


def _skip_concat_model():
    """Downsample by 4 (two stride-2 convs), upsample by 4, concat with a full-size skip path: H and W must be
    multiples of 4, so the least size (1) does not infer."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["d1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["d1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["d2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Resize", ["d2", "", "scales"], ["up"], mode="nearest"),
        helper.make_node("Conv", ["x", "w3"], ["skip"], kernel_shape=[1, 1]),
        helper.make_node("Concat", ["up", "skip"], ["cat"], axis=1),
        helper.make_node("Relu", ["cat"], ["y"]),
    ]
    inits = {
        "w1": rand(4, 3, 3, 3, seed=1),
        "w2": rand(4, 4, 3, 3, seed=2),
        "w3": rand(4, 3, 1, 1, seed=3),
        "scales": np.array([1, 1, 4, 4], np.float32),
    }
    return make_model(nodes, {"x": rand(1, 3, 8, 8)}, ["y"], inits, input_shapes={"x": ["N", 3, "H", "W"]})


def _hint(model, **options) -> str:
    (hint,) = [n for n in aot.build(model, targets=["npu"], log=None, **options).notes if "fix the symbolic dims" in n]
    return hint


def _api(hint: str) -> dict:
    return eval(re.search(r"input_shapes=(\{.*\})\)", hint).group(1))  # noqa: S307 - the hint's own dict literal


def test_the_hint_proposes_a_size_the_model_takes_not_the_least_one():
    model = _skip_concat_model()
    with pytest.raises(AotError, match="differ outside axis 1"):  # what the old hint (every symbolic dim at 1) led to
        aot.build(model, targets=["npu"], input_shapes={"x": (1, 3, 1, 1)}, log=None)
    hint = _hint(model)
    assert "--input x:1x3x224x224" in hint, hint
    api = _api(hint)
    assert api == {"x": (1, 3, 224, 224)} and input_shapes(tuple(re.findall(r"--input (\S+)", hint))) == api
    fixed = aot.build(model, targets=["npu"], input_shapes=api, log=None)
    assert not any("symbolic" in n for n in fixed.notes), fixed.notes
    assert fixed.regions.get("npu", 0) > 0, fixed.regions
    assert_matches_onnxruntime(
        model, {"x": rand(1, 3, 224, 224, seed=4)}, rtol=1e-5, atol=1e-5, targets=["npu"], input_shapes=api
    )


def test_the_hint_stays_inside_the_declared_bounds():
    """224 is past the bound: the largest size allowed (128, a multiple of 4) is proposed instead."""
    hint = _hint(_skip_concat_model(), input_shapes=input_shapes(("x:1..4x3x8..128x8..128",)))
    assert _api(hint) == {"x": (1, 3, 128, 128)}, hint


def test_the_hint_names_the_dims_when_no_size_tried_infers():
    """A classifier whose dense layer takes a 7x7 map: no size tried fits, so the hint names the dims to set."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]),
        helper.make_node("Flatten", ["c"], ["f"]),
        helper.make_node("Gemm", ["f", "gw"], ["y"], transB=1),
    ]
    inits = {"w": rand(2, 3, 1, 1, seed=1), "gw": rand(5, 2 * 7 * 7, seed=2)}
    model = make_model(nodes, {"x": rand(1, 3, 7, 7)}, ["y"], inits, input_shapes={"x": ["N", 3, "H", "W"]})
    hint = _hint(model)
    assert "--input x:Nx3xHxW, with N, H, W set to sizes the model accepts" in hint, hint
    assert "input_shapes=" not in hint
    fixed = aot.build(model, targets=["npu"], input_shapes={"x": (1, 3, 7, 7)}, log=None)
    assert not any("symbolic" in n for n in fixed.notes), fixed.notes
