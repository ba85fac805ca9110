"""The build's note on why a target left work on the host, and its hint for fixing symbolic dims."""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import helper

import aot
import runtime_lite
from aot.cli.build import input_shapes


def _relu(name: str) -> onnx.ModelProto:
    x = helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Relu", [name], ["out"])], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_symbolic_dims_hint_keeps_an_input_name_with_colons_whole_in_both_forms():
    """TF-converted inputs are named 'serving_default_input_2:0': the hint's API key and its --input flag both
    name that input (cut at the first ':' the build refused it), and following either offloads the graph."""
    name = "serving_default_input_2:0"
    model = _relu(name)
    (hint,) = [n for n in aot.build(model, targets=["npu"], log=None).notes if "input_shapes=" in n]
    api = eval(re.search(r"input_shapes=(\{.*\})\)", hint).group(1))  # noqa: S307 - the hint's own dict literal
    assert api == {name: (1, 4)}, hint
    flags = tuple(re.findall(r"--input (\S+)", hint))
    assert flags == (f"{name}:1x4",) and input_shapes(flags) == api, hint
    fixed = aot.build(model, targets=["npu"], input_shapes=api, log=None)
    assert fixed.regions.get("npu", 0) == 1, fixed.regions
    x = np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)
    np.testing.assert_array_equal(runtime_lite.load(fixed.to_bytes()).run([x])[0], np.maximum(x, 0))


def test_symbolic_dims_hint_suggests_sizes_within_the_declared_bounds():
    """A dim declared 11..64 (as torch.export bounds an MTCNN image side): the hint's example sits at its least size,
    not at 1, which the build would refuse ("outside 11..64"); following it offloads the graph."""
    model = _relu("x")
    bounded = input_shapes(("x:11..64x4",))
    (hint,) = [n for n in aot.build(model, targets=["npu"], input_shapes=bounded, log=None).notes if "--input" in n]
    assert "--input x:11x4" in hint and "sizes the model takes" in hint, hint
    fixed = aot.build(model, targets=["npu"], input_shapes=input_shapes(("x:11x4",)), log=None)
    assert fixed.regions.get("npu", 0) == 1, fixed.regions
