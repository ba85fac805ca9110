"""``--target onnxruntime`` over symbolic dims: shapes computed at run time stay inside one onnxruntime region.

paddle2onnx writes its transformer blocks with reshapes to targets computed from the
running shape (Shape -> Slice -> Cast -> Concat -> Reshape). Those used to stay on the
host, between onnxruntime regions (PP-OCRv4's recognizer was cut into 11); the recipe
now carries them, and the recipe check follows the shape values they compute, so the
region is still verified at load and its memory sized before each run.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import aot
import runtime_lite
from runtime_lite.backends.onnxruntime import shapes
from runtime_lite.backends.onnxruntime.recipe_check import check_recipe
from runtime_lite.errors import ExecutionError
from tests.helpers import onnxruntime_outputs, rand, shape_arithmetic_model

#: (batch, height, width): odd sizes the stride-2 convolution does not divide.
SIZES = [(1, 8, 8), (2, 13, 29), (1, 5, 3)]


def test_shapes_computed_at_run_time_stay_in_one_onnxruntime_region():
    model = shape_arithmetic_model()
    result = aot.build(model, targets=["onnxruntime"], log=None)
    assert result.regions == {"host": 0, "onnxruntime": 20}, result.regions
    module = runtime_lite.load(result.to_bytes())
    assert [p["runs_on"] for p in module.placement.values()] == ["onnxruntime"]
    for n, h, w in SIZES:
        x = rand(n, 3, h, w, seed=h * w)
        (expected,) = onnxruntime_outputs(model, {"x": x})
        (actual,) = module.run([x])
        assert actual.shape == expected.shape
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_the_walk_follows_the_shapes_the_recipe_computes_as_onnx_infers_them():
    """Each value's shape the walk follows over symbolic inputs is what onnx infers with data propagation (the
    reshape targets' known elements kept), and no shape is lost: the region is verified and its memory bounded."""
    result = aot.build(shape_arithmetic_model(), targets=["onnxruntime"], log=None)
    recipe_index = result.header["modules"][0]["payloads"]["recipe"]
    recipe = onnx.load_from_string(bytes(result.blobs.payloads[recipe_index]))
    externals = {t.name: np.zeros(t.dims, np.float32) for t in recipe.graph.initializer if t.external_data}
    facts = check_recipe(recipe.SerializeToString(), externals, "recipe")
    assert facts.unverified is None
    followed, _ = shapes.walk(facts.inputs, facts.dims, facts.operands, facts.nodes)
    for t in recipe.graph.initializer:
        t.ClearField("external_data")
        t.data_location = TensorProto.DEFAULT
    inferred = onnx.shape_inference.infer_shapes(recipe, strict_mode=True, data_prop=True).graph
    expected = {
        v.name: tuple(d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim)
        for v in [*inferred.value_info, *inferred.output]
    }
    produced = {o for n in recipe.graph.node for o in n.output}
    assert {name: followed[name] for name in produced} == {name: expected[name] for name in produced}
    assert followed[next(n.output[0] for n in recipe.graph.node if n.op_type == "Shape")] == (4,)


def test_each_run_is_sized_through_the_computed_reshapes_before_onnxruntime_allocates():
    """At run time every dim is known, so the walk computes each reshape's target and sizes the run exactly:
    a small image fits the budget and runs on onnxruntime, a large one is refused before it allocates."""
    module = runtime_lite.load(
        aot.build(shape_arithmetic_model(), targets=["onnxruntime"], log=None).to_bytes(), max_memory=256 << 10
    )
    assert module.placement["onnxruntime_0"]["runs_on"] == "onnxruntime"
    module.run([rand(1, 3, 16, 16)])
    with pytest.raises(ExecutionError, match="onnxruntime would hold"):
        module.run([rand(1, 3, 256, 256)])


def test_a_shape_value_the_walk_computes_matches_integer_semantics():
    """Integer division truncates toward zero (C's, as onnxruntime's kernel), and an unknown dim stays unknown."""
    node = shapes.Node("Div", ["a", "b"], ["q"], {}, "div")
    known = {"a": [-7, 7, None], "b": [2]}
    assert shapes._shape_value(node, [(3,), (1,)], lambda i: known[node.inputs[i]]) == [-3, 3, None]


def test_a_resize_to_another_inputs_run_time_size_stays_in_the_region():
    """FPN-style "upsample to the size of the skip connection": Resize's sizes computed from Shape at run time
    (``dynamic_resize``) is written as Resize with a sizes input, inside the onnxruntime region."""
    from onnx import helper

    from tests.helpers import make_model

    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["lead"], end=2),
        helper.make_node("Shape", ["skip"], ["spatial"], start=2),
        helper.make_node("Concat", ["lead", "spatial"], ["sizes"], axis=0),
        helper.make_node("Resize", ["r", "", "", "sizes"], ["up"], mode="nearest"),
        helper.make_node("Add", ["up", "skip"], ["y"]),
    ]
    model = make_model(
        nodes, {"x": rand(1, 4, 5, 5), "skip": rand(1, 4, 10, 10)}, ["y"],
        opset=15, input_shapes={"x": ["N", 4, "h", "w"], "skip": ["N", 4, "H", "W"]},
    )  # fmt: skip
    result = aot.build(model, targets=["onnxruntime"], log=None)
    assert result.op_counts.get("dynamic_resize") == 1 and result.regions["host"] == 0, result.regions
    module = runtime_lite.load(result.to_bytes())
    assert [p["runs_on"] for p in module.placement.values()] == ["onnxruntime"]
    for h, w in [(5, 5), (7, 13)]:
        feeds = {"x": rand(2, 4, h, w, seed=h), "skip": rand(2, 4, 2 * h, 2 * w + 1, seed=w)}
        np.testing.assert_allclose(module.run(feeds)[0], onnxruntime_outputs(model, feeds)[0], rtol=1e-6)
