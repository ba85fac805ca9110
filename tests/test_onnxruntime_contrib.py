"""Microsoft contrib ops onnxruntime ships, in files onnxruntime itself writes: the onnxruntime delegate takes them.

``onnxruntime.quantization.quantize_dynamic`` turns an LSTM into ``com.microsoft.DynamicQuantizeLSTM``;
onnxruntime's extended graph optimizations fuse an Erf GELU into ``com.microsoft.Gelu`` and a transposed
MatMul into ``com.microsoft.FusedMatMul`` (``SessionOptions.optimized_model_filepath`` saves what it
fused). ``--target onnxruntime`` runs those files in one region; the host plan and the other targets
refuse them in one line, and a deployment without onnxruntime refuses the region at load.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
import runtime_lite
from aot.errors import BuildError
from aot.ir import contrib
from runtime_lite import BundleError
from runtime_lite.backends.onnxruntime import recipe_check
from runtime_lite.errors import PlacementError
from tests.hostile import Seed

HIDDEN, FEATURES, CLASSES = 32, 16, 11


def lstm_model(path: Path) -> Path:
    """A bidirectional LSTM over [seq, batch, 16] and a classifier: a captcha recognizer's shape, time symbolic."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "", ""], hidden_size=HIDDEN, direction="bidirectional"),
        helper.make_node("Transpose", ["y"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["t", "shape"], ["r"]),
        helper.make_node("MatMul", ["r", "Wo"], ["logits"]),
    ]
    weights = {
        "W": rng.standard_normal((2, 4 * HIDDEN, FEATURES)) * 0.2, "R": rng.standard_normal((2, 4 * HIDDEN, HIDDEN)) * 0.2,
        "B": rng.standard_normal((2, 8 * HIDDEN)) * 0.1, "Wo": rng.standard_normal((2 * HIDDEN, CLASSES)) * 0.2,
    }  # fmt: skip
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    inits.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), "shape"))
    graph = helper.make_graph(
        nodes, "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", "batch", FEATURES])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["seq", "batch", CLASSES])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def quantized_lstm(tmp_path_factory) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = tmp_path_factory.mktemp("contrib")
    quantized = folder / "lstm_int8.onnx"
    quantize_dynamic(lstm_model(folder / "lstm.onnx"), quantized, weight_type=QuantType.QInt8)
    ops = {(n.domain, n.op_type) for n in onnx.load(quantized).graph.node}
    assert ("com.microsoft", "DynamicQuantizeLSTM") in ops, ops  # what onnxruntime's quantizer writes
    return quantized


@pytest.fixture(scope="module")
def fused_gelu(tmp_path_factory) -> Path:
    """onnxruntime's own fusions saved: a transposed MatMul, an Erf GELU, then x^T @ x."""
    folder = tmp_path_factory.mktemp("fused")
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "wt"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "e1"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["g"]),
        helper.make_node("Transpose", ["g"], ["gt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["gt", "g"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in
             {"sqrt2": np.sqrt(2), "one": 1, "half": 0.5}.items()]  # fmt: skip
    graph = helper.make_graph(
        nodes, "gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [24, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 24, 24])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, folder / "gelu.onnx")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(folder / "gelu_fused.onnx")
    ort.InferenceSession(str(folder / "gelu.onnx"), options, providers=["CPUExecutionProvider"])
    ops = {(n.domain, n.op_type) for n in onnx.load(folder / "gelu_fused.onnx").graph.node}
    assert ops == {("com.microsoft", "Gelu"), ("com.microsoft", "FusedMatMul")}, ops
    return folder / "gelu_fused.onnx"


def _reference(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def test_a_dynamically_quantized_lstm_runs_in_one_onnxruntime_region_over_any_length(quantized_lstm):
    result = aot.build(str(quantized_lstm), targets=["onnxruntime"], log=None)
    assert result.regions["host"] == 0 and len(result.header["modules"]) == 1, result.regions
    module = runtime_lite.load(result.to_bytes())
    assert [p["runs_on"] for p in module.placement.values()] == ["onnxruntime"]
    for seq, batch in [(5, 1), (23, 3), (1, 2)]:
        x = np.random.default_rng(seq).standard_normal((seq, batch, FEATURES)).astype(np.float32)
        (actual,) = module.run([x])
        # the same kernels on the same graph: only onnxruntime's own graph rewrites could differ
        np.testing.assert_allclose(actual, _reference(quantized_lstm, {"x": x}), rtol=1e-5, atol=1e-6)


def test_gelu_and_fused_matmul_written_by_onnxruntime_run_on_onnxruntime(fused_gelu):
    module = runtime_lite.load(aot.build(str(fused_gelu), targets=["onnxruntime"], log=None).to_bytes())
    assert [p["runs_on"] for p in module.placement.values()] == ["onnxruntime"]
    rng = np.random.default_rng(1)
    for batch, seq in [(1, 5), (3, 17)]:
        feeds = {"x": rng.standard_normal((batch, seq, 16)).astype(np.float32),
                 "w": rng.standard_normal((24, 16)).astype(np.float32)}  # fmt: skip
        np.testing.assert_allclose(module.run(feeds)[0], _reference(fused_gelu, feeds), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("targets", [["host"], ["npu"], ["tensorrt"], ["openvino"]], ids=lambda t: t[0])
def test_the_host_plan_and_other_targets_refuse_a_contrib_op_in_one_line(quantized_lstm, targets):
    with pytest.raises(BuildError) as caught:
        aot.build(str(quantized_lstm), targets=targets, log=None)
    message = str(caught.value)
    assert "\n" not in message
    assert "com.microsoft.DynamicQuantizeLSTM (node 'y')" in message and "--target onnxruntime" in message


def test_a_deployment_without_onnxruntime_refuses_the_region_at_load(quantized_lstm, monkeypatch):
    bundle = aot.build(str(quantized_lstm), targets=["onnxruntime"], log=None).to_bytes()
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # test double: onnxruntime is not installed
    with pytest.raises(PlacementError, match="holds com.microsoft.DynamicQuantizeLSTM, which only onnxruntime"):
        runtime_lite.load(bundle)


def test_the_recipe_check_admits_exactly_the_contrib_ops_aot_writes(fused_gelu):
    assert set(recipe_check.CONTRIB_OPS) == {contrib.DOMAIN}
    assert recipe_check.CONTRIB_OPS[contrib.DOMAIN] == set(contrib.CONTRIB_OPS)
    assert recipe_check.CONTRIB_OP == contrib.OP
    result = aot.build(str(fused_gelu), targets=["onnxruntime"], log=None)
    seed = Seed("ort", result.header, [bytes(p) for p in result.blobs.payloads], [])
    index = seed.header["modules"][0]["payloads"]["recipe"]
    for op_type, domain, refusal in [
        ("Attention", "com.microsoft", "not on the contrib allow-list"),
        ("Gelu", "com.example", "of domain 'com.example'"),
    ]:
        recipe = onnx.load_from_string(seed.payloads[index])
        recipe.graph.node[1].op_type, recipe.graph.node[1].domain = op_type, domain
        payloads = list(seed.payloads)
        payloads[index] = recipe.SerializeToString()
        with pytest.raises(BundleError, match=refusal):
            runtime_lite.load(seed.pack(seed.header, payloads))
