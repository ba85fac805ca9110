"""The memory planner, proven on random graphs: whatever it decides (slot reuse, frees, in-place,
output copies), running the plan gives exactly what a naive interpreter gives, and never writes
into the caller's inputs or the bundle's constants."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import aot
import runtime_lite
from aot.ir import Graph, TensorType
from tests.helpers import evaluate_graph

SHAPE = (2, 3, 4)


@st.composite
def random_graphs(draw):
    """Chains of elementwise ops, views, splits and concats over one shape.

    Operands are drawn mostly from the newest values, so chains form in which a view
    outlives an in-place write on its source: the cases a planner gets wrong.
    """
    graph = Graph("random")

    def pick(values):
        n = len(values)
        recent = st.integers(0, min(2, n - 1)).map(lambda k: values[n - 1 - k])
        return draw(st.one_of(recent, recent, st.sampled_from(values)))

    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    full = [graph.add_input("a", TensorType(SHAPE, "float32")), graph.add_input("b", TensorType(SHAPE, "float32"))]
    full.append(graph.constant(rng.standard_normal(SHAPE).astype(np.float32), "k"))
    rows = [graph.constant(rng.standard_normal((4,)).astype(np.float32), "r")]
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["unary", "binary", "view", "split", "concat"]))
        x = pick(full)
        if kind == "unary":
            full.append(graph.op(draw(st.sampled_from(["relu", "sigmoid", "negative", "tanh", "abs"])), x))
        elif kind == "binary":
            y = pick(full + rows)
            a, b = (x, y) if draw(st.booleans()) else (y, x)
            if a.type.shape != SHAPE:
                a, b = b, a
            full.append(graph.op(draw(st.sampled_from(["add", "multiply", "subtract", "maximum"])), a, b))
        elif kind == "view":
            view = draw(st.sampled_from(["reshape", "slice", "transpose"]))
            if view == "reshape":
                full.append(graph.op("reshape", graph.op("reshape", x, shape=[6, 4]), shape=list(SHAPE)))
            elif view == "slice":
                full.append(graph.op("slice", x, starts=[0], ends=[4], axes=[2], steps=[1]))
            else:
                full.append(graph.op("transpose", graph.op("transpose", x, perm=[2, 1, 0]), perm=[2, 1, 0]))
        elif kind == "split":
            top, bottom = graph.add_node("split", [x], {"axis": 0, "sizes": [1, 1]}).outputs
            rows.append(graph.op("reduce_sum", top, axes=[0, 1], keepdims=0))
            full.append(graph.op("concat", bottom, top, axis=0))
        else:
            y = pick(full)
            full.append(graph.op("slice", graph.op("concat", x, y, axis=0), starts=[1], ends=[3], axes=[0], steps=[1]))
    picks = [full[-1]] + draw(st.lists(st.sampled_from(full), max_size=3))
    graph.outputs = list(picks)
    for i, v in enumerate(graph.outputs):  # distinct Values, as a frontend produces them
        if sum(o is v for o in graph.outputs) > 1 or v in graph.inputs or v.is_constant:
            graph.outputs[i] = graph.op("copy", v)
    return graph


@settings(max_examples=300, deadline=None)
@given(random_graphs(), st.integers(0, 2**16))
def test_plan_matches_naive_execution(graph, seed):
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(SHAPE).astype(np.float32) for _ in graph.inputs]
    expected = evaluate_graph(graph, inputs)
    constants = {id(v): v.data.copy() for v in graph.constants()}
    result = aot.build(graph)
    module = runtime_lite.load(result.to_bytes())
    originals = [x.copy() for x in inputs]
    outputs = module.run(inputs)
    for got, want in zip(outputs, expected):
        np.testing.assert_array_equal(got, want)
    for x, original in zip(inputs, originals):
        np.testing.assert_array_equal(x, original)
    for v in result.graph.constants():
        if id(v) in constants:
            np.testing.assert_array_equal(v.data, constants[id(v)])
    # Running again gives the same answer: no state leaks between runs.
    for got, want in zip(module.run(inputs), expected):
        np.testing.assert_array_equal(got, want)
    for i, a in enumerate(outputs):
        for b in outputs[i + 1 :]:
            assert not np.shares_memory(a, b)
        for x in inputs:
            assert not np.shares_memory(a, x)


def test_slots_are_reused_and_activations_freed_early():
    graph = Graph("chain")
    x = graph.add_input("x", TensorType((1000,), "float32"))
    v = x
    for _ in range(50):
        v = graph.op("sigmoid", graph.op("add", v, v))
    graph.outputs = [v]
    plan = aot.build(graph).plan
    assert plan.memory.num_slots <= 3
    assert plan.memory.inplace_count >= 99  # every op after the first writes into a dead operand
    assert plan.memory.peak_bytes == 4000


def test_a_view_outliving_its_source_blocks_in_place_writes():
    """exp(x) is viewed by a reshape that is read after negative(exp(x)): writing the negation into
    exp's buffer would change what the view reads."""
    graph = Graph("alias")
    x = graph.add_input("x", TensorType(SHAPE, "float32"))
    fresh = graph.op("exp", x)
    view = graph.op("reshape", fresh, shape=[6, 4])
    negated = graph.op("negative", fresh)
    graph.outputs = [graph.op("add", graph.op("reshape", view, shape=list(SHAPE)), negated)]
    inputs = [np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)]
    result = aot.build(graph)
    assert id(negated.producer) not in result.plan.memory.inplace
    np.testing.assert_array_equal(runtime_lite.load(result.to_bytes()).run(inputs)[0], evaluate_graph(graph, inputs)[0])
