"""onnxruntime's QOperator quantized models: QLinearConv and the com.microsoft QLinear* ops beside it.

``quantize_static(..., quant_format=QuantFormat.QOperator)`` (and the ONNX model zoo's *-int8 models)
write QLinearConv, QGemm, QLinearAdd, QLinearGlobalAveragePool, ... between one QuantizeLinear and one
DequantizeLinear. The frontend writes each as ``quantize(float op(dequantize(inputs)))`` (aot/frontend/onnx/
more_converters.py, contrib_converters.py): the integer weights and int32 biases stay constants, so
onnxruntime regions fuse the chain back into their integer kernels, and the host computes it in float32.
Here each op on random inputs, and a small CNN quantized by onnxruntime itself, are compared with
onnxruntime's QOperator kernels: the quantized values agree within one step, on few elements, not
exactly. onnxruntime sums int8 products in int32 (exact, with its u8 x u8 kernels: its default u8 x s8 ones
are exact only where the CPU has VNNI; without, ``VPMADDUBSW`` saturates a pair of products to int16, which
random full-range inputs hit on most outputs) and requantizes in float32; the host sums the
dequantized values in float32, whose rounding can move a result that lies near a rounding boundary
to the other side of it (and a rounding tie may fall either way). In a deep network such a flip
carries into the layers after it: see tests/test_prequantized_models.py and docs/quantization.md.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import build_and_load, make_model, onnxruntime_outputs, rand

MS = "com.microsoft"


def _model(nodes, inputs, outputs, inits, input_shapes=None, opset=13):
    model = make_model(nodes, inputs, outputs, inits, opset=opset, input_shapes=input_shapes)
    model.opset_import.append(helper.make_opsetid(MS, 1))
    return model


def _uint8(*shape: int, seed: int) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, size=shape).astype(np.uint8)


def _int8(*shape: int, seed: int) -> np.ndarray:
    return np.random.RandomState(seed).randint(-127, 128, size=shape).astype(np.int8)


def _close(model: onnx.ModelProto, feeds: dict[str, np.ndarray], max_steps: int = 1, share: float = 0.01) -> int:
    """Ours against onnxruntime's: same dtypes and shapes, quantized values at most ``max_steps`` apart, on at
    most ``share`` of the elements (or one: a tie rounded the other way); returns the largest difference."""
    ours = build_and_load(model).run(feeds)
    expected = _exact_onnxruntime_outputs(model, feeds)
    worst = 0
    for a, b in zip(ours, expected, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        if a.dtype.kind in "ui":
            assert diff.max(initial=0) <= max_steps, diff.max()
            assert (diff > 0).sum() <= max(1, share * diff.size), (diff > 0).sum()
            worst = max(worst, int(diff.max(initial=0)))
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    return worst


def _exact_onnxruntime_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs with its integer sums exact on every x86 CPU: its u8 x u8 kernels
    (``session.x64quantprecision``), as tests/test_prequantized_models.py's ``_quantized_function``; the default
    kernels where an op has no such kernel."""
    try:
        return onnxruntime_outputs(model, feeds, config={"session.x64quantprecision": "1"})
    except onnxruntime.capi.onnxruntime_pybind11_state.NotImplemented:
        return onnxruntime_outputs(model, feeds)


def _scales(**values: float) -> dict[str, np.ndarray]:
    return {name: np.array(v, np.float32) for name, v in values.items()}


# -- QLinearConv ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("per_channel", "group", "attrs"),
    [
        (False, 1, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
        (True, 1, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 1, 0])),
        (True, 8, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], dilations=[2, 2])),  # depthwise
        (True, 1, dict(kernel_shape=[1, 1])),
        (False, 2, dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER")),
    ],
    ids=["per-tensor", "per-channel-strided", "depthwise-dilated", "1x1", "grouped-same"],
)
def test_qlinearconv_matches_onnxruntime(per_channel, group, attrs):
    cin, cout = 8, 8 if group == 8 else 16
    w = _int8(cout, cin // group, *attrs["kernel_shape"], seed=1)
    inits = {
        "w": w,
        "w_scale": np.linspace(0.002, 0.01, cout).astype(np.float32) if per_channel else np.float32(0.004),
        "w_zero": np.zeros(cout if per_channel else (), np.int8),
        "bias": np.random.RandomState(2).randint(-3000, 3000, size=cout).astype(np.int32),
        **_scales(x_scale=0.02, y_scale=0.05),
        "x_zero": np.uint8(131), "y_zero": np.uint8(120),
    }  # fmt: skip
    node = helper.make_node(
        "QLinearConv", ["x", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero", "bias"], ["y"],
        group=group, **attrs,
    )  # fmt: skip
    x = _uint8(2, cin, 11, 9, seed=3)
    model = _model([node], {"x": x}, {"y": "uint8"}, inits, input_shapes={"x": ["N", cin, "H", "W"]})
    _close(model, {"x": x})
    _close(model, {"x": _uint8(1, cin, 7, 13, seed=4)})  # another size through the same bundle


def test_qlinearconv_int8_activations_without_bias():
    inits = {"w": _int8(4, 3, 3, 3, seed=5), "w_zero": np.int8(0), "x_zero": np.int8(-5), "y_zero": np.int8(7),
             **_scales(x_scale=0.03, w_scale=0.01, y_scale=0.02)}  # fmt: skip
    node = helper.make_node(
        "QLinearConv", ["x", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero"], ["y"],
        kernel_shape=[3, 3], pads=[1, 1, 1, 1],
    )  # fmt: skip
    x = _int8(1, 3, 10, 10, seed=6)
    _close(_model([node], {"x": x}, {"y": "int8"}, inits), {"x": x})


def test_conv_integer_sums_that_float32_cannot_hold_take_float64():
    """Wide weights (the sums pass 2**24) still convolve exactly: the kernel runs in float64 then."""
    from aot.frontend.onnx import from_onnx

    w = np.full((2, 64, 3, 3), 127, np.int8)
    node = helper.make_node("ConvInteger", ["x", "w", "x_zero"], ["y"], kernel_shape=[3, 3])
    x = np.full((1, 64, 5, 5), 255, np.uint8)
    model = make_model([node], {"x": x}, {"y": "int32"}, {"w": w, "x_zero": np.uint8(0)}, opset=13)
    convs = [n for n in from_onnx(model).nodes if n.op == "conv2d"]
    assert convs[0].inputs[0].type.dtype == "float64"
    (y,) = build_and_load(model).run({"x": x})
    assert (y == 255 * 127 * 64 * 9).all()


# -- the com.microsoft family ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary(op):
    inits = {**_scales(a_scale=0.05, b_scale=0.03, c_scale=0.07 if op == "QLinearAdd" else 0.4),
             "a_zero": np.uint8(128), "b_zero": np.uint8(100), "c_zero": np.uint8(90)}  # fmt: skip
    node = helper.make_node(op, ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "c_scale", "c_zero"], ["c"],
                            domain=MS)  # fmt: skip
    a, b = _uint8(2, 8, 5, 5, seed=7), _uint8(1, 8, 1, 5, seed=8)  # broadcast
    model = _model([node], {"a": a, "b": b}, {"c": "uint8"}, inits, input_shapes={"a": ["N", 8, 5, 5]})
    _close(model, {"a": a, "b": b})
    _close(model, {"a": a[:1], "b": b})


@pytest.mark.parametrize(("op", "attrs"), [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})])
def test_qlinear_activation(op, attrs):
    inits = {**_scales(x_scale=0.05, y_scale=0.004 if op == "QLinearSigmoid" else 0.04),
             "x_zero": np.uint8(128), "y_zero": np.uint8(0 if op == "QLinearSigmoid" else 30)}  # fmt: skip
    node = helper.make_node(op, ["x", "x_scale", "x_zero", "y_scale", "y_zero"], ["y"], domain=MS, **attrs)
    x = np.arange(256, dtype=np.uint8).reshape(1, 4, 8, 8)  # every value once
    _close(_model([node], {"x": x}, {"y": "uint8"}, inits, input_shapes={"x": ["N", 4, 8, 8]}), {"x": x})


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool(channels_last):
    inits = {**_scales(x_scale=0.0517, y_scale=0.0113), "x_zero": np.uint8(128), "y_zero": np.uint8(110)}
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "x_scale", "x_zero", "y_scale", "y_zero"], ["y"],
                            domain=MS, channels_last=channels_last)  # fmt: skip
    x = _uint8(2, 6, 7, 5, seed=9)
    shape = ["N", "H", "W", 5] if channels_last else ["N", 6, "H", "W"]
    model = _model([node], {"x": x}, {"y": "uint8"}, inits, input_shapes={"x": shape})
    _close(model, {"x": x})
    _close(model, {"x": _uint8(1, 6, 3, 5, seed=10) if not channels_last else _uint8(1, 3, 4, 5, seed=10)})


@pytest.mark.parametrize(
    "attrs",
    [
        dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1, ceil_mode=1),
        dict(kernel_shape=[2, 2], strides=[2, 2], channels_last=1),
    ],
    ids=["pads", "count-pads-ceil", "channels-last"],
)
def test_qlinear_average_pool(attrs):
    inits = {**_scales(x_scale=0.0517, y_scale=0.0313), "x_zero": np.uint8(128), "y_zero": np.uint8(120)}
    node = helper.make_node("QLinearAveragePool", ["x", "x_scale", "x_zero", "y_scale", "y_zero"], ["y"],
                            domain=MS, **attrs)  # fmt: skip
    x = _uint8(2, 4, 9, 8, seed=11)
    _close(_model([node], {"x": x}, {"y": "uint8"}, inits), {"x": x})


def test_qlinear_concat():
    inits = {**_scales(y_scale=0.05, a_scale=0.05, b_scale=0.02), "y_zero": np.uint8(128), "a_zero": np.uint8(128),
             "b_zero": np.uint8(60)}  # fmt: skip
    node = helper.make_node("QLinearConcat", ["y_scale", "y_zero", "a", "a_scale", "a_zero", "b", "b_scale", "b_zero"],
                            ["y"], domain=MS, axis=1)  # fmt: skip
    a, b = _uint8(2, 3, 4, 4, seed=12), _uint8(2, 5, 4, 4, seed=13)
    model = _model(
        [node], {"a": a, "b": b}, {"y": "uint8"}, inits, input_shapes={"a": ["N", 3, 4, 4], "b": ["N", 5, 4, 4]}
    )
    assert _close(model, {"a": a, "b": b}) <= 1


@pytest.mark.parametrize(
    ("requantized", "per_column", "trans_b"),
    [(True, False, True), (True, True, False), (False, True, True)],
    ids=["uint8-transB", "per-column", "float-out"],
)
def test_qgemm(requantized, per_column, trans_b):
    k, n = 24, 10
    b = _int8(n, k, seed=14) if trans_b else _int8(k, n, seed=14)
    inits = {
        "b": b, "c": np.random.RandomState(15).randint(-2000, 2000, size=n).astype(np.int32),
        "b_scale": np.linspace(0.01, 0.03, n).astype(np.float32) if per_column else np.float32(0.02),
        "b_zero": np.zeros(n if per_column else (), np.int8), "a_zero": np.uint8(128),
        **_scales(a_scale=0.05, y_scale=0.3), "y_zero": np.uint8(100),
    }  # fmt: skip
    names = ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "c"] + (["y_scale", "y_zero"] if requantized else [])
    node = helper.make_node("QGemm", names, ["y"], domain=MS, transB=int(trans_b), alpha=0.5)
    a = _uint8(3, k, seed=16)
    out = {"y": "uint8" if requantized else "float32"}
    _close(_model([node], {"a": a}, out, inits, input_shapes={"a": ["N", k]}), {"a": a})


# -- a whole model, quantized by onnxruntime --------------------------------------------------------------


def _float_cnn() -> onnx.ModelProto:
    """Conv/ReLU, a residual Add, MaxPool, AveragePool, a Sigmoid gate (Mul), LeakyRelu, Concat, global
    pooling and Gemm: every op QOperator quantization rewrites, with random weights."""
    rs = np.random.RandomState(0)

    def conv(name, cin, cout, k=3, stride=1, group=1):
        w = (rs.randn(cout, cin // group, k, k) * np.sqrt(2.0 / (cin // group * k * k))).astype(np.float32)
        return w, (rs.randn(cout) * 0.1).astype(np.float32)

    inits = {}
    for name, spec in {
        "c1": (3, 16),
        "c2": (16, 16),
        "c3": (16, 16),
        "c4": (16, 16, 3, 1, 16),
        "c5": (32, 24, 1),
    }.items():
        inits[name + "_w"], inits[name + "_b"] = conv(name, *spec)
    inits["fc_w"] = (rs.randn(10, 24) * 0.3).astype(np.float32)
    inits["fc_b"] = (rs.randn(10) * 0.1).astype(np.float32)
    p1 = dict(pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    nodes = [
        helper.make_node("Conv", ["x", "c1_w", "c1_b"], ["a1"], strides=[2, 2], **p1),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["m1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["m1", "c2_w", "c2_b"], ["a2"], **p1),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("Conv", ["r2", "c3_w", "c3_b"], ["a3"], **p1),
        helper.make_node("Add", ["a3", "m1"], ["s1"]),
        helper.make_node("Relu", ["s1"], ["r3"]),
        helper.make_node("Sigmoid", ["r3"], ["g"]),
        helper.make_node("Mul", ["r3", "g"], ["gated"]),
        helper.make_node("Conv", ["gated", "c4_w", "c4_b"], ["a4"], group=16, **p1),
        helper.make_node("LeakyRelu", ["a4"], ["l4"], alpha=0.1),
        helper.make_node("AveragePool", ["r3"], ["p3"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["l4", "p3"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "c5_w", "c5_b"], ["a5"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["a5"], ["r5"]),
        helper.make_node("GlobalAveragePool", ["r5"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.fixture(scope="module")
def quantized_cnn(tmp_path_factory):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": rand(2, 3, 32, 32, seed=s, low=-2, high=2)} for s in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    folder = tmp_path_factory.mktemp("qoperator")
    onnx.save(_float_cnn(), folder / "float.onnx")
    models = {}
    for per_channel in (False, True):
        out = folder / f"q{int(per_channel)}.onnx"
        quantize_static(folder / "float.onnx", out, Reader(), quant_format=QuantFormat.QOperator, per_channel=per_channel,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)  # fmt: skip
        models[per_channel] = onnx.load(out)
    return models


def _every_value_an_output(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each node's first output a graph output too (quantized ones uint8), to compare them all."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    floats = {"DequantizeLinear"}
    for node in model.graph.node:
        if node.output[0] != model.graph.output[0].name:
            kind = TensorProto.FLOAT if node.op_type in floats else TensorProto.UINT8
            model.graph.output.append(helper.make_tensor_value_info(node.output[0], kind, None))
    return model


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_onnxruntime_quantized_cnn(quantized_cnn, per_channel):
    model = quantized_cnn[per_channel]
    ops = {(n.domain or "ai.onnx", n.op_type) for n in model.graph.node}
    for op in ("QLinearConv", "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
               "QLinearAveragePool", "QLinearConcat", "QLinearGlobalAveragePool", "QGemm"):  # fmt: skip
        assert any(name == op for _, name in ops), (op, ops)
    x = rand(3, 3, 32, 32, seed=9, low=-2, high=2)
    _close(_every_value_an_output(model), {"x": x}, share=0.002)
