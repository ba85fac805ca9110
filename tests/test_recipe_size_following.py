"""What the real-weight campaign (camp50) found in the CPU delegates' recipes, each on a synthetic model.

1. A dynamic-shape YOLOv8's anchor grid, ``Shape -> Gather -> Cast(float) -> Range`` over its feature map's
   size, kept the whole region on the host: the recipe check did not follow float sizes. It now follows them as
   float32 computes them; the Range's length is known before each run, and the footprint still refuses a run
   whose activations pass ``max_memory`` before onnxruntime allocates.
2. ``constant_of_shape`` had no ONNX lowering: regions split around it, and int8 calibration ran on the host.
   It lowers to ConstantOfShape, sized from the shape the check follows (one computed from tensor values is not
   followed: the host plan runs it).
3. ``--target auto`` refused ``com.microsoft.DynamicQuantizeLSTM``; it now places that region on onnxruntime.
4. ``auto`` timed a region on inputs with every symbolic dim at one size, which an LSTM whose initial state is
   an input refused; the dims the recipe ties to fixed sizes now take them.
"""

from __future__ import annotations

import importlib.util
import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
import runtime_lite
from aot.testing import relative_l2
from runtime_lite.errors import ExecutionError
from tests.helpers import onnxruntime_outputs

ort = pytest.importorskip("onnxruntime")
needs_openvino = pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="openvino is not installed")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AOT_CACHE_DIR", str(tmp_path))
    return tmp_path


def _model(nodes, inputs, outputs, inits=None, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", inputs, outputs, [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _f(v):
    return np.array(v, np.float32)


def anchor_grid() -> onnx.ModelProto:
    """YOLOv8's anchor grid over a feature map of [N, 3, H, W]: ``arange(W) + 0.5`` (W as a float, halved, floored and
    doubled back: Div, Floor, Mul), added along the last axis, then times a ConstantOfShape column of the stride
    over the feature map's own shape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "i3"], ["w"], axis=0),
        helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["wf", "two"], ["half"]),
        helper.make_node("Floor", ["half"], ["floored"]),
        helper.make_node("Mul", ["floored", "two"], ["limit"]),
        helper.make_node("Range", ["zero", "limit", "one"], ["r"]),
        helper.make_node("Add", ["r", "offset"], ["centres"]),
        helper.make_node("Add", ["x", "centres"], ["shifted"]),
        helper.make_node("ConstantOfShape", ["shape"], ["stride"], value=numpy_helper.from_array(_f([8.0]), "value")),
        helper.make_node("Mul", ["shifted", "stride"], ["y"]),
    ]
    inits = {"i3": np.array(3, np.int64), "two": _f(2.0), "zero": _f(0.0), "one": _f(1.0), "offset": _f(0.5)}
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        inits,
    )


@pytest.mark.parametrize("target", ["onnxruntime", "auto"])
@pytest.mark.parametrize("bounds", [None, ("N", 3, (32, 640), (32, 640))], ids=["unbounded", "bounded"])
def test_a_range_over_a_float_size_of_the_input_runs_on_onnxruntime_at_every_size(target, bounds):
    model = anchor_grid()
    shapes = None if bounds is None else {"x": bounds}
    result = aot.build(model, targets=[target], input_shapes=shapes, log=None)
    assert result.regions["host"] == 0 and len(result.header["modules"]) == 1, result.regions
    options = {"auto": {"runs": 1}} if target == "auto" else {}
    module = runtime_lite.load(result.to_bytes(), require=(target,), backend_options=options)
    (placement,) = module.placement.values()
    assert placement["runs_on"] == target, placement
    for shape in [(1, 3, 32, 32), (2, 3, 40, 64), (1, 3, 320, 96)]:
        x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        assert relative_l2(module.run({"x": x})[0], onnxruntime_outputs(model, {"x": x})[0]) < 1e-5


def _hostile(scale: float) -> onnx.ModelProto:
    """A recipe-sized Range over the input's width times ``scale``: a few bytes asking for gigabytes."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "i3"], ["w"], axis=0),
        helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["wf", "scale"], ["limit"]),
        helper.make_node("Range", ["zero", "limit", "one"], ["r"]),
        helper.make_node("ReduceSum", ["r"], ["s"], keepdims=0),
        helper.make_node("Add", ["x", "s"], ["y"]),
    ]
    inits = {"i3": np.array(3, np.int64), "scale": _f(scale), "zero": _f(0.0), "one": _f(1.0)}
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        inits,
    )


def test_a_range_sized_from_the_input_past_max_memory_is_refused_before_onnxruntime_allocates():
    bundle = aot.build(_hostile(1e8), targets=["onnxruntime"], log=None).to_bytes()
    module = runtime_lite.load(bundle, max_memory=64 << 20, require=("onnxruntime",))
    small = np.zeros((1, 3, 4, 4), np.float32)
    with pytest.raises(ExecutionError, match="max_memory"):
        module.run({"x": small})  # 4e8 floats: 1.6 GB, refused by the footprint
    fine = runtime_lite.load(aot.build(_hostile(2.0), targets=["onnxruntime"], log=None).to_bytes(),
                             max_memory=64 << 20, require=("onnxruntime",))  # fmt: skip
    assert relative_l2(fine.run({"x": small})[0], onnxruntime_outputs(_hostile(2.0), {"x": small})[0]) < 1e-5


def test_the_footprint_follows_float_sizes_as_float32_rounds_them():
    """16777217 is not a float32: Cast rounds it to 16777216, so a Range to it has that many elements."""
    from runtime_lite.backends.onnxruntime.shapes import Node, walk

    nodes = [
        Node("Cast", ["n"], ["nf"], {"to": 1}),
        Node("Range", ["zero", "nf", "one"], ["r"]),
        Node("Cast", ["nf"], ["back"], {"to": 7}),
        Node("ConstantOfShape", ["back"], ["c"]),
    ]
    shapes, _ = walk({}, {"n": (1,), "zero": (), "one": ()}, {"n": [16777217], "zero": [0.0], "one": [1.0]}, nodes)
    assert shapes["r"] == (16777216,) and shapes["c"] == (16777216,)


def test_constant_of_shape_lowers_into_the_region_and_one_from_tensor_values_runs_on_the_host():
    """A ConstantOfShape over a computed shape stays in the region (one region, no host ops), int64 and float;
    one whose shape comes from an input's values cannot be sized before the run, so the host plan runs it."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("ConstantOfShape", ["shape"], ["ones"], value=numpy_helper.from_array(np.array([3], np.int64), "value")),
        helper.make_node("Cast", ["ones"], ["onesf"], to=TensorProto.FLOAT),
        helper.make_node("ConstantOfShape", ["shape"], ["halves"], value=numpy_helper.from_array(_f([0.5]), "value")),
        helper.make_node("Mul", ["x", "onesf"], ["a"]),
        helper.make_node("Add", ["a", "halves"], ["y"]),
    ]  # fmt: skip
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])  # fmt: skip
    result = aot.build(model, targets=["onnxruntime"], log=None)
    assert result.regions["host"] == 0 and len(result.header["modules"]) == 1, result.regions
    module = runtime_lite.load(result.to_bytes(), require=("onnxruntime",))
    for n in (1, 5):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        assert relative_l2(module.run({"x": x})[0], onnxruntime_outputs(model, {"x": x})[0]) < 1e-5

    from_values = [helper.make_node("ConstantOfShape", ["dims"], ["y"])]  # the shape is the input's data
    model = _model(from_values, [helper.make_tensor_value_info("dims", TensorProto.INT64, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])  # fmt: skip
    module = runtime_lite.load(aot.build(model, targets=["onnxruntime"], log=None).to_bytes())
    assert [p["runs_on"] for p in module.placement.values()] == ["host"], module.placement
    with pytest.raises(runtime_lite.errors.PlacementError, match="could not bound its memory"):
        runtime_lite.load(aot.build(model, targets=["onnxruntime"], log=None).to_bytes(), require=("onnxruntime",))


@needs_openvino
def test_an_unbounded_region_under_auto_says_why_once(caplog):
    from_values = [helper.make_node("ConstantOfShape", ["dims"], ["y"])]
    model = _model(from_values, [helper.make_tensor_value_info("dims", TensorProto.INT64, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])  # fmt: skip
    with caplog.at_level(logging.WARNING):
        module = runtime_lite.load(aot.build(model, targets=["auto"], log=None).to_bytes())
    (placement,) = module.placement.values()
    assert placement["runs_on"] == "host"
    assert placement["detail"].count("could not bound its memory") == 1, placement["detail"]
    warned = [r.getMessage() for r in caplog.records if "could not bound" in r.getMessage()]
    assert warned and all(m.count("could not bound its memory") == 1 for m in warned), warned


# -- 3 and 4: auto and the recurrent layers ------------------------------------------------------------------------

HIDDEN, FEATURES = 16, 8


def lstm(initial_state: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = {
        "W": rng.standard_normal((2, 4 * HIDDEN, FEATURES)) * 0.2, "R": rng.standard_normal((2, 4 * HIDDEN, HIDDEN)) * 0.2,
        "B": rng.standard_normal((2, 8 * HIDDEN)) * 0.1,
    }  # fmt: skip
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", "batch", FEATURES])]
    slots = ["x", "W", "R", "B"]
    if initial_state:  # a state whose every dim is symbolic, as a host op made ddddocr's
        slots += ["", "h0", "c0"]
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [f"{n}_a", f"{n}_b", f"{n}_c"])
                   for n in ("h0", "c0")]  # fmt: skip
    nodes = [helper.make_node("LSTM", slots, ["y", "", ""], hidden_size=HIDDEN, direction="bidirectional")]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", 2, "batch", HIDDEN])]
    return _model(nodes, inputs, out, {k: v.astype(np.float32) for k, v in weights.items()}, opset=14)


@pytest.fixture(scope="module")
def quantized_lstm(tmp_path_factory):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = tmp_path_factory.mktemp("contrib")
    onnx.save(lstm(False), folder / "lstm.onnx")
    quantize_dynamic(folder / "lstm.onnx", folder / "lstm_int8.onnx", weight_type=QuantType.QInt8)
    return folder / "lstm_int8.onnx"


def test_auto_places_a_dynamically_quantized_lstm_on_onnxruntime(quantized_lstm):
    result = aot.build(str(quantized_lstm), targets=["auto"], log=None)
    assert result.regions["host"] == 0 and len(result.header["modules"]) == 1, result.regions
    module = runtime_lite.load(result.to_bytes(), require=("auto",))
    (placement,) = module.placement.values()
    assert placement["runs_on"] == "auto" and "on onnxruntime" in placement["detail"], placement
    assert "com.microsoft.DynamicQuantizeLSTM" in placement["detail"], placement
    session = ort.InferenceSession(str(quantized_lstm), providers=["CPUExecutionProvider"])
    for seq, batch in [(5, 1), (23, 3)]:  # (an empty batch aborts onnxruntime's DynamicQuantizeLSTM, 1.32)
        x = np.random.default_rng(seq).standard_normal((seq, batch, FEATURES)).astype(np.float32)
        assert relative_l2(module.run({"x": x})[0], session.run(None, {"x": x})[0]) < 1e-5


@needs_openvino
def test_auto_times_an_lstm_whose_state_dims_are_symbolic_at_the_sizes_the_lstm_takes(monkeypatch):
    from runtime_lite.backends import auto

    seen = []
    real = auto.time_engines
    monkeypatch.setattr(auto, "time_engines", lambda engines, inputs, *a: seen.append([i.shape for i in inputs])
                        or real(engines, inputs, *a))  # fmt: skip
    model = lstm(True)
    module = runtime_lite.load(aot.build(model, targets=["auto"], log=None).to_bytes(),
                               backend_options={"auto": {"runs": 2}})  # fmt: skip
    (placement,) = module.placement.values()
    assert "measured here: " in placement["detail"], placement["detail"]
    assert seen == [[(1, 224, FEATURES), (2, 224, HIDDEN), (2, 224, HIDDEN)]], seen
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((7, 2, FEATURES)).astype(np.float32),
             "h0": rng.standard_normal((2, 2, HIDDEN)).astype(np.float32),
             "c0": rng.standard_normal((2, 2, HIDDEN)).astype(np.float32)}  # fmt: skip
    assert relative_l2(module.run(feeds)[0], onnxruntime_outputs(model, feeds)[0]) < 1e-5
