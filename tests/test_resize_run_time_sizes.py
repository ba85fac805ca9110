"""Resize to sizes an exporter computes at run time from shapes, with dynamic axes.

``F.interpolate(x, size=(h, w))`` with a dynamic batch (every torchvision segmentation
model's head: DeepLabV3, FCN, LRASPP) exports as ``Resize(x, sizes=Concat(Shape(x)[:2],
[h, w]))`` (the legacy exporter: ``Shape -> Slice``, ``Shape -> Gather -> Unsqueeze``).
The sizes are computed at run time, but every entry is either the input's own dim or a
constant, so the resize is static where it resizes: it builds, runs on the onnxruntime
delegate as one region, and matches onnxruntime at any batch. Where no static form states
it (an image resized to another's run-time size, a nearest resize at a ratio no float32
scale states exactly) it becomes ``dynamic_resize``, which the host runs; sizes with the
wrong entry count are refused in one line.
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


def resize_model(
    out_hw, mode="linear", coord="half_pixel", legacy=False, keep=(0, 2), repeat=1, skip_hw=None
) -> onnx.ModelProto:
    """x [N, 3, 7, 9] -> Resize to sizes = Shape(x)[keep] (``repeat`` times) ++ out_hw, computed in the graph.

    ``legacy``: as the legacy exporter writes ``F.interpolate(x, size=skip.shape[-2:])``, the
    lead by Shape -> Slice and out_hw read from a second input ``skip`` [N, 1, *out_hw] by
    Shape -> Gather -> Unsqueeze, each Shape over a symbolic batch; ``skip_hw`` declares
    the skip's height and width (symbols: its size is known only at run time).
    """
    inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, 7, 9])]
    if legacy:
        skip = ["N", 1, *(skip_hw or out_hw)]
        inputs.append(helper.make_tensor_value_info("skip", onnx.TensorProto.FLOAT, skip))
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


def feeds_for(model: onnx.ModelProto, batch: int, hw: list[int]) -> dict[str, np.ndarray]:
    """Inputs at ``batch``; a symbolic height and width (the skip's) take ``hw``."""
    feeds = {}
    for i in model.graph.input:
        dims = [d.dim_value if d.dim_value else None for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = rand(batch, *(d if d is not None else hw[k - 2] for k, d in enumerate(dims) if k), seed=batch)
    return feeds


#: name -> (resize_model options, whether it stays a run-time resize on the host).
CASES = {
    "bilinear, ratios no float32 states": (dict(out_hw=[20, 3]), False),
    "bilinear, legacy exporter's Slice and Gather": (dict(out_hw=[33, 97], legacy=True), False),
    "bilinear, align_corners": (dict(out_hw=[20, 3], coord="align_corners"), False),
    "bilinear, pytorch_half_pixel, down": (dict(out_hw=[5, 2], coord="pytorch_half_pixel"), False),
    "nearest 2x, asymmetric (torch's)": (dict(out_hw=[14, 18], mode="nearest", coord="asymmetric"), False),
    "nearest at a ratio no float32 states": (dict(out_hw=[20, 3], mode="nearest"), True),
    "to another input's run-time size": (dict(out_hw=[20, 3], legacy=True, skip_hw=["H", "W"]), True),
}


@pytest.mark.parametrize("targets", [["host"], ["onnxruntime"]], ids=["host", "onnxruntime"])
@pytest.mark.parametrize("case", CASES)
def test_resize_to_sizes_computed_at_run_time_matches_onnxruntime_at_any_size(case, targets):
    options, run_time = CASES[case]
    model = resize_model(**options)
    built = aot.build(model, targets=targets, log=None)
    # a run-time resize is the host's dynamic_resize on the host plan; an onnxruntime region writes it into its
    # recipe (Resize reading the sizes tensor), so nothing is left on the host between regions
    assert not any("dynamic_resize" in note for note in built.notes)
    module = runtime_lite.load(built.to_bytes())
    if targets == ["onnxruntime"]:  # static or run-time sizes: one region
        runs_on = [p["runs_on"] for p in module.placement.values()]
        assert runs_on == ["onnxruntime"], runs_on
    else:
        ops = {i["op"] for i in built.header["plan"]["instructions"]}
        assert ("dynamic_resize" in ops) == run_time, ops
    for batch, grow in ((1, 0), (3, 2)):
        feeds = feeds_for(model, batch, [d + grow for d in options["out_hw"]])
        (expected,) = onnxruntime_outputs(model, feeds)
        (actual,) = module.run(feeds)
        assert actual.shape == expected.shape
        error = np.linalg.norm(actual - expected) / np.linalg.norm(expected)
        assert error <= 1e-5, f"batch {batch}: relative L2 {error:.2e}"


def test_run_time_sizes_with_the_wrong_entry_count_are_refused_in_one_line():
    model = resize_model(out_hw=[20, 3], keep=(0, 1))  # [N, 20, 3] for a rank-4 input
    with pytest.raises(AotError) as error:
        aot.build(model, targets=["onnxruntime"], log=None)
    message = str(error.value)
    assert "sizes has 3 entries for 4 axes" in message and "\n" not in message, message
