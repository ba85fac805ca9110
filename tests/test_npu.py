"""The virtual NPU end to end: codegen, dispatch decisions, execution by value, trace, hostile payloads."""

from __future__ import annotations

import json
import logging

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import aot.compiler.backends.npu  # noqa: F401
import runtime_lite
from aot.compiler import build
from aot.compiler.partition import fuse_ops_by_pattern, merge_composite_functions
from aot.compiler.pattern_registry import get_patterns_with_prefix
from aot.ir.graph import Graph
from aot.ir.types import TensorType
from runtime_lite.backends import BackendContext
from runtime_lite.backends.npu import NpuBackend
from tests.helpers import make_model, onnxruntime_outputs, rand
from tests.test_partition import conv_relu, matmul_relu


def npu_and_host(graph_factory, inputs):
    npu = build(graph_factory(), targets=["npu"])
    host = build(graph_factory())
    got = runtime_lite.load(npu.to_bytes())
    want = runtime_lite.load(host.to_bytes()).run(inputs)
    return npu, got, want


def test_tutorial_conv_relu_runs_for_real_on_the_npu():
    data = rand(1, 3, 32, 32)
    npu, module, want = npu_and_host(conv_relu, [data])
    assert npu.regions == {"host": 0, "npu": 2}
    assert module.modules == [{"id": "npu_0", "backend": "npu"}]
    (out,) = module.run([data])
    assert out.shape == (1, 16, 30, 30)
    np.testing.assert_array_equal(out, want[0])  # same kernels: exactly the host's result
    weight = npu.partitioned.regions[0].inputs[1].data
    reference = np.maximum(
        np.einsum("nchwij,ocij->nohw", _windows(data, 3), weight, optimize=True), 0
    )  # plain numpy, independent of runtime_lite's conv
    np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-5)


def _windows(x, k):
    n, c, h, w = x.shape
    view = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))
    return view.reshape(n, c, h - k + 1, w - k + 1, k, k)


def test_tutorial_matmul_relu_runs_on_the_npu():
    x, w = rand(2, 4), rand(4, 8)
    _, module, want = npu_and_host(matmul_relu, [x, w])
    np.testing.assert_array_equal(module.run([x, w])[0], np.maximum(x @ w, 0))
    np.testing.assert_array_equal(module.run([x, w])[0], want[0])


def test_weights_bound_into_the_payload_run_too():
    npu = get_patterns_with_prefix("npu")
    result = build(
        conv_relu(), partitioner=lambda g: merge_composite_functions(fuse_ops_by_pattern(g, npu, bind_constants=True))
    )
    module_record = result.header["modules"][0]
    assert set(module_record["payloads"]) == {"graph", "weights"}
    assert result.header["constants"] == []  # the host no longer holds the weight
    data = rand(1, 3, 32, 32)
    want = runtime_lite.load(build(conv_relu()).to_bytes()).run([data])[0]
    np.testing.assert_array_equal(runtime_lite.load(result.to_bytes()).run([data])[0], want)


def test_int8_quantize_dequantize_semantics_match_onnxruntime():
    """QDQ around a conv, all on the NPU: quantize rounds half to even and saturates like ONNX."""
    x = rand(1, 4, 8, 8) * 4
    inits = {"s": np.float32(0.05), "z": np.int8(-3), "w": rand(4, 4, 3, 3), "s2": np.float32(0.1), "z2": np.int8(2)}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"]),
        helper.make_node("Conv", ["dq", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "s2", "z2"], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["y"]),
    ]
    model = make_model(nodes, {"x": x}, ["y"], inits, opset=13)
    result = build(model, targets=["npu"])
    names = [c.name for c in result.partitioned.composites]
    assert names == ["npu.quantize", "npu.dequantize", "npu.conv2d_relu_fused", "npu.quantize", "npu.dequantize"]
    assert result.regions == {"host": 0, "npu": 6}
    got = runtime_lite.load(result.to_bytes()).run([x])[0]
    np.testing.assert_array_equal(got, runtime_lite.load(build(model).to_bytes()).run([x])[0])
    # onnxruntime's graph optimiser rewrites QDQ + Conv into integer kernels that round differently
    # (up to one step); with it off, onnxruntime computes the ONNX semantics, which we match exactly.
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, session.run(None, {"x": x})[0])


def test_dispatch_records_engines_tiers_tiles_and_fusion():
    g = Graph()
    x = g.add_input("x", TensorType((1, 3, 128, 128), "float32"))
    w = g.constant(np.ones((16, 3, 3, 3), np.float32) * 0.1, "w")
    conv = g.op("conv2d", x, w, strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], name="conv")
    relu = g.op("relu", conv, name="relu")
    pool = g.op(
        "max_pool2d", relu, kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1], name="pool"
    )
    g.outputs = [g.op("sigmoid", pool, name="sig")]
    module = runtime_lite.load(build(g, targets=["npu"]).to_bytes())
    profile = module.profile([rand(1, 3, 128, 128)])
    by_node = {e["node"]: e for e in profile.dispatches}
    fused = by_node["relu"]
    assert fused["engine"] == "CONV" and fused["fused"] and fused["ops"] == ["conv2d", "relu"]
    assert fused["on_chip"] == ["conv"]  # the intermediate never leaves the engine
    # 1x16x128x128 float32 = 1 MiB > L1's 256 KiB: tiled 32x32 (16 channels x 32 x 32 x 4 B = 64 KiB fits).
    assert fused["tile"] == [32, 32] and fused["tiles"] == 16
    assert fused["writes"][0]["tier"] == "L3"  # 1 MiB fits no on-chip tier
    assert fused["macs"] == 16 * 128 * 128 * 3 * 9 and fused["cycles"] > fused["macs"] // 256
    assert by_node["pool"]["engine"] == "POOLING" and by_node["sig"]["engine"] == "ACTIVATION"
    assert by_node["pool"]["tile"] is None  # 256 KiB exactly: fits L1
    assert profile.plan_events[-1]["op"] == "call_module"
    again = rand(1, 3, 128, 128)
    np.testing.assert_array_equal(module.profile([again]).outputs[0], module.run([again])[0])
    assert "CONV" in str(profile) and "total" in str(profile)


def test_tensors_spill_upward_when_their_tier_is_full():
    g = Graph()
    x = g.add_input("x", TensorType((1, 51200), "float32"))  # 200 KiB: takes most of L1
    g.outputs = [g.op("tanh", g.op("relu", x, name="r"), name="t")]
    module = runtime_lite.load(build(g, targets=["npu"]).to_bytes())
    events = {e["node"]: e for e in module.profile([rand(1, 51200)]).dispatches}
    assert events["r"]["reads"][0]["tier"] == "L1"
    assert events["r"]["writes"][0] == {"tensor": "r", "bytes": 204800, "tier": "L2", "spilled_from": "L1"}
    # x dies at relu, freeing L1 for tanh's output.
    assert events["t"]["writes"][0]["tier"] == "L1"


def test_dispatch_is_logged_at_debug(caplog):
    module = runtime_lite.load(build(conv_relu(), targets=["npu"]).to_bytes())
    with caplog.at_level(logging.DEBUG, logger="runtime_lite.npu"):
        module.run([rand(1, 3, 32, 32)])
    assert any("engine=CONV" in r.getMessage() and "fused=conv2d+relu" in r.getMessage() for r in caplog.records)


def test_small_cnn_example_on_the_npu_matches_onnxruntime(small_model, small_input):
    result = build(small_model, targets=["npu"])
    assert result.regions["npu"] >= 3
    got = runtime_lite.load(result.to_bytes()).run([small_input])
    want = onnxruntime_outputs(small_model, {"x": small_input})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


# -- hostile payloads: every defect is a BundleError naming the field ---------------------


def _payload(**changes):
    graph = json.loads(_npu_graph())
    for path, value in changes.items():
        target = graph
        keys = path.split("/")
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        last = keys[-1]
        target[int(last) if isinstance(target, list) else last] = value
    return {"graph": memoryview(json.dumps(graph).encode())}


def _npu_graph() -> bytes:
    result = build(conv_relu(), targets=["npu"])
    blob = result.header["modules"][0]["payloads"]["graph"]
    return bytes(result.blobs.payloads[blob])


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"nodes/2/op": "kernal"}, "is not input, const or kernel"),
        ({"nodes/2/inputs": [[2, 0, 0]]}, "out of range"),  # a node reading itself: no loops
        ({"nodes/2/attrs/body/0/op": "launch_missiles"}, "no kernel for"),
        ({"nodes/2/attrs/body/0/attrs/bogus": 1}, "does not fit its kernel"),
        ({"nodes/2/attrs/body/1/inputs": [["op", 5]]}, "out of range"),
        ({"nodes/2/attrs/body": []}, "is empty"),
        ({"arg_nodes": [0]}, "every input node exactly once"),
        ({"heads": [[9, 0, 0]]}, "out of range"),
        ({"nodes/0/attrs/shape": [[-1, 3]]}, "negative"),
        ({"nodes/0/attrs/dtype": ["complex128"]}, "unsupported dtype"),
    ],
)
def test_malformed_npu_payloads_are_bundle_errors(changes, message):
    with pytest.raises(runtime_lite.BundleError, match=message):
        NpuBackend().init(BackendContext(), _payload(**changes), {})


def test_not_json_and_other_formats():
    with pytest.raises(runtime_lite.BundleError, match="not valid JSON"):
        NpuBackend().init(BackendContext(), {"graph": memoryview(b"\xff{")}, {})
    with pytest.raises(runtime_lite.BundleError, match="no 'graph' payload"):
        NpuBackend().init(BackendContext(), {}, {})
    from runtime_lite.backends import IncompatiblePayload

    with pytest.raises(IncompatiblePayload, match="npu-graph/2"):
        NpuBackend().init(BackendContext(), _payload(format="npu-graph/2"), {})


def test_const_outside_the_weights_payload():
    graph = json.loads(_npu_graph())
    graph["nodes"][1] = {
        "op": "const",
        "name": "w",
        "attrs": {"shape": [[16, 3, 3, 3]], "dtype": ["float32"], "offset": 64, "nbytes": 1728},
    }
    graph["arg_nodes"] = [0]
    with pytest.raises(runtime_lite.BundleError, match="outside the weights payload"):
        NpuBackend().init(
            BackendContext(), {"graph": memoryview(json.dumps(graph).encode()), "weights": memoryview(b"\0" * 100)}, {}
        )
    graph["nodes"][1]["attrs"]["nbytes"] = 64  # the constant record's size must be its shape's
    with pytest.raises(runtime_lite.BundleError, match=r"'npu.graph.nodes\[1\].attrs.nbytes' = 64, but float32"):
        NpuBackend().init(
            BackendContext(), {"graph": memoryview(json.dumps(graph).encode()), "weights": memoryview(b"\0" * 4096)}, {}
        )


def test_wrong_input_shape_at_run_is_a_clear_error():
    handle = NpuBackend().init(BackendContext(), {"graph": memoryview(_npu_graph())}, {})
    with pytest.raises(ValueError, match=r"input 'data' must be float32\[1, 3, 32, 32\]"):
        handle.run([rand(1, 3, 8, 8), rand(16, 3, 3, 3)], None)
