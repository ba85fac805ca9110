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


def _causal_mask_model() -> onnx.ModelProto:
    """A decoder's mask as HF models export it: positions by Range over the running length, compared into a causal
    mask, expanded to [batch, 1, seq, seq] by a shape concatenated from the input's own, then applied to scores."""
    h = onnx.helper
    ints = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64), "i0": np.array([0], np.int64),
            "i1": np.array([1], np.int64), "lone": np.array([1], np.int64), "ax0": np.array([0], np.int64),
            "ax1": np.array([1], np.int64), "neg": np.array(-1e9, np.float32)}  # fmt: skip
    nodes = [
        h.make_node("Shape", ["x"], ["shape"]),
        h.make_node("Gather", ["shape", "i0"], ["batch"]),
        h.make_node("Gather", ["shape", "i1"], ["seq1"]),
        h.make_node("Squeeze", ["seq1", "ax0"], ["seq"]),
        h.make_node("Range", ["zero", "seq", "one"], ["pos"]),
        h.make_node("Unsqueeze", ["pos", "ax1"], ["rows"]),
        h.make_node("Unsqueeze", ["pos", "ax0"], ["cols"]),
        h.make_node("Greater", ["cols", "rows"], ["future"]),
        h.make_node("Concat", ["batch", "lone", "seq1", "seq1"], ["mask_shape"], axis=0),
        h.make_node("Expand", ["future", "mask_shape"], ["mask"]),
        h.make_node("Unsqueeze", ["x", "ax1"], ["x4"]),
        h.make_node("Where", ["mask", "neg", "x4"], ["y"]),
    ]
    graph = h.make_graph(
        nodes, "mask", [h.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", "seq"])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(v, k) for k, v in ints.items()],
    )  # fmt: skip
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_a_range_over_the_running_length_keeps_a_causal_mask_in_one_region():
    """Range used to stay on the host, so the mask's Expand got its shape as a region input the check could not
    read, and the region ran its host plan (Qwen2, Mistral, Swin, Wav2Vec2 from HF, exported by dynamo)."""
    model = _causal_mask_model()
    result = aot.build(model, targets=["onnxruntime"], log=None)
    assert result.regions["host"] == 0 and not any("host plan" in note for note in result.notes), result.notes
    module = runtime_lite.load(result.to_bytes())
    assert [p["runs_on"] for p in module.placement.values()] == ["onnxruntime"], module.placement
    for batch, seq in ((1, 3), (2, 7)):
        x = rand(batch, seq, seq, seed=seq)
        (expected,) = onnxruntime_outputs(model, {"x": x})
        np.testing.assert_array_equal(module.run([x])[0], expected)


def test_range_sizes_follow_onnx_and_a_step_of_zero_is_refused():
    node = shapes.Node("Range", ["s", "l", "d"], ["r"], {}, "graph.node[0]")
    for (start, limit, delta), length in (((0, 5, 1), 5), ((5, 0, -2), 3), ((0, 0, 1), 0), ((3, 1, 1), 0),
                                          ((0.0, 1.0, 0.3), 4), ((2, None, 1), None)):  # fmt: skip
        ints = {"s": [start], "l": [limit], "d": [delta]}
        found, _ = shapes.walk({}, {"s": (), "l": (), "d": ()}, ints, [node])
        assert found["r"] == (length,), (start, limit, delta, found["r"])
    with pytest.raises(shapes.BadGeometry, match=r"graph.node\[0\]: Range with a step of 0"):
        shapes.walk({}, {"s": (), "l": (), "d": ()}, {"s": [0], "l": [4], "d": [0]}, [node])
