"""Resize to a fixed size over a symbolic batch: the sizes an exporter computes from the input's own shape.

``F.interpolate(x, size=(h, w))`` with a dynamic batch (every torchvision segmentation
model's head: DeepLabV3, FCN, LRASPP) exports as ``Resize(x, sizes=Concat(Shape(x)[:2],
[h, w]))`` (the legacy exporter: ``Shape -> Slice -> Concat``). The sizes are computed at
run time, but every entry is either the input's own dim or a constant, so the resize is
static where it resizes: it builds, runs on the onnxruntime delegate as one region, and
matches onnxruntime at any batch. A nearest resize whose ratio no float32 scale states
exactly is refused with the fix named, as are sizes that change a symbolic dim, in one line.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import aot
import runtime_lite
from aot.errors import AotError
from tests.helpers import onnxruntime_outputs, rand


def resize_model(out_hw, mode="linear", coord="half_pixel", legacy=False, keep=(0, 2), repeat=1) -> onnx.ModelProto:
    """x [N, 3, 7, 9] -> Resize to sizes = Shape(x)[keep] (``repeat`` times) ++ out_hw, computed in the graph.

    ``legacy``: as the legacy exporter writes ``F.interpolate(x, size=skip.shape[-2:])``, the
    lead by Shape -> Slice and out_hw read from a second input ``skip`` [N, 1, *out_hw] by
    Shape -> Gather -> Unsqueeze, each Shape over a symbolic batch.
    """
    inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, 7, 9])]
    if legacy:
        inputs.append(helper.make_tensor_value_info("skip", onnx.TensorProto.FLOAT, ["N", 1, *out_hw]))
        shape = [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Slice", ["shape", "start", "end"], ["lead"]),
            helper.make_node("Shape", ["skip"], ["skip_shape"]),
        ]
        for axis in (2, 3):
            shape.append(helper.make_node("Gather", ["skip_shape", f"axis{axis}"], [f"dim{axis}"], axis=0))
            shape.append(helper.make_node("Unsqueeze", [f"dim{axis}", "axes0"], [f"entry{axis}"]))
        shape.append(helper.make_node("Concat", ["lead", "entry2", "entry3"], ["sizes"], axis=0))
    else:
        shape = [
            helper.make_node("Shape", ["x"], ["lead"], start=keep[0], end=keep[1]),
            helper.make_node("Concat", ["lead"] * repeat + ["hw"], ["sizes"], axis=0),
        ]
    nodes = [
        *shape,
        helper.make_node(
            "Resize", ["x", "", "", "sizes"], ["y"], mode=mode, coordinate_transformation_mode=coord,
            nearest_mode="floor",
        ),
        helper.make_node("Relu", ["y"], ["out"]),  # the resize inside a region, not at its edge
    ]  # fmt: skip
    inits = {
        "hw": np.array(out_hw, np.int64), "start": np.array([keep[0]], np.int64), "end": np.array([keep[1]]),
        "axis2": np.array(2, np.int64), "axis3": np.array(3, np.int64), "axes0": np.array([0], np.int64),
    }  # fmt: skip
    graph = helper.make_graph(
        nodes, "resize", inputs, [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def feeds_for(model: onnx.ModelProto, batch: int) -> dict[str, np.ndarray]:
    dims = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim][1:] for i in model.graph.input}
    return {name: rand(batch, *rest, seed=batch) for name, rest in dims.items()}


CASES = {
    "bilinear, ratios no float32 states": dict(out_hw=[20, 3]),
    "bilinear, legacy exporter's Slice and Gather": dict(out_hw=[33, 97], legacy=True),
    "bilinear, align_corners": dict(out_hw=[20, 3], coord="align_corners"),
    "bilinear, pytorch_half_pixel, down": dict(out_hw=[5, 2], coord="pytorch_half_pixel"),
    "nearest 2x, asymmetric (torch's)": dict(out_hw=[14, 18], mode="nearest", coord="asymmetric"),
}


@pytest.mark.parametrize("targets", [["host"], ["onnxruntime"]], ids=["host", "onnxruntime"])
@pytest.mark.parametrize("case", CASES)
def test_resize_to_sizes_computed_from_the_input_shape_matches_onnxruntime_at_any_batch(case, targets):
    model = resize_model(**CASES[case])
    module = runtime_lite.load(aot.build(model, targets=targets, log=None).to_bytes())
    if targets == ["onnxruntime"]:
        assert [p["runs_on"] for p in module.placement.values()] == ["onnxruntime"]  # one region, delegated
    for batch in (1, 3):
        feeds = feeds_for(model, batch)
        (expected,) = onnxruntime_outputs(model, feeds)
        (actual,) = module.run(feeds)
        assert actual.shape == expected.shape
        error = np.linalg.norm(actual - expected) / np.linalg.norm(expected)
        assert error <= 1e-5, f"batch {batch}: relative L2 {error:.2e}"


@pytest.mark.parametrize(
    "options, says",
    [
        (dict(out_hw=[20, 3], mode="nearest"), "nearest resize of 7 to 20"),
        (dict(out_hw=[20, 3], keep=(0, 1), repeat=2), "resize of a dim 3 to 'N'"),  # [N, N, 20, 3]
        (dict(out_hw=[20, 3], keep=(0, 1)), "sizes has 3 entries for 4 axes"),  # one short of the rank
    ],
)
def test_a_run_time_resize_no_static_form_states_is_refused_in_one_line(options, says):
    model = resize_model(**options)
    with pytest.raises(AotError) as error:
        aot.build(model, targets=["onnxruntime"], log=None)
    message = str(error.value)
    assert says in message and "\n" not in message, message
