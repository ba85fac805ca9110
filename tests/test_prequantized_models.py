"""Models quantized before aot: onnxruntime's ``quantize_static`` output, in its QDQ and QOperator formats.

Their int8 survives the build (docs/quantization.md, "Models quantized before aot"): a
``DequantizeLinear`` of a constant integer weight stays a ``dequantize`` node instead of being
folded into float32 (aot/passes/constant_folding.py), so the bundle stores the int8 weight; the
QOperator ops (QLinearConv, QGemm, ...) become the same ``dequantize -> float op -> quantize`` form
(aot/frontend/onnx/more_converters.py, contrib_converters.py), which onnxruntime regions take whole
and fuse back into their integer kernels; the host plan dequantizes each weight once, at its first
run (runtime_lite/execution/plan.py), not at every run.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
import runtime_lite
from runtime_lite.backends.onnxruntime.int8 import kernels_here
from tests.helpers import onnxruntime_outputs, rand


def _float_cnn() -> onnx.ModelProto:
    """Conv/ReLU x3 (a stride, a residual Add), global pooling and a Gemm: random weights, ~60k of them."""
    rs = np.random.RandomState(0)

    def conv(cin: int, cout: int) -> tuple[np.ndarray, np.ndarray]:
        w = rs.randn(cout, cin, 3, 3) * np.sqrt(2.0 / (cin * 9))
        return w.astype(np.float32), (rs.randn(cout) * 0.1).astype(np.float32)

    inits = {}
    for name, (cin, cout) in {"c1": (3, 32), "c2": (32, 64), "c3": (64, 64)}.items():
        inits[f"{name}_w"], inits[f"{name}_b"] = conv(cin, cout)
    inits["fc_w"] = (rs.randn(10, 64) * 0.3).astype(np.float32)
    inits["fc_b"] = (rs.randn(10) * 0.1).astype(np.float32)
    pads = dict(pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    nodes = [
        helper.make_node("Conv", ["x", "c1_w", "c1_b"], ["a1"], **pads),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("Conv", ["r1", "c2_w", "c2_b"], ["a2"], strides=[2, 2], **pads),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("Conv", ["r2", "c3_w", "c3_b"], ["a3"], **pads),
        helper.make_node("Add", ["a3", "r2"], ["s3"]),
        helper.make_node("Relu", ["s3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _x(seed: int) -> np.ndarray:
    return rand(1, 3, 16, 16, seed=seed, low=-2, high=2)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory) -> dict[str, onnx.ModelProto]:
    """The CNN through onnxruntime's ``quantize_static`` (int8 activations and weights, per channel)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": _x(seed)} for seed in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    folder = tmp_path_factory.mktemp("prequantized")
    onnx.save(_float_cnn(), folder / "float.onnx")
    models = {}
    for fmt in ("QDQ", "QOperator"):
        out = folder / f"{fmt}.onnx"
        quantize_static(folder / "float.onnx", out, Reader(), quant_format=getattr(QuantFormat, fmt), per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)  # fmt: skip
        models[fmt] = onnx.load(out)
    # uint8 activations (onnxruntime's older default, and the model zoo's QDQ files)
    quantize_static(folder / "float.onnx", folder / "u8.onnx", Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)  # fmt: skip
    models["QDQ-uint8"] = onnx.load(folder / "u8.onnx")
    return models


def _quantized_function(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The model's output with its integer sums exact on every x86 CPU: onnxruntime on the file with its u8 x u8
    kernels (``session.x64quantprecision``). Its default kernels are exact only where the CPU has VNNI; without,
    they saturate u8 x s8 sums (an emulated AMD Zen 3 put the file's own run 4-7 steps from this)."""
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.x64quantprecision", "1")
    try:
        session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except onnxruntime.capi.onnxruntime_pybind11_state.NotImplemented:  # QGemm has no u8 x u8 kernel
        return onnxruntime_outputs(model, feeds)[0]
    return session.run(None, feeds)[0]


def _output_step(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear that makes the model's output: one step of it."""
    (node,) = [n for n in model.graph.node if n.output[0] == model.graph.output[0].name]
    assert node.op_type == "DequantizeLinear", node.op_type
    scales = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return float(scales[node.input[1]])


def _steps_apart(a: np.ndarray, b: np.ndarray, step: float) -> np.ndarray:
    return np.rint(np.abs(a.astype(np.float64) - b.astype(np.float64)) / step)


def _optimized_ops(bundle: bytes, monkeypatch, tmp_path) -> collections.Counter:
    """The op types of the graph onnxruntime optimized from the bundle's recipe (its fusions done), at load."""
    real = onnxruntime.InferenceSession

    def keeping(model, options=None, *args, **kwargs):
        options = options or onnxruntime.SessionOptions()
        options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
        return real(model, options, *args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", keeping)
    module = runtime_lite.load(bundle, backend_options={"onnxruntime": {"int8": "integer"}})
    assert [p["runs_on"] for p in module.placement.values()] == ["onnxruntime"], module.placement
    return collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node)


def _file_ops(model: onnx.ModelProto, tmp_path) -> collections.Counter:
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.optimized_model_filepath = str(tmp_path / "file_optimized.onnx")
    onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "file_optimized.onnx")).graph.node)


def _recipe(result) -> onnx.ModelProto:
    (record,) = result.header["modules"]
    assert record["backend"] == "onnxruntime"
    return onnx.load_from_string(bytes(result.blobs.payloads[record["payloads"]["recipe"]]))


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_the_bundle_keeps_the_int8_weights_and_onnxruntime_fuses_them(quantized, fmt, monkeypatch, tmp_path):
    model = quantized[fmt]
    result = aot.build(model, targets=["onnxruntime"], log=None)
    assert len(result.header["modules"]) == 1  # one region: no float64 arithmetic left on the host
    bundle = result.to_bytes()
    quantized_bytes, float_bytes = len(model.SerializeToString()), len(_float_cnn().SerializeToString())
    # The weights are int8 in the bundle: it is about the quantized file's size (the float model is ~4x)
    assert len(bundle) <= 1.3 * quantized_bytes + 16384, (len(bundle), quantized_bytes, float_bytes)
    assert len(bundle) < 0.5 * float_bytes, (len(bundle), float_bytes)
    recipe = _recipe(result)
    types = {t.name: t.data_type for t in recipe.graph.initializer}
    dequantized = collections.Counter(
        types.get(n.input[0]) for n in recipe.graph.node if n.op_type == "DequantizeLinear"
    )
    assert dequantized[TensorProto.INT8] == 4, dequantized  # 3 conv weights and the Gemm's
    assert dequantized[TensorProto.INT32] == 4, dequantized  # their biases
    assert not any(t == TensorProto.DOUBLE for t in types.values())
    theirs = _file_ops(model, tmp_path)
    ours = _optimized_ops(bundle, monkeypatch, tmp_path)
    # An int8 recipe like one the build quantized: its activations' Q/DQ pairs written as uint8, which onnxruntime
    # fuses around every convolution, where on the QDQ file it keeps s8 and leaves convolutions in float
    assert ours["QLinearConv"] == 3 and ours["Conv"] == 0, ours
    assert ours["QLinearConv"] >= theirs["QLinearConv"], (ours, theirs)
    if fmt == "QDQ":  # a QOperator file's QGemm comes back as DequantizeLinear -> Gemm, which stays float
        assert ours["QGemm"] >= theirs["QGemm"], (ours, theirs)


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_outputs_match_onnxruntime_on_the_quantized_file_and_the_host_plan_the_region(quantized, fmt):
    """Within one step of the output's quantization everywhere, against the quantized function as ONNX defines it
    (``_quantized_function``; onnxruntime's run of the file is that too on a CPU with VNNI). The bundle's region
    fuses every convolution into integer kernels (int32 sums); the reference and the host sum dequantized values
    in float: a value near a rounding boundary can fall one step the other way, and a flip carries into the
    layers after it. Integer kernels are asked for (exact u8 x u8 ones on a CPU without VNNI, whose default is
    float kernels, test below)."""
    model = quantized[fmt]
    step = _output_step(model)
    bundle = aot.build(model, targets=["onnxruntime"], log=None).to_bytes()
    region = runtime_lite.load(bundle, backend_options={"onnxruntime": {"threads": 1, "int8": "integer"}})
    host = runtime_lite.load(bundle, backend_options={"onnxruntime": {"enabled": False}})
    assert [p["runs_on"] for p in host.placement.values()] == ["host"]
    apart = []
    for seed in range(10, 16):
        feeds = {"x": _x(seed)}
        expected = _quantized_function(model, feeds)
        (ours,) = region.run(feeds)
        (on_host,) = host.run(feeds)
        assert _steps_apart(ours, expected, step).max() <= 1
        assert _steps_apart(on_host, ours, step).max() <= 1
        apart.append(_steps_apart(ours, expected, step))
    assert np.mean(np.concatenate(apart) > 0) <= 0.1


def test_the_cpu_chooses_the_kernels_of_a_model_quantized_before_aot(quantized):
    """Its recipe is an int8 recipe: integer kernels where the CPU has an 8-bit dot product, float kernels where
    onnxruntime's u8 x s8 would saturate (docs/quantization.md), said in the placement."""
    bundle = aot.build(quantized["QDQ"], targets=["onnxruntime"], log=None).to_bytes()
    feeds = {"x": _x(23)}
    on_float = runtime_lite.load(bundle, backend_options={"onnxruntime": {"int8": "float"}})
    assert "int8 weights on float kernels" in on_float.placement["onnxruntime_0"]["detail"]
    default = runtime_lite.load(bundle).placement["onnxruntime_0"]["detail"]
    assert "int8 on integer kernels" in default or "int8 weights on float kernels" in default, default
    (expected,) = onnxruntime_outputs(quantized["QDQ"], feeds)
    (ours,) = on_float.run(feeds)
    assert np.linalg.norm(ours - expected) / np.linalg.norm(expected) < 0.05  # the weights' rounding, not more


def test_the_host_plan_dequantizes_each_weight_once_at_its_first_run(quantized):
    model = quantized["QDQ"]
    module = runtime_lite.load(aot.build(model, log=None).to_bytes())  # host only
    plan = module._plan
    dequantized = {n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    weights = [t for t in model.graph.initializer if t.name in dequantized]
    dequantize = [ins for ins in plan.instructions if ins.op == "dequantize"]
    assert plan.precomputed_bytes == 0 and len(plan._precompute) >= len(weights) == 8
    feeds = {"x": _x(20)}
    first = module.run(feeds)[0]
    # each weight's and bias's float32 copy is kept: 4 bytes per element, counted as constants are (never
    # charged to a run's max_memory)
    assert plan.precomputed_bytes == 4 * sum(int(np.prod(t.dims)) for t in weights)
    kept = [plan._template[slot] for i in plan._precompute for slot in plan.instructions[i].outputs]
    assert kept and all(isinstance(v, np.ndarray) and not v.flags.writeable for v in kept)
    assert len(dequantize) == len([n for n in model.graph.node if n.op_type == "DequantizeLinear"])
    np.testing.assert_array_equal(module.run(feeds)[0], first)
    assert _steps_apart(first, _quantized_function(model, feeds), _output_step(model)).max() <= 1


def test_first_runs_from_many_threads_at_once_agree(quantized):
    """The weights are dequantized at the first run, under a lock: a Module is shared between threads, and
    runs that start together must each see the plan either before or after, never half way."""
    from concurrent.futures import ThreadPoolExecutor

    module = runtime_lite.load(aot.build(quantized["QDQ"], log=None).to_bytes())  # host only
    feeds = {"x": _x(21)}
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: module.run(feeds)[0], range(16)))
    assert module._plan.precomputed_bytes > 0
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])


def test_uint8_activations_stay_in_one_onnxruntime_region_with_the_files_outputs(quantized):
    """Q/DQ of uint8 with a zero point: onnxruntime fuses them as it does int8, so they join the region (they
    were refused, and each split the model: SqueezeNet made 38 regions with 76 host ops between)."""
    model = quantized["QDQ-uint8"]
    result = aot.build(model, targets=["onnxruntime"], log=None)
    assert [r["backend"] for r in result.header["modules"]] == ["onnxruntime"]
    kinds = {n.op_type: n for n in _recipe(result).graph.node}
    assert "QuantizeLinear" in kinds and "DequantizeLinear" in kinds
    module = runtime_lite.load(result.to_bytes(), backend_options={"onnxruntime": {"int8": "integer"}})
    assert [p["runs_on"] for p in module.placement.values()] == ["onnxruntime"], module.placement
    feeds = {"x": _x(22)}
    (ours,) = module.run(feeds)
    assert _steps_apart(ours, _quantized_function(model, feeds), _output_step(model)).max() <= 1
    if kernels_here("auto").kernels == "integer":  # VNNI: the file's graph, the file's fusions, the same kernels
        (expected,) = onnxruntime_outputs(model, feeds)
        np.testing.assert_array_equal(ours, expected)
