"""Properties of partitioning on random DAGs with random backend support (hypothesis).

For any graph and any support: regions are acyclic, each op is in at most one
region, same-backend regions joined by an edge could not merge without a cycle
(maximality), and a bundle built with the NPU computes what the host alone does.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aot.compiler.backends.npu  # noqa: F401
import runtime_lite
from aot.compiler import build
from aot.compiler.partition import fuse_ops_by_pattern, merge_composite_functions
from aot.compiler.pattern import is_op, wildcard
from aot.compiler.pattern_registry import FusionPattern, get_patterns_with_prefix
from aot.ir.graph import Graph
from aot.ir.types import TensorType

UNARY = ["relu", "sigmoid", "tanh", "exp"]
BINARY = ["add", "subtract", "multiply", "maximum"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def dags(draw):
    """(graph spec, veto) — the spec rebuilds the same graph as often as needed."""
    n_inputs = draw(st.integers(1, 2))
    spec = []
    for i in range(draw(st.integers(1, 24))):
        available = n_inputs + i
        if draw(st.booleans()):
            spec.append((draw(st.sampled_from(UNARY)), [draw(st.integers(0, available - 1))]))
        else:
            spec.append(
                (draw(st.sampled_from(BINARY)), draw(st.lists(st.integers(0, available - 1), min_size=2, max_size=2)))
            )
    extra_outputs = draw(st.lists(st.integers(0, n_inputs + len(spec) - 1), max_size=3))
    return n_inputs, spec, extra_outputs


def build_graph(n_inputs, spec, extra_outputs) -> Graph:
    g = Graph("random")
    values = [g.add_input(f"in{i}", TensorType((2, 3), "float32")) for i in range(n_inputs)]
    for k, (op, args) in enumerate(spec):
        values.append(g.op(op, *[values[a] for a in args], name=f"n{k}"))
    used = {id(v) for node in g.nodes for v in node.inputs}
    outputs = [v for v in values[n_inputs:] if id(v) not in used]
    outputs += [values[i] for i in extra_outputs if i >= n_inputs and values[i] not in outputs]
    g.outputs = outputs or [values[-1]]
    return g


def single_op_patterns(backend: str, ops, veto) -> list[FusionPattern]:
    def check(ctx):
        return ctx.root.producer.name not in veto

    return [
        FusionPattern(f"{backend}.{op}", is_op(op)(*[wildcard() for _ in range(1 if op in UNARY else 2)]), check=check)
        for op in ops
    ]


def contracted_edges(pg):
    """Units (region ids, host node names) and the edges between them once each region is one node."""
    region_of = pg.region_of()
    unit = {id(n): (region_of[id(n)].id if id(n) in region_of else n.name) for n in pg.nodes}
    producer = {id(o): unit[id(n)] for n in pg.nodes for o in n.outputs}
    edges = {(producer[id(v)], unit[id(n)]) for n in pg.nodes for v in n.inputs if id(v) in producer}
    return set(unit.values()), {(a, b) for a, b in edges if a != b}


def contracted_order(pg):
    """A topological order of the contracted graph, or None if it has a cycle."""
    nodes, edges = contracted_edges(pg)
    indegree = {u: 0 for u in nodes}
    for _, b in edges:
        indegree[b] += 1
    ready = [u for u in nodes if indegree[u] == 0]
    order = []
    while ready:
        u = ready.pop()
        order.append(u)
        for a, b in edges:
            if a == u:
                indegree[b] -= 1
                if indegree[b] == 0:
                    ready.append(b)
    return order if len(order) == len(nodes) else None


def path_via_outside(pg, src, dst) -> bool:
    """In the contracted graph, a path src -> ... -> dst through at least one other unit."""
    _, edges = contracted_edges(pg)
    succs: dict[str, set[str]] = {}
    for a, b in edges:
        succs.setdefault(a, set()).add(b)
    stack = [u for u in succs.get(src.id, ()) if u != dst.id]
    seen = set()
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        for v in succs.get(u, ()):
            if v == dst.id:
                return True
            stack.append(v)
    return False


@SETTINGS
@given(
    dag=dags(),
    support_a=st.sets(st.sampled_from(UNARY + BINARY)),
    support_b=st.sets(st.sampled_from(UNARY + BINARY)),
    veto=st.sets(st.sampled_from([f"n{i}" for i in range(24)])),
)
def test_regions_are_acyclic_disjoint_and_maximal(dag, support_a, support_b, veto):
    pg = fuse_ops_by_pattern(build_graph(*dag), single_op_patterns("pa", support_a, veto))
    pg = fuse_ops_by_pattern(pg, single_op_patterns("pb", support_b, set()))
    pg = merge_composite_functions(pg)

    # Each op in at most one region, and each region exactly its composites' ops.
    seen: set[int] = set()
    for region in pg.regions:
        ids = [id(n) for n in region.nodes]
        assert not seen & set(ids)
        seen |= set(ids)
        assert sorted(ids) == sorted(id(n) for c in region.composites for n in c.nodes)
        assert all(c.backend == region.backend for c in region.composites)
    assert seen == {id(n) for c in pg.composites for n in c.nodes}

    assert contracted_order(pg) is not None, str(pg)

    producer_region = {id(o): r for r in pg.regions for n in r.nodes for o in n.outputs}
    for r2 in pg.regions:
        for n in r2.nodes:
            for v in n.inputs:
                r1 = producer_region.get(id(v))
                if r1 is not None and r1 is not r2 and r1.backend == r2.backend:
                    assert path_via_outside(pg, r1, r2), f"{r1.id} and {r2.id} could merge:\n{pg}"


@SETTINGS
@given(dag=dags(), veto=st.sets(st.sampled_from([f"n{i}" for i in range(24)])), seed=st.integers(0, 2**16))
def test_npu_bundle_equals_host_only(dag, veto, seed):
    npu = [
        FusionPattern(
            p.name, p.pattern, p.annotations, lambda ctx, c=p.check: c(ctx) and ctx.root.producer.name not in veto
        )
        for p in get_patterns_with_prefix("npu")
    ]

    def partitioner(graph):
        return merge_composite_functions(fuse_ops_by_pattern(graph, npu))

    offloaded = build(build_graph(*dag), partitioner=partitioner)
    host_only = build(build_graph(*dag))
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(dag[0])]
    got = runtime_lite.load(offloaded.to_bytes()).run(inputs)
    want = runtime_lite.load(host_only.to_bytes()).run(inputs)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_merged_group_that_carries_a_path_across_the_window_blocks_the_merge():
    """Found by the property above: n0+n7 (pb) merged first; then n3+n15+n16 (pa) must not merge, since
    n3 -> n7 ~ n0 -> n2 -> n16 leaves the pa group through the pb group, whose ranks straddle the window."""
    dag = (1, [("add", [0, 0]), ("relu", [0]), ("subtract", [0, 1]), ("relu", [0]), ("relu", [0]), ("relu", [0]),
               ("relu", [0]), ("add", [1, 4]), ("relu", [0]), ("add", [0, 0]), ("add", [0, 0]), ("relu", [0]),
               ("add", [0, 0]), ("add", [0, 0]), ("add", [0, 0]), ("add", [0, 4]), ("add", [3, 16])], [])  # fmt: skip
    pg = fuse_ops_by_pattern(build_graph(*dag), single_op_patterns("pa", {"relu", "add"}, {"n7", "n1", "n2", "n0"}))
    pg = fuse_ops_by_pattern(pg, single_op_patterns("pb", {"relu", "add"}, set()))
    pg = merge_composite_functions(pg)
    assert contracted_order(pg) is not None, str(pg)
