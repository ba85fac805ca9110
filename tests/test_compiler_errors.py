"""Compiler errors: each is one line naming the culprit, raised as an AotError subclass."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import aot
from aot.errors import AotError, BuildError, ModelError, ShapeError, UnsupportedOpsError
from tests.helpers import make_model, rand


def raises(kind, fn, *words) -> str:
    with pytest.raises(kind) as info:
        fn()
    message = str(info.value)
    assert "\n" not in message and isinstance(info.value, AotError)
    for word in words:
        assert word in message, message
    return message


def test_every_unsupported_op_is_listed_with_a_node_name():
    nodes = [
        helper.make_node("Unique", ["x"], ["v"], name="uniq"),
        helper.make_node("NonZero", ["x"], ["nz"], name="nz_a"),
        helper.make_node("NonZero", ["v"], ["nz2"], name="nz_b"),
        helper.make_node("FusedConv", ["x"], ["f"], name="ms_conv", domain="com.microsoft"),
        helper.make_node("Relu", ["x"], ["r"]),
    ]
    model = make_model(nodes, {"x": rand(4)}, ["nz", "nz2", "f", "r"])
    message = raises(
        UnsupportedOpsError, lambda: aot.build(model), "3 types", "Unique (node 'uniq')", "com.microsoft.FusedConv"
    )
    assert "NonZero (node 'nz_a', 2 nodes)" in message


def test_not_an_onnx_file(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x00\xffnot a protobuf at all" * 10)
    raises(ModelError, lambda: aot.build(str(path)), "cannot parse ONNX model")
    raises(ModelError, lambda: aot.build(str(tmp_path / "missing.onnx")), "does not exist")


def test_undefined_tensor_is_named():
    model = make_model([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")], {"x": rand(2)}, ["y"])
    raises(ModelError, lambda: aot.build(model), "'adder'", "'ghost'")


def test_cycle_is_named():
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
    ]
    model = make_model(nodes, {"x": rand(2)}, ["a"])
    raises(ModelError, lambda: aot.build(model), "cycle")


def test_shape_mismatch_names_the_node():
    model = make_model(
        [helper.make_node("Add", ["a", "b"], ["y"], name="bad_add")], {"a": rand(2, 3), "b": rand(4)}, ["y"]
    )
    raises(ShapeError, lambda: aot.build(model), "bad_add", "cannot broadcast dims 3 and 4")


def test_conv_channel_mismatch_names_the_node():
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="c1")],
        {"x": rand(1, 3, 5, 5)},
        ["y"],
        {"w": rand(2, 4, 3, 3)},
    )
    raises(ShapeError, lambda: aot.build(model), "c1", "3 channels")


def test_runtime_only_attribute_input_is_explained():
    feeds = {"x": rand(4, 4), "repeats": np.array([1, 2], np.int64)}
    model = make_model([helper.make_node("Tile", ["x", "repeats"], ["y"], name="dyn")], feeds, ["y"])
    raises(UnsupportedOpsError, lambda: aot.build(model), "'dyn'", "'repeats' must be a constant")


def test_unsupported_dtype_is_named():
    x = helper.make_tensor_value_info("x", onnx.TensorProto.STRING, [2])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.STRING, [2])
    model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y]))
    raises(UnsupportedOpsError, lambda: aot.build(model), "input 'x'", "STRING")


def test_input_shape_options_are_checked(small_model):
    raises(ShapeError, lambda: aot.build(small_model, input_shapes={"nope": (1, 3, 8, 8)}), "'nope'", "x")
    raises(ShapeError, lambda: aot.build(small_model, input_shapes={"x": (1, 3, 8)}), "rank 4")
    raises(ShapeError, lambda: aot.build(small_model, input_shapes={"x": (2, 3, 8, 8)}), "dim 0 is fixed to 1")


def test_unknown_target(small_model):
    raises(
        BuildError,
        lambda: aot.build(small_model, targets=["fpga"]),
        "'fpga'",
        "host, auto, npu, onnxruntime, openvino, tensorrt",
    )


def test_unwritable_output_leaves_nothing(small_build, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_bytes(b"")  # a path under a regular file is unwritable for every user, root included
    raises(BuildError, lambda: small_build.save(blocker / "m.aotb"), "cannot write bundle", "m.aotb")
    raises(BuildError, lambda: small_build.save(tmp_path / "missing_dir" / "m.aotb"), "cannot write bundle")
    raises(BuildError, lambda: small_build.save(tmp_path), "is a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


@pytest.mark.parametrize("route", ["save", "to_bytes"])
def test_a_bundle_runtime_lite_would_refuse_is_a_build_error_and_never_written(tmp_path, route):
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    result = aot.build(make_model(nodes, {"x": rand(2, 3)}, ["y"]))
    result.header["signature"]["inputs"][0]["shape"] = [-1, 3]  # what a writer bug would emit
    target = tmp_path / "model.aotb"
    fn = (lambda: result.save(target)) if route == "save" else result.to_bytes
    raises(BuildError, fn, "does not read back", "signature.inputs[0]")
    assert list(tmp_path.iterdir()) == []  # neither the bundle nor a temporary


def test_a_symbol_for_a_fixed_dim_is_refused_at_build_time():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": rand(1, 3)}, ["y"])
    raises(ShapeError, lambda: aot.build(model, input_shapes={"x": ("N", 3)}), "dim 0 is fixed to 1", "'N'")
