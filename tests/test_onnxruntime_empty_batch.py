"""onnxruntime 1.32 aborts the whole process on an LSTM or GRU (and its DynamicQuantizeLSTM) over an empty batch.

A service that forwards a zero-row request would lose its replica ("terminate called
without an active exception", exit status 134). The recipe's size walk
(runtime_lite/backends/onnxruntime/shapes.py) refuses such a run before onnxruntime sees
it; each case runs in a child process, so a regression fails the test, not the suite.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot

HIDDEN, FEATURES = 16, 8

CHILD = """
import sys, numpy as np, runtime_lite
module = runtime_lite.load(sys.argv[1])
assert module.placement["onnxruntime_0"]["runs_on"] == "onnxruntime", module.placement
print(module.run([np.ones((3, 2, 8), np.float32)])[1].shape)
try:
    module.run([np.ones((3, 0, 8), np.float32)])
except Exception as e:
    print(type(e).__name__, e)
"""


def recurrent_model(op: str) -> onnx.ModelProto:
    gates = {"LSTM": 4, "GRU": 3}[op]
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.random((1, gates * HIDDEN, FEATURES)) - 0.5).astype(np.float32), "W")
    r = numpy_helper.from_array((rng.random((1, gates * HIDDEN, HIDDEN)) - 0.5).astype(np.float32), "R")
    node = helper.make_node(op, ["x", "W", "R"], ["y", "y_h"], hidden_size=HIDDEN)
    graph = helper.make_graph(
        [node], "recurrent", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", "N", FEATURES])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "y_h")], [w, r],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("case", ["LSTM", "GRU", "DynamicQuantizeLSTM"])
def test_an_empty_batch_is_refused_before_onnxruntime_ends_the_process(case, tmp_path):
    model = recurrent_model("LSTM" if case == "DynamicQuantizeLSTM" else case)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    if case == "DynamicQuantizeLSTM":  # what quantize_dynamic writes for an LSTM
        from onnxruntime.quantization import quantize_dynamic

        quantize_dynamic(str(path), str(tmp_path / "quantized.onnx"))
        path = tmp_path / "quantized.onnx"
        assert [n.op_type for n in onnx.load(path).graph.node] == ["DynamicQuantizeLSTM"]
    bundle = tmp_path / "model.aotb"
    aot.build(str(path), targets=["onnxruntime"], log=None).save(bundle)
    child = subprocess.run([sys.executable, "-c", CHILD, str(bundle)], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-500:]
    shape, refusal = child.stdout.splitlines()
    assert shape == f"(1, 2, {HIDDEN})"
    op = "com.microsoft.DynamicQuantizeLSTM" if case == "DynamicQuantizeLSTM" else case
    assert (
        refusal.startswith("ExecutionError") and f"onnxruntime ends the process on {op} over an empty batch" in refusal
    )
