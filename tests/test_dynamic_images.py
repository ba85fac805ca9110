"""Images of any size from one bundle: the dims exporters leave unknown, kept symbolic.

The models are what other exporters than torch's write (paddle2onnx types an input
``[-1, 3, "?", "?"]``; tf2onnx converts SAME padding to ``auto_pad=SAME_UPPER``), built
with ``onnx.helper``, and checked against onnxruntime on the same file at several sizes,
some not divisible by the network's stride, on the host plan and ``--target onnxruntime``.
"""

from __future__ import annotations

import subprocess
import sys
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import aot
import runtime_lite
from aot.ir.dims import DimRange
from runtime_lite.kernels.cost import FIXED_OVERHEAD
from tests.helpers import onnxruntime_outputs, rand

#: Height x width, with odd sizes a stride-2 network does not divide.
SIZES = [(48, 192), (37, 101), (64, 64), (5, 7)]
TARGETS = [["host"], ["onnxruntime"]]


def rel_l2(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


def paddle_style_detector(batch_dim=-1) -> onnx.ModelProto:
    """``[-1, 3, "?", "?"]`` in, a 2x2 stride-1 SAME_UPPER conv (its padding independent of the size), a
    stride-2 SAME_UPPER conv and SAME max-pool (their padding depends on the size), then an upsample by 2
    and a reshape computed from the input's shape."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[2, 2], auto_pad="SAME_UPPER"),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
        helper.make_node("MaxPool", ["c2"], ["p"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER"),
        helper.make_node("Resize", ["p", "", "scales"], ["up"], mode="nearest"),
        helper.make_node("Shape", ["up"], ["shape"]),
        helper.make_node("Slice", ["shape", "zero", "two", "zero"], ["lead"]),
        helper.make_node("Concat", ["lead", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["up", "target"], ["y"]),
    ]
    inits = {
        "w1": rand(6, 3, 2, 2, seed=1),
        "b1": rand(6, seed=2),
        "w2": rand(4, 6, 3, 3, seed=3),
        "scales": np.array([1, 1, 2, 2], np.float32),
        "zero": np.array([0], np.int64),
        "two": np.array([2], np.int64),
        "minus_one": np.array([-1], np.int64),
    }
    graph = helper.make_graph(
        nodes,
        "paddle_style",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch_dim, 3, "?", "?"])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    opsets = [helper.make_opsetid("", 13)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def check_sizes(module: runtime_lite.Module, model: onnx.ModelProto, sizes, batch: int = 1) -> None:
    for h, w in sizes:
        x = rand(batch, 3, h, w, seed=h * w)
        (expected,) = onnxruntime_outputs(model, {"x": x})
        (actual,) = module.run({"x": x})
        assert actual.shape == expected.shape, (h, w)
        assert rel_l2(actual, expected) <= 1e-5, (h, w, rel_l2(actual, expected))


@pytest.mark.parametrize("targets", TARGETS, ids=lambda t: t[0])
def test_each_question_mark_is_its_own_dim_and_every_size_runs(targets):
    model = paddle_style_detector()
    result = aot.build(model, targets=targets, log=None)
    if targets == ["onnxruntime"]:  # strided SAME padding and the shape arithmetic are computed in the recipe
        assert result.regions["host"] == 0 and len(result.header["modules"]) == 1, result.regions
    module = runtime_lite.load(result.to_bytes())
    if targets == ["onnxruntime"]:
        assert [p["runs_on"] for p in module.placement.values()] == ["onnxruntime"]
    assert module.inputs[0].shape == ("N", 3, "h", "w"), module.inputs[0].shape
    assert "the model wrote '?'" in module.dims["h"].origin and "dim 2" in module.dims["h"].origin
    assert "dim 3" in module.dims["w"].origin and "no name" in module.dims["N"].origin
    check_sizes(module, model, SIZES)
    check_sizes(module, model, [(33, 17)], batch=2)


def test_exporter_bookkeeping_names_become_readable_and_a_repeated_name_is_one_dim():
    """``p2o.DynamicDimension.0`` on both inputs is one dim (the model says so); ``unk__3`` and ``?198`` are not."""
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("ReduceSum", ["s"], ["y"], axes=[1], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "names",
        [
            helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, ["p2o.DynamicDimension.0", "unk__3"]),
            helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, ["p2o.DynamicDimension.0", "?198"]),
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    module = runtime_lite.load(aot.build(model, log=None).to_bytes())
    (a, b) = module.inputs
    assert a.shape == ("batch", "dim1") and b.shape == ("batch", "dim1_2"), (a.shape, b.shape)
    assert "'p2o.DynamicDimension.0'" in module.dims["batch"].origin
    x, y = rand(3, 1, seed=1), rand(3, 4, seed=2)
    np.testing.assert_allclose(module.run({"a": x, "b": y})[0], (x + y).sum(axis=1), rtol=1e-6)
    with pytest.raises(runtime_lite.InputError, match="'batch'"):
        module.run({"a": rand(2, 1), "b": rand(3, 4)})


def test_a_strided_same_average_pool_that_excludes_the_pad_is_refused_with_the_reason():
    nodes = [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_UPPER")]
    graph = helper.make_graph(
        nodes,
        "avg",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, "?", "?"])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(aot.errors.UnsupportedOpsError, match="AveragePool.*excludes the pad"):
        aot.build(model, log=None)
    module = runtime_lite.load(aot.build(model, input_shapes={"x": (1, 3, 9, 10)}, log=None).to_bytes())
    x = rand(1, 3, 9, 10)
    np.testing.assert_allclose(module.run([x])[0], onnxruntime_outputs(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_bounds_from_the_command_line_are_recorded_shown_and_enforced(tmp_path):
    model_file = tmp_path / "detector.onnx"
    model = paddle_style_detector()
    onnx.save(model, model_file)
    bundle = tmp_path / "bounded.aotb"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "aot.cli.build",
            str(model_file),
            "-o",
            str(bundle),
            "--input",
            "x:1x3x32..1280x32..1280",
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    assert "h in 32..1280" in built.stdout + built.stderr, built.stdout + built.stderr
    module = runtime_lite.load(bundle)
    assert module.inputs[0].shape == (1, 3, "h", "w")
    assert (module.dims["h"].min, module.dims["h"].max) == (32, 1280)
    check_sizes(module, model, [(32, 32), (37, 101), (48, 192)])
    with pytest.raises(runtime_lite.InputError) as refused:
        module.run({"x": rand(1, 3, 31, 40)})
    message = str(refused.value)
    assert "input 'x'" in message and "dim 2 ('h')" in message and "minimum 32" in message, message
    assert "\n" not in message
    info = subprocess.run([sys.executable, "-m", "runtime_lite", "info", str(bundle)], capture_output=True, text=True)
    assert info.returncode == 0, info.stderr
    assert "h in 32..1280 (from --input x dim 2" in info.stdout, info.stdout
    assert "worst" in info.stdout and "of activations with every dim at its maximum" in info.stdout, info.stdout
    inspected = subprocess.run([sys.executable, "-m", "aot.cli.inspect", str(bundle)], capture_output=True, text=True)
    assert inspected.returncode == 0, inspected.stderr
    assert "dim       h in 32..1280 (from --input x dim 2)" in inspected.stdout, inspected.stdout
    assert "worst     " in inspected.stdout, inspected.stdout
    bench = subprocess.run(  # random inputs take each bounded dim's minimum, not 1
        [sys.executable, "-m", "runtime_lite", "bench", str(bundle), "--iterations", "2", "--warmup", "0"],
        capture_output=True,
        text=True,
    )
    assert bench.returncode == 0, bench.stderr


def test_named_bounds_and_a_paddle_bundle_benchmarked_with_random_inputs(tmp_path):
    """``h=32..1280`` names the dim; unbounded ``?`` dims take 1 in random inputs, which must run too."""
    from aot.ir.types import parse_shape

    assert parse_shape("1x3xheight=32..1280x32..64")[2:] == (DimRange(32, 1280, "height"), DimRange(32, 64))
    with pytest.raises(ValueError, match="bad bounds"):
        parse_shape("1x3x32..x5")
    model = paddle_style_detector()
    onnx.save(model, tmp_path / "m.onnx")
    module = runtime_lite.load(aot.build(tmp_path / "m.onnx", log=None).to_bytes())
    check_sizes(module, model, [(1, 1), (2, 3)])
    bundle = tmp_path / "m.aotb"
    aot.build(tmp_path / "m.onnx", log=None).save(bundle)
    bench = subprocess.run(
        [sys.executable, "-m", "runtime_lite", "bench", str(bundle), "--iterations", "2", "--warmup", "0"],
        capture_output=True,
        text=True,
    )
    assert bench.returncode == 0, bench.stderr


def test_bounds_as_tuples_in_the_api():
    model = paddle_style_detector()
    result = aot.build(model, input_shapes={"x": (1, 3, (16, 64), (16, 64))}, log=None)
    module = runtime_lite.load(result.to_bytes())
    assert (module.dims["w"].min, module.dims["w"].max) == (16, 64)
    with pytest.raises(runtime_lite.InputError, match="'w'.*above its maximum 64"):
        module.run({"x": rand(1, 3, 16, 65)})


def test_unnamed_bounds_on_a_dim_the_model_named_keep_the_models_name():
    """``(16, 64)`` on a dim the model calls ``height`` bounds ``height`` (it became a second name, ``h2``)."""
    model = paddle_style_detector()
    for i, name in ((2, "height"), (3, "width")):
        model.graph.input[0].type.tensor_type.shape.dim[i].dim_param = name
    module = runtime_lite.load(aot.build(model, input_shapes={"x": (1, 3, (16, 64), (16, 80))}, log=None).to_bytes())
    assert module.inputs[0].shape == (1, 3, "height", "width")
    assert (module.dims["height"].min, module.dims["height"].max, module.dims["width"].max) == (16, 64, 80)


def test_the_worst_case_activation_memory_is_the_static_plan_at_the_upper_bounds():
    model = paddle_style_detector()
    bounded = aot.build(model, input_shapes={"x": (2, 3, (16, 96), (16, 80))}, log=None)
    at_the_bounds = aot.build(model, input_shapes={"x": (2, 3, 96, 80)}, log=None)
    module = runtime_lite.load(bounded.to_bytes())
    worst = module.worst_case_activation_bytes
    assert worst >= at_the_bounds.plan.memory.peak_bytes > 2 * 3 * 96 * 80 * 4, worst
    x = rand(2, 3, 96, 80)
    module.run([x])
    tracemalloc.start()
    try:
        module.run([x])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the activations alone leave out the kernels' scratch; the budget figure bounds everything
    assert worst < peak <= module.worst_case_budget_bytes + FIXED_OVERHEAD, (peak, worst)
    budgeted = runtime_lite.load(bounded.to_bytes(), max_memory=module.worst_case_budget_bytes)
    np.testing.assert_array_equal(budgeted.run([x])[0], module.run([x])[0])
    assert bounded.graph.inputs[0].type.shape == (2, 3, "h", "w"), "the symbolic types are put back"
    unbounded = runtime_lite.load(aot.build(model, input_shapes={"x": (2, 3, (16, 96), "w")}, log=None).to_bytes())
    assert unbounded.worst_case_activation_bytes is None


def test_a_residual_block_over_run_time_sizes_plans_as_many_in_place_writes_as_at_a_fixed_size():
    """Both branches of a strided residual block compute one size from one input: one symbol, one shape,
    so the add writes in place as it does when the size is fixed."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "wd"], ["d"], kernel_shape=[1, 1], strides=[2, 2]),
        helper.make_node("Add", ["b", "d"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    inits = {"w1": rand(8, 3, 3, 3, seed=1), "w2": rand(8, 8, 3, 3, seed=2), "wd": rand(8, 3, 1, 1, seed=3)}
    graph = helper.make_graph(
        nodes,
        "residual",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, "?", "?"])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    dynamic = aot.build(model, log=None)
    fixed = aot.build(model, input_shapes={"x": (1, 3, 33, 47)}, log=None)
    assert dynamic.plan.memory.inplace_count == fixed.plan.memory.inplace_count >= 2
    (add,) = [n for n in dynamic.graph.nodes if n.op == "add"]
    assert add.inputs[0].type.shape == add.inputs[1].type.shape
    check_sizes(runtime_lite.load(dynamic.to_bytes()), model, [(33, 47), (8, 9), (64, 31)])


def test_shape_arithmetic_is_replayed_per_signature_and_never_mixes_two():
    """The detector's Shape -> Slice -> Concat -> Reshape is computed on the first run at a size and
    replayed after; sizes alternate and every output still matches onnxruntime."""
    model = paddle_style_detector()
    module = runtime_lite.load(aot.build(model, log=None).to_bytes())
    signatures = module._plan._signatures  # white box: the plan's per-signature cache
    assert signatures is not None
    for h, w in [(37, 101), (48, 192), (37, 101), (48, 192), (5, 7)]:
        check_sizes(module, model, [(h, w)])
    assert len(signatures._known) == 3


def test_a_large_value_derived_from_a_shape_is_data_and_not_remembered():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
        helper.make_node("Range", ["zero", "n", "step"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Add", ["x", "rf"], ["y"]),
    ]
    inits = {"one": np.array(1, np.int64), "zero": np.array(0, np.int64), "step": np.array(1, np.int64)}
    graph = helper.make_graph(
        nodes,
        "ramp",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, "?"])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    module = runtime_lite.load(aot.build(model, log=None).to_bytes())
    for n in (3, 200, 3, 200):
        x = rand(2, n, seed=n)
        np.testing.assert_allclose(module.run([x])[0], onnxruntime_outputs(model, {"x": x})[0], rtol=1e-6)
    assert len(module._plan._signatures._known) == 1, "only the small ramp is remembered"


@pytest.mark.parametrize(
    "target, reason, shape",
    [
        ("npu", "static shapes", (1, 3, (16, 256), (16, 256))),
        ("tensorrt", "only the batch dim may be symbolic unless every symbolic dim is bounded", (1, 3, "h", "w")),
    ],
)
def test_npu_and_tensorrt_leave_run_time_sizes_on_the_host_with_the_reason_once(target, reason, shape):
    """The NPU plans static shapes, bounded or not; TensorRT needs bounds for its profiles (unbounded here):
    both builds say why the regions stay on the host (once, not per op), and the bundle runs every size.
    (With bounds TensorRT takes them: tests/test_tensorrt_profiles.py.)"""
    model = paddle_style_detector()
    result = aot.build(model, targets=[target], input_shapes={"x": shape}, log=None)
    assert any(reason in n for n in result.notes), result.notes
    assert len([n for n in result.notes if target in n]) <= 2, result.notes  # said once, not per op
    assert result.regions.get(target, 0) == 0, result.regions
    check_sizes(runtime_lite.load(result.to_bytes()), model, [(16, 16), (37, 101), (256, 255)])
