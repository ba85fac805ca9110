"""Exporters' idioms become the ops they are: layer norm, GELU, hard-swish, hard-sigmoid, cast chains.

Each graph is written the way an exporter writes it (PyTorch's opset-13 layer norm
and GELU, MobileNetV3's hand-written hard-swish), checked against onnxruntime, and
the recognised op must appear in the compiled graph while the spelled-out ops vanish.
Near misses (a wrong constant, an interior value used elsewhere) must stay as they are.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import aot
from tests.helpers import assert_matches_onnxruntime, build_and_load, make_model, rand

X = rand(2, 5, 16, seed=1, low=-3, high=3)


def const(name: str, value) -> helper.NodeProto:
    from onnx import numpy_helper

    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, np.float32)))


def layer_norm_nodes(eps: float = 1e-5, power: float = 2.0, affine: bool = True, square_by_mul: bool = False):
    """PyTorch's opset-13 export of nn.LayerNorm(16)."""
    nodes = [
        const("two", power),
        const("eps", eps),
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["x", "mean"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["sq"]) if square_by_mul else helper.make_node("Pow", ["d", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["var_eps"]),
        helper.make_node("Sqrt", ["var_eps"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["normalized" if affine else "y"]),
    ]
    if affine:
        nodes += [
            helper.make_node("Mul", ["normalized", "gamma"], ["scaled"]),
            helper.make_node("Add", ["scaled", "beta"], ["y"]),
        ]
    return nodes


AFFINE = {"gamma": rand(16, seed=2, low=0.5, high=1.5), "beta": rand(16, seed=3)}


def compiled_ops(model) -> dict[str, int]:
    return aot.build(model).op_counts


@pytest.mark.parametrize("square_by_mul", [False, True], ids=["pow", "mul"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_decomposed_layer_norm_becomes_one_layer_norm(affine, square_by_mul):
    model = make_model(
        layer_norm_nodes(affine=affine, square_by_mul=square_by_mul), {"x": X}, ["y"], AFFINE if affine else {}
    )
    assert compiled_ops(model) == {"layer_norm": 1}
    assert_matches_onnxruntime(model, {"x": X}, rtol=1e-4, atol=1e-5)


def test_layer_norm_near_misses_stay_spelled_out():
    wrong_power = make_model(layer_norm_nodes(power=3.0), {"x": X}, ["y"], AFFINE)
    assert "layer_norm" not in compiled_ops(wrong_power)
    # onnxruntime's own LayerNormFusion ignores Pow's exponent and computes a layer norm here
    # (1.31.1), so the reference is onnx's evaluator, which computes what the graph says.
    expected = ReferenceEvaluator(wrong_power).run(None, {"x": X})[0]
    np.testing.assert_allclose(build_and_load(wrong_power).run({"x": X})[0], expected, rtol=1e-4, atol=1e-5)
    # the centred value is also a graph output: recognising would lose it
    nodes = layer_norm_nodes()
    shared = make_model(nodes, {"x": X}, ["y", "d"], AFFINE)
    assert "layer_norm" not in compiled_ops(shared)
    assert_matches_onnxruntime(shared, {"x": X}, rtol=1e-4, atol=1e-5)


def gelu_erf_nodes(order: str):
    erf = [
        helper.make_node("Div", ["x", "sqrt2"], ["xs"]),
        helper.make_node("Erf", ["xs"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        const("sqrt2", math.sqrt(2.0)),
        const("one", 1.0),
        const("half", 0.5),
    ]
    if order == "pytorch":  # (x * (erf + 1)) * 0.5
        tail = [helper.make_node("Mul", ["x", "e1"], ["p"]), helper.make_node("Mul", ["p", "half"], ["y"])]
    else:  # (0.5 * x) * (1 + erf)
        tail = [helper.make_node("Mul", ["half", "x"], ["p"]), helper.make_node("Mul", ["e1", "p"], ["y"])]
    return erf + tail


@pytest.mark.parametrize("order", ["pytorch", "reordered"])
def test_decomposed_gelu_becomes_gelu(order):
    model = make_model(gelu_erf_nodes(order), {"x": X}, ["y"])
    assert compiled_ops(model) == {"gelu": 1}
    assert_matches_onnxruntime(model, {"x": X}, rtol=1e-5, atol=1e-6)


def test_tanh_gelu_becomes_gelu_tanh():
    nodes = [
        helper.make_node("Pow", ["x", "three"], ["cube"]),
        helper.make_node("Mul", ["cube", "k"], ["kc"]),
        helper.make_node("Add", ["x", "kc"], ["inner"]),
        helper.make_node("Mul", ["inner", "c"], ["scaled"]),
        helper.make_node("Tanh", ["scaled"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["t1"]),
        helper.make_node("Mul", ["x", "half"], ["hx"]),
        helper.make_node("Mul", ["hx", "t1"], ["y"]),
        const("three", 3.0),
        const("k", 0.044715),
        const("c", math.sqrt(2 / math.pi)),
        const("one", 1.0),
        const("half", 0.5),
    ]
    model = make_model(nodes, {"x": X}, ["y"])
    result = aot.build(model)
    assert result.op_counts == {"gelu": 1}
    assert [n.attrs["approximate"] for n in result.graph.nodes] == ["tanh"]
    assert_matches_onnxruntime(model, {"x": X}, rtol=1e-5, atol=1e-6)


def test_gelu_with_a_wrong_constant_stays_spelled_out():
    nodes = gelu_erf_nodes("pytorch")
    nodes[-3] = const("half", 0.4)
    model = make_model(nodes, {"x": X}, ["y"])
    assert "gelu" not in compiled_ops(model)
    assert_matches_onnxruntime(model, {"x": X}, rtol=1e-5, atol=1e-6)


def test_hard_swish_forms():
    # torchvision before opset 14: x * HardSigmoid(x, alpha=1/6)
    onnx_form = make_model(
        [
            helper.make_node("HardSigmoid", ["x"], ["g"], alpha=1 / 6, beta=0.5),
            helper.make_node("Mul", ["x", "g"], ["y"]),
        ],
        {"x": X},
        ["y"],
    )
    # hand-written: x * relu6(x + 3) / 6
    spelled = make_model(
        [
            helper.make_node("Add", ["x", "three"], ["s"]),
            helper.make_node("Clip", ["s", "zero", "six"], ["r"]),
            helper.make_node("Mul", ["x", "r"], ["p"]),
            helper.make_node("Div", ["p", "six"], ["y"]),
            const("three", 3.0),
            const("zero", 0.0),
            const("six", 6.0),
        ],
        {"x": X},
        ["y"],
    )
    for model in (onnx_form, spelled):
        assert compiled_ops(model) == {"hard_swish": 1}
        assert_matches_onnxruntime(model, {"x": X}, rtol=1e-5, atol=1e-6)


def test_relu6_over_six_becomes_hard_sigmoid_and_clip_0_6_is_relu6():
    model = make_model(
        [
            helper.make_node("Add", ["x", "three"], ["s"]),
            helper.make_node("Clip", ["s", "zero", "six"], ["r"]),
            helper.make_node("Div", ["r", "six"], ["y"]),
            helper.make_node("Clip", ["x", "zero", "six"], ["z"]),
            const("three", 3.0),
            const("zero", 0.0),
            const("six", 6.0),
        ],
        {"x": X},
        ["y", "z"],
    )
    assert compiled_ops(model) == {"hard_sigmoid": 1, "relu6": 1}
    assert_matches_onnxruntime(model, {"x": X}, rtol=1e-5, atol=1e-6)


def test_lossless_cast_chains_collapse_and_lossy_ones_stay():
    ints = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    lossless = make_model(
        [
            helper.make_node("Cast", ["i"], ["wide"], to=7),  # int32 -> int64: exact
            helper.make_node("Cast", ["wide"], ["f"], to=1),  # -> float32
            helper.make_node("Cast", ["f"], ["d"], to=11),  # float32 -> float64: exact
            helper.make_node("Cast", ["d"], ["y"], to=1),  # and back
        ],
        {"i": ints},
        ["y"],
    )
    assert compiled_ops(lossless) == {"cast": 1}
    assert_matches_onnxruntime(lossless, {"i": ints})
    lossy = make_model(
        [helper.make_node("Cast", ["x"], ["h"], to=10), helper.make_node("Cast", ["h"], ["y"], to=1)],
        {"x": X},
        ["y"],
    )
    assert compiled_ops(lossy) == {"cast": 2}  # float16 rounding is the point of that chain
    assert_matches_onnxruntime(lossy, {"x": X})
