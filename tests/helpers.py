"""Shared test helpers: build small ONNX models and check aot + runtime_lite against onnxruntime."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
import runtime_lite
from aot.testing import ZOO_MODELS
from tests.memory import release_memory

#: Zoo models too big to share the test process: VGG-19's weights are 548 MB and ZFNet-512's 349 MB, and
#: checking one against onnxruntime needs several copies at once (tests/memory.py). ZFNet-512 joined when the
#: real-model tests (OCR files, BERT) raised the process's baseline and its NPU check reached 3.13 GiB in CI;
#: AlexNet's (233 MB) then took it to 2.99 GiB.
OWN_PROCESS_ZOO_MODELS = ("vgg19", "zfnet512", "bvlc_alexnet")


def zoo_params(names: Sequence[str] = ZOO_MODELS, own_process: Sequence[str] = OWN_PROCESS_ZOO_MODELS) -> list:
    """``names`` for ``parametrize``, those in ``own_process`` marked so (tests/memory.py); ids unchanged."""
    return [pytest.param(n, marks=pytest.mark.own_process) if n in own_process else n for n in names]


ONNX_TYPES = {
    "float32": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "float64": TensorProto.DOUBLE,
    "int64": TensorProto.INT64,
    "int32": TensorProto.INT32,
    "int8": TensorProto.INT8,
    "uint8": TensorProto.UINT8,
    "bool": TensorProto.BOOL,
}


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: dict[str, np.ndarray],
    outputs: Sequence[str] | dict[str, str],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = 13,
    input_shapes: dict[str, Sequence[Any]] | None = None,
) -> onnx.ModelProto:
    """A model whose inputs take their type from example arrays; outputs default to float32.

    ``input_shapes`` overrides declared input shapes (to declare symbolic dims).
    """
    input_shapes = input_shapes or {}
    graph_inputs = [
        helper.make_tensor_value_info(name, ONNX_TYPES[a.dtype.name], input_shapes.get(name, a.shape))
        for name, a in inputs.items()
    ]
    out_types = outputs if isinstance(outputs, dict) else {name: "float32" for name in outputs}
    graph_outputs = [helper.make_tensor_value_info(name, ONNX_TYPES[t], None) for name, t in out_types.items()]
    inits = [numpy_helper.from_array(np.asarray(v), name) for name, v in (initializers or {}).items()]
    graph = helper.make_graph(list(nodes), "test", graph_inputs, graph_outputs, inits)
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def shape_arithmetic_model() -> onnx.ModelProto:
    """What paddle2onnx writes around a transformer block over ``[N, C, h, w]``: a convolution, then reshapes to
    targets computed from the running shape (Shape -> Slice/Gather -> Cast -> Mul -> Concat -> Reshape), a
    matrix product over the sequence and a convolution after reshaping back."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 2]),
        helper.make_node("Shape", ["c"], ["s"]),
        helper.make_node("Cast", ["s"], ["s32"], to=TensorProto.INT32),
        helper.make_node("Slice", ["s32", "zero32", "two"], ["lead32"]),
        helper.make_node("Cast", ["lead32"], ["lead"], to=TensorProto.INT64),
        helper.make_node("Concat", ["lead", "minus_one"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["c", "flat_shape"], ["flat"]),  # [N, 8, h*w']
        helper.make_node("Transpose", ["flat"], ["seq"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["seq", "w2"], ["mixed"]),
        helper.make_node("Gather", ["s", "two_scalar"], ["h"], axis=0),
        helper.make_node("Gather", ["s", "three_scalar"], ["w"], axis=0),
        helper.make_node("Mul", ["h", "w"], ["hw"]),
        helper.make_node("Unsqueeze", ["hw", "zero"], ["hw1"]),
        helper.make_node("Gather", ["s", "zero"], ["n1"], axis=0),
        helper.make_node("Concat", ["n1", "hw1", "eight"], ["seq_shape"], axis=0),
        helper.make_node("Reshape", ["mixed", "seq_shape"], ["checked"]),
        helper.make_node("Transpose", ["checked"], ["back"], perm=[0, 2, 1]),
        helper.make_node("Shape", ["c"], ["again"]),
        helper.make_node("Reshape", ["back", "again"], ["image"]),
        helper.make_node("Conv", ["image", "w3"], ["y"], kernel_shape=[1, 3], pads=[0, 1, 0, 1]),
    ]
    inits = {
        "w1": rand(8, 3, 3, 3, seed=1), "w2": rand(8, 8, seed=2), "w3": rand(4, 8, 1, 3, seed=3),
        "zero": np.array([0], np.int64), "zero32": np.array([0], np.int32), "two": np.array([2], np.int32), "minus_one": np.array([-1], np.int64),
        "two_scalar": np.array(2, np.int64), "three_scalar": np.array(3, np.int64), "eight": np.array([8], np.int64),
    }  # fmt: skip
    model = make_model(nodes, {"x": rand(1, 3, 8, 8)}, ["y"], inits, input_shapes={"x": ["N", 3, "?", "?"]})
    model.graph.input[0].type.tensor_type.shape.dim[3].dim_param = "?w"  # two dims of their own
    return model


def onnxruntime_outputs(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 1, config: dict[str, str] | None = None
) -> list[np.ndarray]:
    """onnxruntime's outputs for ``model`` as it is, with its defaults (``config``: session config entries)."""
    release_memory()  # what earlier builds left in cycles, before onnxruntime takes its copies
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def build_and_load(model: onnx.ModelProto | str, **build_options: Any) -> runtime_lite.Module:
    bundle = aot.build(model, **build_options).to_bytes()
    release_memory()  # the build result is garbage now, its graph a cycle: free its weights first
    return runtime_lite.load(bundle)


def assert_matches_onnxruntime(
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    rtol: float = 1e-5,
    atol: float = 1e-6,
    **build_options: Any,
) -> list[np.ndarray]:
    """Build ``model`` with aot, run it with runtime_lite and with onnxruntime; compare every output."""
    ours = build_and_load(model, **build_options).run(feeds)
    expected = onnxruntime_outputs(model, feeds)
    assert len(ours) == len(expected)
    for i, (a, b) in enumerate(zip(ours, expected)):
        assert a.dtype == b.dtype, f"output {i}: dtype {a.dtype} != onnxruntime's {b.dtype}"
        assert a.shape == b.shape, f"output {i}: shape {a.shape} != onnxruntime's {b.shape}"
        if a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"output {i}")
    return ours


def rand(*shape: int, seed: int = 0, dtype: str = "float32", low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


def attention_head_nodes(source: str, out: str) -> list[onnx.NodeProto]:
    """One self-attention head over ``source`` into ``out``, as exporters write it: Q, K, V by the weights ``wq``,
    ``wk``, ``wv``; scores Q Kt over ``scale``; softmax; times V."""
    return [
        *(helper.make_node("MatMul", [source, w], [o]) for w, o in (("wq", "q"), ("wk", "k"), ("wv", "v"))),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Div", ["scores", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "v"], [out]),
    ]


def wide_model() -> onnx.ModelProto:
    """A conv and a 4 MiB dense layer: weights large enough (6.9 KiB, 4 MiB) to travel as the bundle's blobs
    rather than inside an onnxruntime recipe, and a weights blob that load hashes in the background."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "gw", "gb"], ["y"], transB=1, name="fc"),
    ]
    inits = {"w": rand(64, 3, 3, 3, seed=1), "gw": rand(256, 64 * 64, seed=2), "gb": rand(256, seed=3)}
    return make_model(nodes, {"x": rand(1, 3, 8, 8)}, ["y"], inits)


def evaluate_graph(graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """A naive interpreter: every node on fresh copies, no slots, no in-place. The planner's oracle."""
    from runtime_lite.kernels import get_kernel

    env = {id(v): np.array(a) for v, a in zip(graph.inputs, inputs)}
    for node in graph.nodes:
        args = [np.array(v.data) if v.is_constant else np.array(env[id(v)]) for v in node.inputs]
        result = get_kernel(node.op).fn(*args, **node.attrs)
        for out, value in zip(node.outputs, result if isinstance(result, tuple) else (result,)):
            env[id(out)] = np.array(value)
    return [np.array(v.data) if v.is_constant else env[id(v)] for v in graph.outputs]


def conv_relu_graph(weight: np.ndarray, batch: Any = 1):
    """The BYOC tutorial's model: one convolution and a ReLU, as an IR graph."""
    from aot.ir.graph import Graph
    from aot.ir.types import TensorType

    g = Graph("ConvReLU")
    data = g.add_input("data", TensorType((batch, 3, 32, 32), "float32"))
    conv = g.op("conv2d", data, g.constant(weight, "weight"), strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1])
    g.outputs = [g.op("relu", conv, name="out")]
    return g


def tensorrt_recipe_bytes(seed: int = 0, nudge_weight: bool = False) -> bytes:
    """The recipe of the tutorial model partitioned for TensorRT (one weight nudged by 1 ulp on request)."""
    from aot.compiler import build

    weight = np.random.default_rng(seed).standard_normal((16, 3, 3, 3)).astype(np.float32)
    if nudge_weight:
        weight.flat[7] = np.nextafter(weight.flat[7], np.float32(np.inf))
    result = build(conv_relu_graph(weight), targets=["tensorrt"], min_region_size=1)
    (record,) = result.header["modules"]
    return bytes(result.blobs.payloads[record["payloads"]["recipe"]])
