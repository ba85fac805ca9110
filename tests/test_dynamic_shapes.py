"""Symbolic dims as exporters write them: fixed from the command line, or kept dynamic.

The model is what ``torch.onnx.export`` writes for a small CNN with dynamic axes:
inputs ``[N, 3, H, W]`` and ``x.view(x.size(0), -1)`` as Shape -> Gather -> Unsqueeze
-> Concat -> Reshape. Fixing every dim folds that arithmetic to constants; keeping N
symbolic keeps a run-time shape computation and runs any batch. Each is checked
against onnxruntime on the same ONNX file.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import runtime_lite
from tests.helpers import onnxruntime_outputs, rand


def exported_cnn() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["images", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Shape", ["p"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["p", "target"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fw", "fb"], ["logits"], transB=1),
    ]
    inits = {
        "w": rand(8, 3, 3, 3, seed=1),
        "b": rand(8, seed=2),
        "zero": np.array(0, np.int64),
        "axes0": np.array([0], np.int64),
        "minus_one": np.array([-1], np.int64),
        "fw": rand(5, 8, seed=3),
        "fb": rand(5, seed=4),
    }
    graph = helper.make_graph(
        nodes,
        "exported",
        [helper.make_tensor_value_info("images", onnx.TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["N", 5])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    opsets = [helper.make_opsetid("", 13)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("dynamic") / "exported.onnx"
    onnx.save(exported_cnn(), path)
    return path


def aot_build(model_file, out, *args) -> runtime_lite.Module:
    result = subprocess.run(
        [sys.executable, "-m", "aot.cli.build", str(model_file), "-o", str(out), "-q", *args],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return runtime_lite.load(out)


def check(module, batch: int, height: int, width: int) -> None:
    images = rand(batch, 3, height, width, seed=batch * 100 + height)
    expected = onnxruntime_outputs(exported_cnn(), {"images": images})[0]
    np.testing.assert_allclose(module.run({"images": images})[0], expected, rtol=1e-5, atol=1e-6)


def test_all_dims_fixed_on_the_command_line_fold_the_shape_arithmetic(model_file, tmp_path):
    module = aot_build(model_file, tmp_path / "fixed.aotb", "--input", "images:2x3x32x24")
    assert module.inputs[0].shape == (2, 3, 32, 24)
    from aot.compiler import build

    graph_ops = build(exported_cnn(), input_shapes={"images": (2, 3, 32, 24)}).op_counts
    assert not {"shape", "gather", "concat", "unsqueeze"} & set(graph_ops), graph_ops
    check(module, 2, 32, 24)


def test_a_symbolic_batch_with_fixed_height_and_width_runs_any_batch(model_file, tmp_path):
    module = aot_build(model_file, tmp_path / "batch.aotb", "--input", "images:Nx3x32x32")
    assert module.inputs[0].shape == ("N", 3, 32, 32)
    for batch in (1, 3, 8):
        check(module, batch, 32, 32)


def test_fully_dynamic_input_runs_any_batch_and_size(model_file, tmp_path):
    module = aot_build(model_file, tmp_path / "dynamic.aotb")
    assert module.inputs[0].shape == ("N", 3, "H", "W")
    for batch, height, width in ((1, 16, 16), (3, 32, 24), (8, 7, 9)):
        check(module, batch, height, width)


def minus_one_model() -> onnx.ModelProto:
    """A Paddle2ONNX-style model: dynamic dims written as ``dim_value: -1``, also in value_info."""
    model = exported_cnn()
    for value in list(model.graph.input) + list(model.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param"):
                dim.dim_value = -1
    model.graph.value_info.append(helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, [-1, 8, -1, -1]))
    return model


@pytest.fixture(scope="module")
def minus_one_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("minus_one") / "paddle_style.onnx"
    onnx.save(minus_one_model(), path)
    return path


def test_minus_one_dims_are_symbolic_and_take_a_shape_from_the_command_line(minus_one_file, tmp_path):
    assert minus_one_model().graph.input[0].type.tensor_type.shape.dim[0].dim_value == -1
    module = aot_build(minus_one_file, tmp_path / "fixed.aotb", "--input", "images:1x3x48x192")
    assert module.inputs[0].shape == (1, 3, 48, 192)
    check(module, 1, 48, 192)


def test_minus_one_dims_without_input_shapes_build_a_bundle_the_runtime_loads(minus_one_file, tmp_path):
    module = aot_build(minus_one_file, tmp_path / "dynamic.aotb")
    shape = module.inputs[0].shape
    assert shape[1] == 3 and all(isinstance(d, str) for d in (shape[0], shape[2], shape[3])), shape
    assert len({shape[0], shape[2], shape[3]}) == 3, "each -1 dim is its own symbol"
    for batch, height, width in ((1, 48, 192), (2, 16, 24)):
        check(module, batch, height, width)


def test_reshape_minus_one_over_a_symbolic_batch_keeps_the_batch_symbol():
    """[N,8,1,1] -> [-1,8]: the -1 is N itself, so the output keeps the batch dim a server can batch along."""
    from tests.helpers import build_and_load, make_model

    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = make_model(
        nodes,
        {"x": rand(1, 8, 1, 1)},
        ["y"],
        {"shape": np.array([-1, 8], np.int64)},
        input_shapes={"x": ["N", 8, 1, 1]},
    )
    module = build_and_load(model)
    assert module.outputs[0].shape == ("N", 8)
    x = rand(3, 8, 1, 1)
    np.testing.assert_array_equal(module.run([x])[0], x.reshape(3, 8))


@pytest.mark.parametrize("heads", [[4, -1], [4, 8]])
def test_a_run_time_reshape_to_the_inputs_own_dims_is_static_and_stays_in_the_delegate(heads):
    """``x.view(batch, seq, 4, -1)`` as exporters write it, ``Reshape(x, Concat(Shape(x)[:2], [4, -1]))``:
    each element is a number or x's own dim at its position, so the target is ``[0, 0, 4, 8]`` (0 copies;
    the -1 resolved, which onnxruntime cannot do next to an empty batch) and the reshape runs inside the
    onnxruntime region instead of splitting it around a host step. Checked at several sizes, 0 included."""
    import aot
    from tests.helpers import make_model

    nodes = [
        helper.make_node("Shape", ["x"], ["lead"], start=0, end=2),
        helper.make_node("Concat", ["lead", "heads"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["split"], allowzero=1),
        helper.make_node("Transpose", ["split"], ["y"], perm=[0, 2, 1, 3]),
    ]
    model = make_model(
        nodes, {"x": rand(2, 5, 32)}, ["y"], {"heads": np.array(heads, np.int64)}, opset=17,
        input_shapes={"x": ["batch", "seq", 32]},
    )  # fmt: skip
    result = aot.build(model, targets=["onnxruntime"], log=None)
    (reshape,) = [n for n in result.partitioned.nodes if n.op == "reshape"]
    assert reshape.attrs["shape"] == [0, 0, 4, 8] and len(reshape.inputs) == 1, reshape.attrs
    assert result.regions == {"host": 0, "onnxruntime": 2}, result.regions  # the reshape and the transpose
    module = runtime_lite.load(result.to_bytes())
    for batch, seq in ((2, 5), (1, 9), (0, 3)):
        x = rand(batch, seq, 32, seed=seq)
        (expected,) = onnxruntime_outputs(model, {"x": x})
        (actual,) = module.run([x])
        assert actual.shape == expected.shape == (batch, 4, seq, 8)
        np.testing.assert_array_equal(actual, expected)


def test_an_expand_to_a_run_time_shape_and_a_whole_axis_slice_keep_the_batch_dim():
    """magika's one-hot (a file-type model in a pip package, exported by jax2tf): Expand to Shape -> Cast(int32)
    -> Slice -> Concat(.., 2048, 1) -> Cast(int64), then x[0:10**9] on every axis. Each used to invent fresh dims,
    so the output lost the batch dim and a server could not batch it."""
    from tests.helpers import build_and_load, make_model

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["s32"], to=onnx.TensorProto.INT32),
        helper.make_node("Slice", ["s32", "zero", "one"], ["batch"]),
        helper.make_node("Concat", ["batch", "width", "unit"], ["target32"], axis=0),
        helper.make_node("Cast", ["target32"], ["target"], to=onnx.TensorProto.INT64),
        helper.make_node("Unsqueeze", ["x", "last"], ["x3"]),
        helper.make_node("Expand", ["x3", "target"], ["wide"]),
        helper.make_node("Slice", ["wide", "starts", "ends", "axes"], ["y"]),
    ]
    inits = {"zero": np.array([0], np.int32), "one": np.array([1], np.int32), "width": np.array([6], np.int32),
             "unit": np.array([1], np.int32), "last": np.array([2], np.int64),
             "starts": np.zeros(3, np.int64), "ends": np.full(3, 10**9, np.int64), "axes": np.array([0, 2, 1])}  # fmt: skip
    model = make_model(nodes, {"x": rand(1, 6)}, ["y"], inits, input_shapes={"x": ["N", 6]})
    module = build_and_load(model)
    assert module.outputs[0].shape == ("N", 6, 1)
    x = rand(3, 6)
    np.testing.assert_array_equal(module.run([x])[0], onnxruntime_outputs(model, {"x": x})[0])
