"""ONNX ``If`` with a condition known at build time (inlined), one known at run time (a select of both branches),
inputs bound with --bind, and the refusals."""

from __future__ import annotations

import importlib.util
import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import aot
import runtime_lite
from aot.cli.build import bound_values
from aot.errors import BuildError, ShapeError, UnsupportedOpsError
from aot.frontend.onnx import from_onnx
from tests.helpers import make_model, onnxruntime_outputs, rand
from tests.missing import missing

FLOAT = TensorProto.FLOAT


def _branch(name: str, nodes: list[onnx.NodeProto], outputs: list[str], inits: dict | None = None) -> onnx.GraphProto:
    inits = [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(o, FLOAT, None) for o in outputs], inits)


def _if(cond: str, outputs: list[str], then: onnx.GraphProto, other: onnx.GraphProto, name: str) -> onnx.NodeProto:
    return helper.make_node("If", [cond], outputs, then_branch=then, else_branch=other, name=name)


def _ours(model: onnx.ModelProto, feeds: dict[str, np.ndarray], **options) -> list[np.ndarray]:
    module = runtime_lite.load(aot.build(model, log=None, **options).to_bytes())
    return module.run(feeds)


def _same(ours: list[np.ndarray], theirs: list[np.ndarray]) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


# -- an If on a shape, folded once --input fixes it -----------------------------------------------


def _shape_model() -> onnx.ModelProto:
    """``y = relu(2x) + t if x.size(1) > 4 else t - x``, ``t = tanh(x)``, as torch.onnx scripts it; the If is
    written before the Tanh whose output its branches read (nothing names it among the If's inputs)."""
    then = _branch("then", [helper.make_node("Mul", ["x", "two"], ["dx"]), helper.make_node("Relu", ["dx"], ["r"]),
                            helper.make_node("Add", ["r", "t"], ["out_then"])], ["out_then"], {"two": np.float32(2)})  # fmt: skip
    other = _branch("else", [helper.make_node("Sub", ["t", "x"], ["out_else"])], ["out_else"])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["width"], axis=0),
        helper.make_node("Greater", ["width", "four"], ["wide"]),
        _if("wide", ["y"], then, other, name="size_check"),
        helper.make_node("Tanh", ["x"], ["t"]),
    ]
    inits = {"one": np.array(1, np.int64), "four": np.array(4, np.int64)}
    return make_model(nodes, {"x": rand(2, 6)}, ["y"], inits, input_shapes={"x": ["N", "L"]})


@pytest.mark.parametrize("width", [6, 3])
def test_an_if_on_a_shape_folds_once_input_fixes_it(width):
    model = _shape_model()
    x = rand(2, width, seed=width)
    result = aot.build(model, input_shapes={"x": (2, width)}, log=None)
    assert not any(n.op == "If" for n in result.graph.nodes)
    ops = {n.op for n in result.graph.nodes}
    assert ("relu" in ops) == (width > 4)  # only the branch taken is in the bundle
    _same(runtime_lite.load(result.to_bytes()).run({"x": x}), onnxruntime_outputs(model, {"x": x}))


def test_an_if_on_a_symbolic_shape_with_pure_branches_is_one_select_for_every_width():
    model = _shape_model()
    result = aot.build(model, log=None)
    ops = [n.op for n in result.graph.nodes]
    assert "where" in ops and "relu" in ops  # both branches, then a select
    module = runtime_lite.load(result.to_bytes())
    for width in (6, 3):
        x = rand(2, width, seed=width)
        _same(module.run({"x": x}), onnxruntime_outputs(model, {"x": x}))


# -- an If on an input bound at build time ----------------------------------------------------------


def _rate_model() -> onnx.ModelProto:
    """silero VAD's shape: ``if sr == 16000`` picks one of two branches; each reads an outer value and holds
    its own initializer."""
    then = _branch(
        "then", [helper.make_node("MatMul", ["h", "w16"], ["out16"])], ["out16"], {"w16": rand(4, 3, seed=1)}
    )
    other = _branch("else", [helper.make_node("MatMul", ["h", "w8"], ["m8"]), helper.make_node("Sigmoid", ["m8"], ["out8"])],
                    ["out8"], {"w8": rand(4, 3, seed=2)})  # fmt: skip
    nodes = [
        helper.make_node("Tanh", ["x"], ["h"]),
        helper.make_node("Equal", ["sr", "k16000"], ["is16k"]),
        _if("is16k", ["y"], then, other, name="rate"),
    ]
    inputs = {"x": rand(2, 4), "sr": np.array(16000, np.int64)}
    return make_model(nodes, inputs, ["y"], {"k16000": np.array(16000, np.int64)})


@pytest.mark.parametrize("rate", [16000, 8000])
def test_an_if_on_a_bound_input_takes_the_branch_its_value_picks(rate):
    model = _rate_model()
    x = rand(2, 4, seed=3)
    result = aot.build(model, input_values={"sr": rate}, log=None)
    assert [v.name for v in result.graph.inputs] == ["x"]
    assert result.graph.metadata["bound_inputs"] == f"sr={rate}"
    module = runtime_lite.load(result.to_bytes())
    assert [s.name for s in module.inputs] == ["x"]
    _same(module.run({"x": x}), onnxruntime_outputs(model, {"x": x, "sr": np.array(rate, np.int64)}))
    # it left the signature, and the refusal says why rather than reading as a typo
    with pytest.raises(
        runtime_lite.InputError, match=rf"unknown input 'sr'.*'sr' was bound at build time \(sr={rate}\)"
    ):
        module.run({"x": x, "sr": np.array(rate, np.int64)})
    with pytest.raises(runtime_lite.InputError, match=r"unknown input 'rate'; the model's inputs are: x: \S+$"):
        module.run({"x": x, "rate": np.array(rate, np.int64)})  # another name: no hint


def test_nested_ifs_fold_level_by_level():
    """An If inside a branch, on a second bound input, its branches reading values of both outer scopes."""

    def inner(tag: str) -> onnx.NodeProto:
        yes = _branch(f"{tag}_yes", [helper.make_node("Add", ["h", "mid"], [f"{tag}_a"])], [f"{tag}_a"])
        no = _branch(f"{tag}_no", [helper.make_node("Mul", ["h", "mid"], [f"{tag}_m"])], [f"{tag}_m"])
        return _if("b", [f"{tag}_out"], yes, no, name=f"{tag}_inner")

    then = _branch("then", [helper.make_node("Exp", ["h"], ["mid"]), inner("t")], ["t_out"])
    other = _branch("else", [helper.make_node("Neg", ["h"], ["mid"]), inner("e")], ["e_out"])
    nodes = [helper.make_node("Tanh", ["x"], ["h"]), _if("a", ["y"], then, other, name="outer")]
    inputs = {"x": rand(3, 2), "a": np.array(True), "b": np.array([False])}
    model = make_model(nodes, inputs, ["y"])
    x = rand(3, 2, seed=5)
    for a, b in itertools.product([True, False], repeat=2):
        ours = _ours(model, {"x": x}, input_values={"a": a, "b": [b]})
        _same(ours, onnxruntime_outputs(model, {"x": x, "a": np.array(a), "b": np.array([b])}))


def test_branch_names_that_repeat_outer_names_stay_in_the_branch():
    """A branch defining 'h' and 'y' (outer names: onnxruntime refuses such a model as not SSA) does not replace
    the outer 'h' that nodes after the If read; the result is onnxruntime's on the model with the branch's names
    made unique."""

    def model(local: str, out: str) -> onnx.ModelProto:
        then = _branch("then", [helper.make_node("Mul", ["x", "x"], [local]), helper.make_node("Add", [local, "x"], [out])],
                       [out])  # fmt: skip
        other = _branch("else", [helper.make_node("Neg", ["x"], [local])], [local])
        nodes = [
            helper.make_node("Tanh", ["x"], ["h"]),
            helper.make_node("Equal", ["mode", "one"], ["c"]),
            _if("c", ["y"], then, other, name="clash"),
            helper.make_node("Add", ["y", "h"], ["out"]),
        ]
        return make_model(
            nodes, {"x": rand(2, 3), "mode": np.array(1, np.int64)}, ["out"], {"one": np.array(1, np.int64)}
        )

    clashing, renamed = model("h", "y"), model("h_local", "y_local")
    x = rand(2, 3, seed=7)
    for mode in (1, 0):
        expected = onnxruntime_outputs(renamed, {"x": x, "mode": np.array(mode, np.int64)})
        _same(_ours(clashing, {"x": x}, input_values={"mode": mode}), expected)
    t = np.tanh(x)
    np.testing.assert_allclose(expected[0], -x + t, rtol=1e-6, atol=1e-6)  # mode 0: else branch, then the outer 'h'


# -- an If on a run-time condition: a select of both branches where that is safe ---------------------


def _gated_model(width_fixed: bool = True) -> onnx.ModelProto:
    """openwakeword's hey_jarvis in small: ``p1 = sigmoid(gemm(flatten(x)))``; ``if p1 >= 0.5``, a verifier MLP
    (Flatten, Gemm, a layer norm spelled out as ReduceMean, Sub, Pow, Sqrt, Div, Mul, Add, then Relu, Gemm,
    Sigmoid) gives the output, else ``p1`` itself (an Identity)."""
    then = _branch(
        "verifier",
        [
            helper.make_node("Flatten", ["x"], ["flat2"]),
            helper.make_node("Gemm", ["flat2", "v1", "c1"], ["h1"], transB=1),
            helper.make_node("ReduceMean", ["h1"], ["mean"], axes=[-1]),
            helper.make_node("Sub", ["h1", "mean"], ["centred"]),
            helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", FLOAT, [], [2.0])),
            helper.make_node("Pow", ["centred", "two"], ["squared"]),
            helper.make_node("ReduceMean", ["squared"], ["var"], axes=[-1]),
            helper.make_node("Constant", [], ["eps"], value=helper.make_tensor("eps", FLOAT, [], [1e-5])),
            helper.make_node("Add", ["var", "eps"], ["var_eps"]),
            helper.make_node("Sqrt", ["var_eps"], ["std"]),
            helper.make_node("Div", ["centred", "std"], ["normed"]),
            helper.make_node("Mul", ["normed", "gamma"], ["scaled"]),
            helper.make_node("Add", ["scaled", "beta"], ["shifted"]),
            helper.make_node("Relu", ["shifted"], ["r1"]),
            helper.make_node("Gemm", ["r1", "v2", "c2"], ["logit2"], transB=1),
            helper.make_node("Sigmoid", ["logit2"], ["p2"]),
        ],
        ["p2"],
        {"v1": rand(8, 12, seed=11), "c1": rand(8, seed=12), "gamma": rand(8, seed=13, low=0.5, high=1.5),
         "beta": rand(8, seed=14), "v2": rand(1, 8, seed=15), "c2": rand(1, seed=16)},
    )  # fmt: skip
    other = _branch("pass", [helper.make_node("Identity", ["p1"], ["p1_out"])], ["p1_out"])
    nodes = [
        helper.make_node("Flatten", ["x"], ["flat"]),
        helper.make_node("Gemm", ["flat", "w", "b"], ["logit"], transB=1),
        helper.make_node("Sigmoid", ["logit"], ["p1"]),
        helper.make_node("GreaterOrEqual", ["p1", "half"], ["ge"]),
        helper.make_node("Cast", ["ge"], ["cond"], to=TensorProto.BOOL),
        _if("cond", ["y"], then, other, name="verify"),
    ]
    inits = {"w": np.full((1, 12), 0.5, np.float32), "b": np.zeros(1, np.float32), "half": np.float32(0.5)}
    return make_model(nodes, {"x": rand(1, 3, 4)}, ["y"], inits, opset=13)


def _gate_inputs() -> list[np.ndarray]:
    """Inputs on both sides of the gate: p1 = sigmoid(sum(x) / 2), so a positive offset takes the verifier."""
    return [rand(1, 3, 4, seed=s) + offset for s, offset in enumerate((-0.6, -0.2, 0.2, 0.6, 1.0))]


@pytest.mark.parametrize("target", ["host", "onnxruntime", "npu"])
def test_a_run_time_condition_with_pure_branches_is_a_select_matching_onnxruntime(target):
    model = _gated_model()
    ops = [n.op for n in from_onnx(model).nodes]
    assert "where" in ops and ops.count("sigmoid") == 2  # both branches computed, one picked
    module = runtime_lite.load(aot.build(model, targets=[target], log=None).to_bytes())
    taken = set()
    for x in _gate_inputs():
        taken.add(bool(1 / (1 + np.exp(-x.sum() / 2)) >= 0.5))
        ours, theirs = module.run({"x": x}), onnxruntime_outputs(model, {"x": x})
        assert ours[0].shape == theirs[0].shape == (1, 1) and ours[0].dtype == theirs[0].dtype
        np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-6)
    assert taken == {True, False}


def test_a_select_is_calibrated_and_runs_in_int8():
    from aot import QuantizeConfig

    model = _gated_model()
    calibration = [{"x": x} for x in _gate_inputs() * 2]
    module = runtime_lite.load(
        aot.build(model, targets=["npu"], quantize=QuantizeConfig(calibration), log=None).to_bytes()
    )
    for x in _gate_inputs():
        theirs = onnxruntime_outputs(model, {"x": x})[0]
        np.testing.assert_allclose(module.run({"x": x})[0], theirs, atol=0.01)  # int8: 4e-3 here


def test_a_run_time_if_nested_in_a_select_branch_is_a_select_too():
    """The inner If's condition is data as well: both levels become selects; every branch is pure."""
    yes = _branch("yes", [helper.make_node("Exp", ["h"], ["e"])], ["e"])
    no = _branch("no", [helper.make_node("Neg", ["h"], ["n"])], ["n"])
    then = _branch("then", [helper.make_node("Less", ["s", "zero"], ["c2"]), _if("c2", ["inner"], yes, no, "inner")],
                   ["inner"])  # fmt: skip
    other = _branch("else", [helper.make_node("Mul", ["h", "h"], ["sq"])], ["sq"])
    nodes = [
        helper.make_node("Tanh", ["x"], ["h"]),
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "minus_one"], ["c1"]),
        _if("c1", ["y"], then, other, name="outer"),
    ]
    inits = {"zero": np.float32(0), "minus_one": np.float32(-1)}
    model = make_model(nodes, {"x": rand(2, 3)}, ["y"], inits)
    module = runtime_lite.load(aot.build(model, log=None).to_bytes())
    for offset in (-1.0, -0.1, 0.5):  # else; then, inner yes; then, inner no
        x = rand(2, 3, seed=4) * 0.1 + offset
        _same(module.run({"x": x}), onnxruntime_outputs(model, {"x": x}))


def _unsafe_model(source: str, then_nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    """An If whose then_branch gives ``picked`` from ``then_nodes`` and else_branch ``x``'s row means, on a
    condition computed from ``source``: the value of data ``x``, ``x`` and a scalar ``flag``, or ``x``'s shape."""
    then = _branch("then", then_nodes, ["picked"])
    other = _branch("else", [helper.make_node("ReduceMean", ["x"], ["means"], axes=[1], keepdims=0)], ["means"])
    cond = {
        "data": [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0), helper.make_node("Greater", ["total", "zero"], ["c"])],
        "flag": [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0), helper.make_node("Greater", ["total", "zero"], ["positive"]),
                 helper.make_node("And", ["positive", "flag"], ["c"])],
        "shape": [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["width"], axis=0),
                  helper.make_node("Greater", ["width", "four"], ["c"])],
    }[source]  # fmt: skip
    inputs = {"x": rand(2, 6), "k": np.array(1, np.int64), "flag": np.array(True)}
    inits = {"zero": np.float32(0), "one": np.array(1, np.int64), "four": np.array(4, np.int64)}
    shapes = {"x": [2, "L"]} if source == "shape" else None
    return make_model([*cond, _if("c", ["y"], then, other, name="gate")], inputs, ["y"], inits, input_shapes=shapes)


_GATHER = [helper.make_node("Gather", ["x", "k"], ["picked"], axis=1, name="pick")]


@pytest.mark.parametrize(
    "source, words",
    [
        ("data", "the value of input 'x' (float32[2,6]) is run-time data, so no build option makes it a constant"),
        ("flag", "bind it (--bind flag=VALUE; input_values= in aot.build), though the value of input 'x' (float32[2,6]) stays run-time data"),
        ("shape", "fix its shape (--input x:SHAPE) so that the condition folds to a constant"),
    ],
)  # fmt: skip
def test_a_run_time_condition_over_a_branch_that_can_fail_is_refused_naming_the_op(source, words):
    with pytest.raises(UnsupportedOpsError) as e:
        aot.build(_unsafe_model(source, _GATHER), log=None)
    message = str(e.value)
    assert "\n" not in message
    origin = (
        "the shape of input 'x'"
        if source == "shape"
        else "the value of input 'x'" + (", 'flag'" if source == "flag" else "")
    )
    assert message.startswith(f"If node 'gate': its condition is computed at run time from {origin}; ")
    assert "static dataflow graph" in message and "Where(condition, then, else)" in message
    assert (
        "its then_branch holds Gather node 'pick', which can fail on values it was not meant for (an index out of range)"
        in message
    )
    assert message.endswith(words)
    assert ("--bind" in message) == (source == "flag")  # never for data or a shape


def test_other_unsafe_branches_and_mismatched_outputs_are_refused_naming_why():
    idiv = [helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT64), helper.make_node("Div", ["xi", "k"], ["q"], name="quot"),
            helper.make_node("ReduceMax", ["q"], ["qm"], axes=[1], keepdims=0), helper.make_node("Cast", ["qm"], ["picked"], to=FLOAT)]  # fmt: skip
    with pytest.raises(
        UnsupportedOpsError, match=r"its then_branch holds Div node 'quot', .* \(an integer division by zero\)"
    ):
        aot.build(_unsafe_model("data", idiv), log=None)
    ints = [helper.make_node("ArgMax", ["x"], ["picked"], axis=1, keepdims=0)]  # int64[2] against float32[2]
    with pytest.raises(
        UnsupportedOpsError,
        match=r"its output 0 is int64\[2\] from the then_branch but float32\[2\] from the else_branch",
    ):
        aot.build(_unsafe_model("data", ints), log=None)
    safe = [helper.make_node("ReduceMax", ["x"], ["picked"], axes=[1], keepdims=0)]
    model = _unsafe_model("data", safe)
    module = runtime_lite.load(aot.build(model, log=None).to_bytes())
    for sign in (1, -1):
        feeds = {"x": sign * np.abs(rand(2, 6, seed=8)), "k": np.array(1, np.int64), "flag": np.array(True)}
        _same(module.run(feeds), onnxruntime_outputs(model, feeds))
    with pytest.raises(UnsupportedOpsError, match="from the value of input 'x';"):  # flag bound: x is left
        aot.build(_unsafe_model("flag", _GATHER), input_values={"flag": True}, log=None)
    both = {"flag": False, "x": rand(2, 6)}  # both bound: it folds to a constant, the Gather never runs
    np.testing.assert_allclose(_ours(_unsafe_model("flag", _GATHER), {"k": np.array(9, np.int64)}, input_values=both)[0],
                               rand(2, 6).mean(axis=1), rtol=1e-6)  # fmt: skip


def test_loop_and_scan_stay_refused_by_design():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v", "v"], ["v_out"])],
        "body",
        [
            helper.make_tensor_value_info(n, t, s)
            for n, t, s in [("i", TensorProto.INT64, []), ("cond_in", TensorProto.BOOL, []), ("v", FLOAT, [2])]
        ],
        [
            helper.make_tensor_value_info(n, t, s)
            for n, t, s in [("cond_out", TensorProto.BOOL, []), ("v_out", FLOAT, [2])]
        ],
    )
    node = helper.make_node("Loop", ["n", "", "x"], ["y"], body=body, name="loop")
    model = make_model([node], {"x": rand(2)}, ["y"], {"n": np.array(3, np.int64)})
    with pytest.raises(UnsupportedOpsError) as e:
        aot.build(model, log=None)
    assert str(e.value) == (
        "unsupported ops (1 type): Loop (node 'loop'); Loop is run-time control flow, which aot does not compile "
        "by design (one static dataflow graph)"
    )


# -- --bind / input_values errors -----------------------------------------------------------------


def _typed_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Cast", [name], [f"{name}_f"], to=FLOAT) for name in ("i", "u", "f", "v")]
    nodes += [helper.make_node("Sum", ["i_f", "u_f", "f_f", "v_f"], ["y"])]
    inputs = {"i": np.array(1, np.int64), "u": np.array(1, np.uint8), "f": np.float32(1), "v": np.zeros(2, np.float32)}
    return make_model(nodes, inputs, ["y"])


@pytest.mark.parametrize(
    "values, words",
    [
        ({"rate": 1}, "--bind names unknown input 'rate'; the model's inputs are: i, u, f, v"),
        ({"i": 3.5}, "--bind i: 3.5 does not fit the input's dtype int64 (not a whole number)"),
        ({"u": 300}, "--bind u: 300 does not fit the input's dtype uint8 (its range is 0..255)"),
        ({"u": -1}, "--bind u: -1 does not fit the input's dtype uint8 (its range is 0..255)"),
        ({"f": 1e40}, "--bind f: 1e+40 does not fit the input's dtype float32 (too large)"),
        ({"f": 2**24 + 1}, "--bind f: 16777217 does not fit the input's dtype float32 (not exactly representable)"),
        ({"i": "x"}, "--bind i: 'x' is not a number or a list of numbers"),
        ({"i": [1, 2]}, "--bind i: the model declares int64[], got a value of shape [2]"),
        ({"v": [1.0, 2.0, 3.0]}, "--bind v: the model declares float32[2], got a value of shape [3]"),
    ],
)
def test_bind_errors_are_one_line(values, words):
    with pytest.raises(ShapeError) as e:
        aot.build(_typed_model(), input_values=values, log=None)
    assert str(e.value) == words


def test_bound_values_run_and_the_shape_and_value_of_one_input_are_not_both_given():
    model = _typed_model()
    ours = _ours(model, {"u": np.array(7, np.uint8), "f": np.float32(0.5)}, input_values={"i": 2, "v": [1, 2]})
    np.testing.assert_allclose(ours[0], [10.5, 11.5])  # 2 + 7 + 0.5 + [1, 2]
    with pytest.raises(ShapeError, match="given both a shape \\(--input\\) and a value \\(--bind\\)"):
        aot.build(model, input_shapes={"v": (2,)}, input_values={"v": [1, 2]}, log=None)
    with pytest.raises(BuildError, match="applies to an ONNX model"):
        aot.build(from_onnx(model), input_values={"i": 1}, log=None)


@pytest.mark.parametrize(
    "specs, expected",
    [
        (("sr=16000",), {"sr": 16000}),
        (("ids=1,2,3", "t=0.5"), {"ids": [1, 2, 3], "t": 0.5}),
        (("ids=[4, 5]", "on=true", "none=[]"), {"ids": [4, 5], "on": True, "none": []}),
    ],
)
def test_bind_options_parse(specs, expected):
    assert bound_values(specs) == expected


@pytest.mark.parametrize(
    "specs, words",
    [
        (("sr",), "--bind must look like NAME=VALUE"),
        (("sr=",), "--bind must look like NAME=VALUE"),
        (("sr=fast",), "--bind 'sr=fast': 'fast' is not a number, true/false, or a list of them"),
        (("ids=1,,2",), "--bind 'ids=1,,2': '1,,2' is not a number"),
        (("sr=1", "sr=2"), "--bind 'sr=2': input 'sr' was given a value already"),
    ],
)
def test_bind_option_errors_are_one_line(specs, words):
    with pytest.raises(BuildError) as e:
        bound_values(specs)
    assert str(e.value).startswith(words) and "\n" not in str(e.value)


# -- the command line -----------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aot.cli.build", *args], capture_output=True, text=True)


def test_the_command_line_binds_and_says_so(tmp_path):
    path = tmp_path / "rate.onnx"
    path.write_bytes(_rate_model().SerializeToString())
    bundle = tmp_path / "rate.aotb"
    result = _cli(str(path), "-o", str(bundle), "--bind", "sr=8000")
    assert result.returncode == 0, result.stderr
    assert "  inputs   x: float32[2,4]" in result.stdout
    assert "  bound    sr=8000 (constants at build time, no longer inputs)" in result.stdout
    x = rand(2, 4, seed=9)
    expected = onnxruntime_outputs(_rate_model(), {"x": x, "sr": np.array(8000, np.int64)})
    _same(runtime_lite.load(bundle).run({"x": x}), expected)

    unbound = _cli(str(path), "-o", str(tmp_path / "select.aotb"))  # pure branches: a select on sr at run time
    assert unbound.returncode == 0, unbound.stderr
    module = runtime_lite.load(tmp_path / "select.aotb")
    for rate in (16000, 8000):
        feeds = {"x": x, "sr": np.array(rate, np.int64)}
        _same(module.run(feeds), onnxruntime_outputs(_rate_model(), feeds))

    gated = tmp_path / "gated.onnx"
    gated.write_bytes(_unsafe_model("flag", _GATHER).SerializeToString())
    refused = _cli(str(gated), "-o", str(tmp_path / "no.aotb"))
    errors = [line for line in refused.stderr.splitlines() if line.startswith("Error")]
    assert refused.returncode != 0 and len(errors) == 1 and "Traceback" not in refused.stderr
    assert "from the value of input 'x', 'flag'" in errors[0] and "Gather node 'pick'" in errors[0]
    assert "--bind flag=VALUE" in errors[0] and "--bind x" not in errors[0]
    assert not (tmp_path / "no.aotb").exists()

    for args, words in [
        (["--bind", "sr=16000.5"], "Error: --bind sr: 16000.5 does not fit the input's dtype int64"),
        (["--bind", "rate=1"], "Error: --bind names unknown input 'rate'"),
        (["--bind", "sr"], "Error: --bind must look like NAME=VALUE"),
    ]:
        bad = _cli(str(path), "-o", str(tmp_path / "bad.aotb"), *args)
        assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith(words), bad.stderr


# -- silero VAD: the real files of the pip package silero-vad (a test dependency) ----------------------------


def _silero(name: str) -> str:
    """A silero VAD ONNX file inside the installed silero-vad, found without importing it (it imports torch)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        missing("silero-vad is not installed (pip install -e '.[test]')")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / name
    if not path.is_file():
        missing(f"silero-vad has no data/{name}")
    return str(path)


def _speechlike(seconds: float = 3.4, rate: int = 16000) -> np.ndarray:
    """Syllables of a synthetic vowel: a 100-160 Hz pulse train through three resonances (two of them moving),
    under a 3 Hz envelope, over quiet noise; silero calls about a tenth of its chunks speech."""
    rng = np.random.default_rng(0)
    n = int(seconds * rate)
    t = np.arange(n) / rate
    phase = np.cumsum(130 + 30 * np.sin(2 * np.pi * 0.9 * t)) / rate
    pulses = (np.diff(np.floor(phase), prepend=0) > 0).astype(np.float64)
    voiced = np.zeros(n)
    for formant, width in ((500 + 200 * np.sin(2 * np.pi * 2.1 * t), 80), (1500 + 500 * np.sin(2 * np.pi * 1.3 * t), 120),
                           (np.full(n, 2500.0), 200)):  # fmt: skip
        r = np.exp(-np.pi * width / rate)
        a1, a2 = 2 * r * np.cos(2 * np.pi * formant / rate), -r * r
        y, y1, y2 = np.zeros(n), 0.0, 0.0
        for i in range(n):
            y1, y2 = pulses[i] + a1[i] * y1 + a2 * y2, y1
            y[i] = y1
        voiced += y / np.abs(y).max()
    envelope = np.clip(np.sin(2 * np.pi * 3 * t), 0, None) * (np.sin(2 * np.pi * 0.4 * t) > -0.3)
    return (0.3 * voiced * envelope + 0.005 * rng.standard_normal(n)).astype(np.float32)


def _chunks(signal: np.ndarray, size: int = 512, context: int = 64) -> np.ndarray:
    """silero's own framing: each chunk of ``size`` samples after the previous chunk's last ``context``."""
    signal = np.pad(signal, (0, (-len(signal)) % size))
    previous, out = np.zeros(context, np.float32), []
    for i in range(0, len(signal), size):
        frame = signal[i : i + size]
        out.append(np.concatenate([previous, frame]))
        previous = frame[-context:]
    return np.stack(out).astype(np.float32)


def test_silero_vad_with_the_rate_bound_matches_onnxruntime_over_streamed_chunks():
    import onnxruntime as ort

    path = _silero("silero_vad.onnx")
    result = aot.build(
        path, input_values={"sr": 16000}, input_shapes={"input": (1, 576), "state": (2, 1, 128)}, log=None
    )
    assert not any(n.op == "If" for n in result.graph.nodes)
    module = runtime_lite.load(result.to_bytes())
    assert [s.name for s in module.inputs] == ["input", "state"]
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    chunks = _chunks(_speechlike())
    assert len(chunks) >= 100
    state = ours_state = np.zeros((2, 1, 128), np.float32)
    theirs, ours = [], []
    for chunk in chunks[:100]:
        p, state = session.run(None, {"input": chunk[None], "state": state, "sr": np.array(16000, np.int64)})
        q, ours_state = module.run({"input": chunk[None], "state": ours_state})
        theirs.append(p.reshape(-1))
        ours.append(q.reshape(-1))
    theirs, ours = np.concatenate(theirs), np.concatenate(ours)
    assert theirs.max() > 0.5  # the signal reaches speech, so both sides of silero's threshold are compared
    assert np.linalg.norm(ours - theirs) / np.linalg.norm(theirs) < 1e-5
    assert np.linalg.norm(ours_state - state) / np.linalg.norm(state) < 1e-5
    with pytest.raises(runtime_lite.InputError, match="unknown input 'sr'"):
        module.run({"input": chunks[0][None], "state": ours_state, "sr": np.array(16000, np.int64)})
