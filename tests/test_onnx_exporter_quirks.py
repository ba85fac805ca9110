"""What ONNX exporters actually write, beyond one op at a time.

- The ops whose signature moved between opsets (Slice, Squeeze/Unsqueeze axes, Resize,
  Split, ReduceSum axes, Clip bounds), each written the way its opset spells it, at opsets
  9, 11, 13, 17 and 21, against onnxruntime.
- ``Constant`` chains feeding shapes (Constant -> Cast -> Concat -> Reshape, Constant ->
  ConstantOfShape -> Shape -> Expand), which must fold while the model is read.
- Weights in external data files next to the model (``onnx.save(...,
  save_as_external_data=True)``, how models past protobuf's 2 GB limit are stored):
  the model loads and builds from its path, through ``aot.build`` and ``aot-build``.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper

import runtime_lite
from tests.helpers import assert_matches_onnxruntime, make_model, onnxruntime_outputs, rand

OPSETS = (9, 11, 13, 17, 21)


def node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), **attrs)


def ints(*values):
    return np.array(values, np.int64)


def slice_model(opset):
    x = rand(4, 6, 5)
    if opset < 10:
        nodes = [node("Slice", ["x"], starts=[1, -4], ends=[3, 100], axes=[0, 1])]
        return make_model(nodes, {"x": x}, ["y"], opset=opset), {"x": x}
    inits = {"s": ints(1, -4, 4), "e": ints(3, 100, 0), "a": ints(0, 1, 2), "st": ints(1, 1, -2)}
    return make_model([node("Slice", ["x", "s", "e", "a", "st"])], {"x": x}, ["y"], inits, opset=opset), {"x": x}


def squeeze_unsqueeze_model(opset):
    x = rand(2, 1, 3)
    if opset < 13:
        nodes = [node("Squeeze", ["x"], ["s"], axes=[1]), node("Unsqueeze", ["s"], axes=[0, -1])]
        return make_model(nodes, {"x": x}, ["y"], opset=opset), {"x": x}
    nodes = [node("Squeeze", ["x", "sa"], ["s"]), node("Unsqueeze", ["s", "ua"])]
    inits = {"sa": ints(1), "ua": ints(0, -1)}
    return make_model(nodes, {"x": x}, ["y"], inits, opset=opset), {"x": x}


def resize_model(opset):
    x = rand(1, 2, 3, 4)
    scales = np.array([1, 1, 2, 1.5], np.float32)
    if opset < 10:
        return make_model([node("Upsample", ["x", "sc"])], {"x": x}, ["y"], {"sc": scales}, opset=opset), {"x": x}
    inits = {"roi": np.array([], np.float32), "sc": scales}
    attrs = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    return make_model([node("Resize", ["x", "roi", "sc"], **attrs)], {"x": x}, ["y"], inits, opset=opset), {"x": x}


def split_model(opset):
    x = rand(2, 7)
    outputs = ["a", "b", "c"]
    tail = [node("Concat", ["c", "a"], ["y"], axis=1)]
    if opset < 13:
        nodes = [node("Split", ["x"], outputs, axis=1, split=[2, 2, 3])] + tail
        return make_model(nodes, {"x": x}, ["y"], opset=opset), {"x": x}
    if opset >= 18:  # num_outputs: the last chunk is the smaller one
        nodes = [node("Split", ["x"], outputs, axis=1, num_outputs=3)] + tail
        return make_model(nodes, {"x": x}, ["y"], opset=opset), {"x": x}
    nodes = [node("Split", ["x", "sizes"], outputs, axis=1)] + tail
    return make_model(nodes, {"x": x}, ["y"], {"sizes": ints(2, 2, 3)}, opset=opset), {"x": x}


def reduce_sum_model(opset):
    x = rand(2, 3, 4)
    if opset < 13:
        return make_model([node("ReduceSum", ["x"], axes=[0, -1], keepdims=0)], {"x": x}, ["y"], opset=opset), {"x": x}
    nodes = [node("ReduceSum", ["x", "axes"], keepdims=0)]
    return make_model(nodes, {"x": x}, ["y"], {"axes": ints(0, -1)}, opset=opset), {"x": x}


def clip_model(opset):
    x = rand(2, 3, 4, low=-3, high=3)
    if opset < 11:
        return make_model([node("Clip", ["x"], min=-0.5, max=2.0)], {"x": x}, ["y"], opset=opset), {"x": x}
    inits = {"lo": np.array(-0.5, np.float32)}
    return make_model([node("Clip", ["x", "lo", ""])], {"x": x}, ["y"], inits, opset=opset), {"x": x}


MOVED_SIGNATURES = {
    "slice": slice_model,
    "squeeze_unsqueeze": squeeze_unsqueeze_model,
    "resize": resize_model,
    "split": split_model,
    "reduce_sum": reduce_sum_model,
    "clip": clip_model,
}


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("op", sorted(MOVED_SIGNATURES))
def test_an_op_whose_signature_moved_reads_as_its_opset_spells_it(op, opset):
    model, feeds = MOVED_SIGNATURES[op](opset)
    assert_matches_onnxruntime(model, feeds)


def test_constant_chains_feeding_shapes_fold_while_the_model_is_read():
    """Shapes built from Constant nodes through Cast, Concat, ConstantOfShape and Shape, as exporters write them."""
    x = rand(2, 12)
    tensor = onnx.numpy_helper.from_array
    nodes = [
        node("Constant", [], ["three_f"], value=tensor(np.array([3.0], np.float32))),
        node("Cast", ["three_f"], ["three"], to=onnx.TensorProto.INT64),
        node("Constant", [], ["minus_one"], value_ints=[-1]),
        node("Constant", [], ["zero"], value_int=0),
        node("Unsqueeze", ["zero", "axes0"], ["zero1"]),
        node("Concat", ["zero1", "minus_one", "three"], ["target"], axis=0),
        node("Reshape", ["x", "target"], ["r"]),  # [2, 4, 3]
        node("Constant", [], ["ones_shape"], value_ints=[1, 4, 1]),
        node("ConstantOfShape", ["ones_shape"], ["ones"], value=tensor(np.array([2.0], np.float32))),
        node("Shape", ["r"], ["r_shape"]),
        node("Expand", ["ones", "r_shape"], ["scale"]),
        node("Mul", ["r", "scale"]),
    ]
    model = make_model(nodes, {"x": x}, ["y"], {"axes0": ints(0)}, opset=13)
    assert_matches_onnxruntime(model, {"x": x})
    from aot.frontend.onnx import from_onnx

    ops = {n.op for n in from_onnx(model).nodes}
    assert not {"shape", "concat", "cast", "constant_of_shape"} & ops, ops


def external_data_model(tmp_path):
    """A two-layer MLP whose weights live in ``weights.bin`` next to ``model.onnx``."""
    x = rand(3, 64)
    inits = {"w1": rand(64, 256, seed=1), "b1": rand(256, seed=2), "w2": rand(256, 10, seed=3)}
    nodes = [node("MatMul", ["x", "w1"], ["h"]), node("Add", ["h", "b1"], ["a"]), node("Relu", ["a"], ["r"])]
    model = make_model(nodes + [node("MatMul", ["r", "w2"])], {"x": x}, ["y"], inits, input_shapes={"x": ["N", 64]})
    path = tmp_path / "model.onnx"
    onnx.save(onnx.ModelProto.FromString(model.SerializeToString()), path, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
              size_threshold=0)  # fmt: skip
    assert (tmp_path / "weights.bin").stat().st_size >= 64 * 256 * 4
    assert path.stat().st_size < 4096, "the weights must not be inside the protobuf"
    return path, model, {"x": x}


def test_weights_in_external_data_files_load_and_build(tmp_path):
    path, model, feeds = external_data_model(tmp_path)
    import aot

    module = runtime_lite.load(aot.build(str(path)).to_bytes())
    np.testing.assert_allclose(module.run(feeds)[0], onnxruntime_outputs(model, feeds)[0], rtol=1e-5, atol=1e-5)

    bundle = tmp_path / "model.aotb"
    result = subprocess.run(
        [sys.executable, "-m", "aot.cli.build", str(path), "-o", str(bundle), "-q"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(runtime_lite.load(bundle).run(feeds)[0], module.run(feeds)[0], rtol=0, atol=0)


def test_external_data_that_is_missing_is_a_one_line_error_naming_it(tmp_path):
    path, _, _ = external_data_model(tmp_path)
    (tmp_path / "weights.bin").unlink()
    import aot
    from aot.errors import AotError

    with pytest.raises(AotError) as error:
        aot.build(str(path))
    message = str(error.value)
    assert "\n" not in message and "weights.bin" in message, message
