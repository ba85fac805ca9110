"""The IR, its op registry and the optimisation passes."""

from __future__ import annotations

import numpy as np
import pytest

from aot.errors import ShapeError
from aot.ir import OPS, Graph, TensorType, contrib, parse_shape
from aot.passes import eliminate_dead_code, fold_affine, fold_constants, infer_shapes
from runtime_lite.kernels import KERNELS
from tests.helpers import evaluate_graph


def conv_graph(extra_user: bool = False) -> Graph:
    rng = np.random.default_rng(0)
    g = Graph("g")
    x = g.add_input("x", TensorType((1, 3, 6, 6), "float32"))
    w = g.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    c = g.op("conv2d", x, w, strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1])
    params = [rng.uniform(0.5, 1.5, 4).astype(np.float32) for _ in range(4)]
    n = g.op("batch_norm", c, *[g.constant(p, "bn") for p in params], epsilon=1e-3)
    m = g.op("multiply", n, g.constant(rng.uniform(0.5, 2, (4, 1, 1)).astype(np.float32), "scale"))
    a = g.op("add", m, g.constant(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "shift"))
    g.outputs = [g.op("relu", a)] + ([c] if extra_user else [])
    return g


def test_op_registry_and_kernels_cover_the_same_ops():
    """But onnxruntime's contrib ops, which only its kernels compute (aot/ir/contrib.py)."""
    assert set(OPS) - {contrib.OP} == set(KERNELS)


def test_fold_affine_removes_the_chain_and_keeps_values():
    g = conv_graph()
    x = np.random.default_rng(1).standard_normal((1, 3, 6, 6)).astype(np.float32)
    before = evaluate_graph(g, [x])
    assert fold_affine(g) == 3
    assert [n.op for n in g.nodes] == ["conv2d", "relu"]
    np.testing.assert_allclose(evaluate_graph(g, [x])[0], before[0], rtol=1e-5, atol=1e-5)


def test_fold_affine_leaves_a_conv_whose_result_is_used_elsewhere():
    g = conv_graph(extra_user=True)
    x = np.random.default_rng(1).standard_normal((1, 3, 6, 6)).astype(np.float32)
    before = evaluate_graph(g, [x])
    # The conv's result is also an output, so the batch norm stays; scale and shift still join it.
    assert fold_affine(g) == 2
    assert [n.op for n in g.nodes] == ["conv2d", "batch_norm", "relu"]
    for got, want in zip(evaluate_graph(g, [x]), before):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_batch_norm_followed_by_scale_and_shift_becomes_one_batch_norm():
    rng = np.random.default_rng(2)
    g = Graph("g")
    x = g.add_input("x", TensorType((2, 4, 3, 3), "float32"))
    n = g.op("batch_norm", x, *[g.constant(rng.uniform(0.5, 1.5, 4).astype(np.float32)) for _ in range(4)])
    m = g.op("multiply", n, g.constant(rng.uniform(0.5, 2, (4, 1, 1)).astype(np.float32)))
    g.outputs = [g.op("add", m, g.constant(rng.standard_normal((4, 1, 1)).astype(np.float32)))]
    data = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    before = evaluate_graph(g, [data])
    assert fold_affine(g) == 2 and [n.op for n in g.nodes] == ["batch_norm"]
    np.testing.assert_allclose(evaluate_graph(g, [data])[0], before[0], rtol=1e-5, atol=1e-5)


def test_constant_folding_uses_the_runtime_kernels():
    g = Graph("g")
    x = g.add_input("x", TensorType((2, 3), "float32"))
    shape = g.constant(np.array([3, 2], np.int64))
    node = g.add_node("reshape", [g.constant(np.arange(6, dtype=np.float32))], {"shape": [2, 3]})
    g.outputs = [g.op("add", x, node.outputs[0]), g.op("shape", g.op("reshape", x, shape))]
    assert fold_constants(g) == 1
    assert [n.op for n in g.nodes] == ["add", "reshape", "shape"]
    assert g.nodes[0].inputs[1].data.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_dead_code_elimination():
    g = Graph("g")
    x = g.add_input("x", TensorType((2,), "float32"))
    g.op("exp", g.op("relu", x))
    g.outputs = [g.op("negative", x)]
    assert eliminate_dead_code(g) == 2 and [n.op for n in g.nodes] == ["negative"]


def test_shape_inference_propagates_new_input_dims():
    g = conv_graph()
    g.inputs[0].type = TensorType(("N", 3, 10, 12), "float32")
    infer_shapes(g)
    assert g.outputs[0].type.shape == ("N", 4, 10, 12)


def test_printer_is_readable():
    text = str(conv_graph())
    lines = text.splitlines()
    assert lines[0] == "graph g(%x: float32[1,3,6,6]) -> (%relu: float32[1,4,6,6])"
    assert (
        "  %conv2d = conv2d(%x, @w: float32[4,3,3,3]) {strides=[1,1], pads=[1,1,1,1], dilations=[1,1], groups=1} : float32[1,4,6,6]"
        in lines
    )
    assert lines[-1] == "  return %relu"


def test_toposort_restores_order_and_finds_cycles():
    g = conv_graph()
    g.nodes.reverse()
    g.toposort()
    assert [n.op for n in g.nodes] == ["conv2d", "batch_norm", "multiply", "add", "relu"]
    relu, conv = g.nodes[-1], g.nodes[0]
    conv.inputs[0] = relu.outputs[0]
    with pytest.raises(ShapeError, match="cycle"):
        g.toposort()


def test_attribute_schema_is_enforced():
    g = Graph("g")
    x = g.add_input("x", TensorType((1, 3, 4, 4), "float32"))
    with pytest.raises(ShapeError, match="unknown attribute 'size'"):
        g.op("relu", x, size=3)
    with pytest.raises(ShapeError, match="missing attribute 'strides'"):
        g.op("max_pool2d", x, kernel_shape=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1])


@pytest.mark.parametrize(
    "text, shape",
    [("1x3x224x224", (1, 3, 224, 224)), ("N,3,224,224", ("N", 3, 224, 224)), ("scalar", ()), ("8", (8,))],
)
def test_parse_shape(text, shape):
    assert parse_shape(text) == shape


@pytest.mark.parametrize("text", ["1xx3", "1x-3", "1x3!"])
def test_parse_shape_rejects(text):
    with pytest.raises(ValueError):
        parse_shape(text)
