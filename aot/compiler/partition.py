"""Partitioning: patterns -> composites -> regions, TVM's FuseOpsByPattern and MergeCompositeFunctions.

The IR stays flat. A ``PartitionedGraph`` records, beside the graph, which nodes
form each *composite* (one pattern match, e.g. ``npu.conv2d_relu_fused``) and
which composites form each *region* (one external function: one ``call_module``
in the host plan, one backend payload). Everything not in a region runs on the host.

Two rules keep regions executable:

* a composite is convex (no path leaves it and comes back), so it can run as one call;
* merging never creates a cycle between regions: two groups are joined only when no
  path between them passes through a third (the diamond A-conv -> B-gelu -> A-add
  keeps its two A parts apart: one merged A region would both feed and wait for B).
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from aot.compiler.pattern import match, root_ops
from aot.compiler.pattern_registry import FusionPattern
from aot.ir.graph import Graph, Node, Value


@dataclass(frozen=True)
class Refusal:
    """Why an op stayed on the host: who refused it (a pattern, or a backend's region rule) and the reason."""

    source: str
    reason: str

    @property
    def backend(self) -> str:
        return self.source.split(".", 1)[0]

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}"


@dataclass
class Composite:
    """One accepted pattern match: its nodes (graph order) and boundary values."""

    name: str
    nodes: list[Node]
    inputs: list[Value]
    outputs: list[Value]
    annotated: dict[str, Value] = field(default_factory=dict)
    bind_constants: bool = False

    @property
    def backend(self) -> str:
        return self.name.split(".", 1)[0]


@dataclass
class Region:
    """One external function: adjacent composites of one backend, run by one backend call.

    ``composites`` are in dataflow order (each after those it reads from); ``nodes``
    lists every op in graph order.
    """

    id: str
    backend: str
    composites: list[Composite]
    inputs: list[Value]
    outputs: list[Value]
    bind_constants: bool = False
    nodes: list[Node] = field(default_factory=list)
    #: Per input, its shapes at the bounds' (minimum, maximum), or None where the graph has no bounds (the build
    #: fills it from ``Graph.shape_bounds`` before codegen: TensorRT's optimization profiles).
    input_bounds: list[tuple | None] = field(default_factory=list)

    @property
    def ops(self) -> list[str]:
        return [n.op for n in self.nodes]

    def as_graph(self) -> Graph:
        """The region as a graph of its own, with fresh values (the partitioned graph is untouched).

        Backends that lower a region with graph-level machinery (the host plan for
        TensorRT's fallback) use this; shapes are re-inferred, so it doubles as a check.
        """
        graph = Graph(self.id)
        mapped: dict[int, Value] = {id(v): graph.add_input(v.name, v.type) for v in self.inputs}
        for node in self.nodes:
            inputs = []
            for v in node.inputs:
                if id(v) not in mapped:  # a constant bound into the region
                    mapped[id(v)] = Value(graph.unique_name(v.name), v.type, data=v.data)
                inputs.append(mapped[id(v)])
            copy = graph.add_node(node.op, inputs, dict(node.attrs), node.name)
            for old, new in zip(node.outputs, copy.outputs):
                mapped[id(old)] = new
        graph.outputs = [mapped[id(v)] for v in self.outputs]
        return graph


class PartitionedGraph:
    """A graph plus its composites and regions; prints like TVM's partitioned module."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.composites: list[Composite] = []
        self.regions: list[Region] = []
        # Snapshots: outlining regions later rewrites the graph, the partition view stays printable.
        self.nodes: list[Node] = list(graph.nodes)
        self.inputs: list[Value] = list(graph.inputs)
        self.outputs: list[Value] = list(graph.outputs)
        #: Graph order of every node; sorts composites and regions and bounds path searches.
        self.position: dict[int, int] = {id(n): i for i, n in enumerate(self.nodes)}
        #: Why a match rooted at a node was refused: id(node) -> [Refusal, ...].
        self.refusals: dict[int, list[Refusal]] = {}

    def refuse(self, node: Node, source: str, reason: str) -> None:
        """Record that ``source`` (a pattern name, or a backend for region-level refusals) left ``node``."""
        refusal = Refusal(source, reason)
        reasons = self.refusals.setdefault(id(node), [])
        if refusal not in reasons:
            reasons.append(refusal)

    @functools.cached_property
    def consumers(self) -> dict[Value, list[Node]]:
        """Readers of each value, as partitioning sees the graph (before regions are outlined)."""
        return self.graph.consumers()

    def composite_of(self) -> dict[int, Composite]:
        return {id(n): c for c in self.composites for n in c.nodes}

    def region_of(self) -> dict[int, Region]:
        return {id(n): r for r in self.regions for n in r.nodes}

    def op_counts(self) -> dict[str, int]:
        """Ops per backend, host included: the build summary's ``regions`` line."""
        counts = {"host": len(self.nodes) - sum(len(r.nodes) for r in self.regions)}
        for r in self.regions:
            counts[r.backend] = counts.get(r.backend, 0) + len(r.nodes)
        return counts

    def __str__(self) -> str:
        from aot.compiler.partition_printer import format_partitioned

        return format_partitioned(self)


# -- boundaries -------------------------------------------------------------------------


def boundary(
    nodes: Sequence[Node], graph_outputs: Iterable[Value], consumers: dict[Value, list[Node]], bind_constants: bool
) -> tuple[list[Value], list[Value]]:
    """(inputs, outputs) of a node set: what it reads from outside, what the outside reads from it.

    Constants are inputs unless ``bind_constants`` (then they travel inside the payload).
    """
    inside = {id(n) for n in nodes}
    produced = {id(o) for n in nodes for o in n.outputs}
    inputs: dict[int, Value] = {}
    for node in nodes:
        for v in node.inputs:
            if id(v) not in produced and not (bind_constants and v.is_constant):
                inputs.setdefault(id(v), v)
    exported = {id(v) for v in graph_outputs}
    outputs = [
        o
        for n in nodes
        for o in n.outputs
        if id(o) in exported or any(id(user) not in inside for user in consumers.get(o, ()))
    ]
    return list(inputs.values()), outputs


def _is_convex(nodes: list[Node], consumers: dict[Value, list[Node]], position: dict[int, int]) -> bool:
    """No path leaves ``nodes`` and re-enters them (then they could not run as one call)."""
    inside = {id(n) for n in nodes}
    last = max(position[id(n)] for n in nodes)
    stack = [u for n in nodes for o in n.outputs for u in consumers.get(o, ()) if id(u) not in inside]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen or position[id(node)] > last:
            continue
        seen.add(id(node))
        for o in node.outputs:
            for user in consumers.get(o, ()):
                if id(user) in inside:
                    return False
                stack.append(user)
    return True


# -- FuseOpsByPattern -------------------------------------------------------------------


def fuse_ops_by_pattern(
    graph: Graph | PartitionedGraph,
    patterns: Sequence[FusionPattern],
    *,
    bind_constants: bool = False,
    annotate_codegen: bool = False,
    skip: Iterable[Node] = (),
) -> PartitionedGraph:
    """Group pattern matches into composites, trying ``patterns`` in order (highest priority first).

    A node already in a composite cannot be matched again, so a fused pattern that
    comes first wins over its parts; nor can a node in ``skip``. ``annotate_codegen`` also
    wraps each composite in its own region (TVM's ``Codegen`` tag);
    ``merge_composite_functions`` groups them.
    """
    pg = graph if isinstance(graph, PartitionedGraph) else PartitionedGraph(graph)
    nodes, consumers, position = pg.nodes, pg.consumers, pg.position
    graph_outputs = frozenset(id(v) for v in pg.outputs)
    claimed = {id(n) for c in pg.composites for n in c.nodes} | {id(n) for n in skip}
    by_op: dict[str, list[Node]] = {}
    for node in nodes:
        by_op.setdefault(node.op, []).append(node)

    for fp in patterns:
        ops = root_ops(fp.pattern)
        if ops is None:
            candidates: Iterable[Node] = nodes
        else:
            candidates = sorted((n for op in ops for n in by_op.get(op, ())), key=lambda n: position[id(n)])
        for node in candidates:
            if id(node) in claimed or not node.outputs:
                continue
            found = match(fp.pattern, node.outputs[0])  # a multi-output op (split) is matched at its first
            if found is None or any(id(n) in claimed for n in found.nodes):
                continue
            members = sorted(found.nodes, key=lambda n: position[id(n)])
            if not _is_convex(members, consumers, position):
                pg.refuse(node, fp.name, "a path leaves the match and comes back (fusing it would make a cycle)")
                continue
            refusal = fp.refusal(found, consumers, graph_outputs, pg.graph.shape_bounds)
            if refusal is not None:
                pg.refuse(node, fp.name, refusal)
                continue
            inputs, outputs = boundary(members, pg.outputs, consumers, bind_constants)
            composite = Composite(fp.name, members, inputs, outputs, found.annotated(fp.annotations), bind_constants)
            pg.composites.append(composite)
            claimed.update(id(n) for n in members)
            if annotate_codegen:
                pg.regions.append(_region([composite], pg))
    pg.composites.sort(key=lambda c: position[id(c.nodes[0])])
    if annotate_codegen:
        pg.regions.sort(key=lambda r: position[id(r.nodes[0])])
        _renumber(pg)
    return pg


def _region(composites: list[Composite], pg: PartitionedGraph) -> Region:
    """A region of ``composites``, which the caller gives in dataflow order; ``_renumber`` names it."""
    members = sorted((n for c in composites for n in c.nodes), key=lambda n: pg.position[id(n)])
    bind = composites[0].bind_constants
    inputs, outputs = boundary(members, pg.outputs, pg.consumers, bind)
    return Region("", composites[0].backend, composites, inputs, outputs, bind, members)


# -- MergeCompositeFunctions ------------------------------------------------------------


class _UnitGraph:
    """Composites and host nodes as units; merged composites are contracted into one node.

    Cycle checks stay local because the contracted graph keeps a topological order of
    its nodes at all times (Pearce and Kelly's dynamic order, as XLA's GraphCycles keeps
    one): a path from ``a`` to ``b`` can only pass nodes ranked between them, so a check
    looks at that window and nothing else. A merge moves the merged node's edges and
    repairs the order locally where an edge now points backwards. The earlier search
    widened its window past every merged group that straddled it; with a host op in every
    block those spans chained across the whole graph, and 18,564 nodes took 13.6 s.
    """

    def __init__(self, pg: PartitionedGraph):
        composite_of = pg.composite_of()
        self.composites = pg.composites
        n_comp = len(pg.composites)
        index = {id(c): i for i, c in enumerate(pg.composites)}
        unit_of: dict[int, int] = {}
        first: list[int] = [0] * n_comp
        host_units = 0
        for pos, node in enumerate(pg.nodes):
            c = composite_of.get(id(node))
            if c is not None:
                u = index[id(c)]
                if node is c.nodes[0]:
                    first[u] = pos
            else:
                u = n_comp + host_units
                host_units += 1
                first.append(pos)
            unit_of[id(node)] = u
        self.size = n_comp + host_units
        producer_unit = {id(o): unit_of[id(n)] for n in pg.nodes for o in n.outputs}
        #: Unit edges as the graph has them (what the merge passes walk).
        self.preds: list[set[int]] = [set() for _ in range(self.size)]
        self.succs: list[set[int]] = [set() for _ in range(self.size)]
        for node in pg.nodes:
            u = unit_of[id(node)]
            for v in node.inputs:
                p = producer_unit.get(id(v))
                if p is not None and p != u:
                    self.preds[u].add(p)
                    self.succs[p].add(u)
        #: Edges between contracted nodes (kept on each group's root) and their topological ranks.
        self.into = [set(p) for p in self.preds]
        self.out = [set(s) for s in self.succs]
        #: The first topological order: the greedy pass's order and the order of ops inside a region.
        self.order = self._toposort(first)
        self.position = [0] * self.size
        for r, u in enumerate(self.order):
            self.position[u] = r
        self.rank = list(self.position)
        self.parent = list(range(self.size))

    def _toposort(self, first: list[int]) -> list[int]:
        indegree = [len(p) for p in self.preds]
        ready = [(first[u], u) for u in range(self.size) if indegree[u] == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, u = heapq.heappop(ready)
            order.append(u)
            for s in self.succs[u]:
                indegree[s] -= 1
                if indegree[s] == 0:
                    heapq.heappush(ready, (first[s], s))
        if len(order) != self.size:  # pragma: no cover - composites are convex, so units form a DAG
            raise AssertionError("partition: the composite graph has a cycle")
        return order

    def find(self, u: int) -> int:
        root = u
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[u] != root:
            self.parent[u], u = root, self.parent[u]
        return root

    def _reach(self, start: int, edges: list[set[int]], inside: Callable[[int], bool]) -> set[int]:
        """``start`` and every node reachable from it along ``edges`` through nodes ``inside`` the window."""
        found, stack = {start}, [start]
        while stack:
            for n in edges[stack.pop()]:
                if n not in found and inside(n):
                    found.add(n)
                    stack.append(n)
        return found

    def _other_path(self, a: int, b: int) -> bool:
        """A path between nodes ``a`` and ``b`` besides their own edge (a cycle if the two were merged)."""
        low, high = sorted((a, b), key=self.rank.__getitem__)
        top = self.rank[high]
        stack = [n for n in self.out[low] if n != high and self.rank[n] < top]
        seen = set(stack)
        while stack:
            n = stack.pop()
            for m in self.out[n]:
                if m == high:
                    return True
                if m not in seen and self.rank[m] < top:
                    seen.add(m)
                    stack.append(m)
        return False

    def _add_edge(self, x: int, y: int) -> None:
        """Edge x -> y, and the order repaired where it now points backwards (Pearce-Kelly)."""
        self.out[x].add(y)
        self.into[y].add(x)
        low, high = self.rank[y], self.rank[x]
        if low > high:
            return
        ahead = self._reach(y, self.out, lambda n: self.rank[n] < high)
        behind = self._reach(x, self.into, lambda n: self.rank[n] > low)
        moved = sorted(behind, key=self.rank.__getitem__) + sorted(ahead, key=self.rank.__getitem__)
        for n, r in zip(moved, sorted(self.rank[n] for n in moved)):
            self.rank[n] = r

    def union(self, a: int, b: int) -> None:
        """Contract the edge between groups ``a`` and ``b`` (``can_merge`` said yes)."""
        a, b = self.find(a), self.find(b)
        if len(self.out[a]) + len(self.into[a]) < len(self.out[b]) + len(self.into[b]):
            a, b = b, a  # keep the node with more edges; move the other's
        self.parent[b] = a
        moved_in, moved_out = self.into[b] - {a}, self.out[b] - {a}
        self.out[a].discard(b)
        self.into[a].discard(b)
        for x in self.into[b]:
            self.out[x].discard(b)
        for y in self.out[b]:
            self.into[y].discard(b)
        self.into[b], self.out[b] = set(), set()
        for x in moved_in:
            self._add_edge(x, a)
        for y in moved_out:
            self._add_edge(a, y)

    def can_merge(self, a: int, b: int) -> bool:
        a, b = self.find(a), self.find(b)
        if a == b:
            return False
        ca, cb = self.composites[a], self.composites[b]
        if ca.backend != cb.backend or ca.bind_constants != cb.bind_constants:
            return False
        return not self._other_path(a, b)


def merge_composite_functions(pg: PartitionedGraph) -> PartitionedGraph:
    """Merge adjacent composites of one backend into regions, as large as the no-cycle rule allows.

    A dataflow-order greedy pass joins each composite to the groups of its
    producers when no path between them leaves both; a sweep over the remaining
    same-backend edges then repeats until nothing more can merge, so no two
    regions joined by an edge could be merged without a cycle.
    """
    units = _UnitGraph(pg)
    n_comp = len(pg.composites)
    for u in units.order:
        if u >= n_comp:
            continue
        for p in sorted(units.preds[u], key=units.position.__getitem__):
            if p < n_comp and units.can_merge(p, u):
                units.union(p, u)
    changed = True
    while changed:
        changed = False
        for u in range(n_comp):
            for s in units.succs[u]:
                if s < n_comp and units.can_merge(u, s):
                    units.union(u, s)
                    changed = True

    groups: dict[int, list[Composite]] = {}
    for u in sorted(range(n_comp), key=units.position.__getitem__):  # dataflow order inside each region
        groups.setdefault(units.find(u), []).append(pg.composites[u])
    ordered = sorted(groups.values(), key=lambda cs: min(pg.position[id(c.nodes[0])] for c in cs))
    pg.regions = [_region(composites, pg) for composites in ordered]
    _renumber(pg)
    return pg


def drop_small_regions(pg: PartitionedGraph, min_region_size: dict[str, int] | int) -> list[Region]:
    """Give regions with fewer ops than their backend's minimum back to the host; return them."""

    def minimum(backend: str) -> int:
        return min_region_size if isinstance(min_region_size, int) else min_region_size.get(backend, 1)

    dropped = [r for r in pg.regions if len(r.nodes) < minimum(r.backend)]
    for r in dropped:
        for node in r.nodes:
            pg.refuse(node, r.backend, f"its region has {len(r.nodes)} ops, fewer than the {minimum(r.backend)} "
                      f"{r.backend} offloads (--min-region-size)")  # fmt: skip
    if dropped:
        gone = {id(c) for r in dropped for c in r.composites}
        pg.composites = [c for c in pg.composites if id(c) not in gone]
        pg.regions = [r for r in pg.regions if len(r.nodes) >= minimum(r.backend)]
        _renumber(pg)
    return dropped


def _renumber(pg: PartitionedGraph) -> None:
    """Region ids ``<backend>_<k>``, counted per backend in graph order."""
    per_backend: dict[str, int] = {}
    for region in pg.regions:
        k = per_backend.get(region.backend, 0)
        per_backend[region.backend] = k + 1
        region.id = f"{region.backend}_{k}"


def partition(
    graph: Graph, targets: Sequence[str], *, min_region_size: int | dict[str, int] | None = None
) -> PartitionedGraph:
    """Partition ``graph`` for ``targets`` (highest priority first; ``"host"`` takes the rest).

    Each backend's patterns run in turn on what the earlier ones left, with its
    own ``bind_constants``; adjacent composites merge into regions; a region
    smaller than ``min_region_size`` (default: each backend's own) is offered to
    the targets after its backend (partitioning again without it: TensorRT's
    five-op minimum would otherwise leave BERT's pooler on the host next to an
    onnxruntime target that takes single ops), and stays on the host when none
    takes it.
    """
    from aot.compiler.backends import get_compiler_backend

    backends = [get_compiler_backend(t) for t in targets if t != "host"]
    if min_region_size is None:
        min_region_size = {b.name: b.min_region_size for b in backends}
    declined: dict[str, list[Node]] = {b.name: [] for b in backends}  # nodes a backend's small regions held
    refused: list[tuple[Node, Refusal]] = []
    while True:
        pg = PartitionedGraph(graph)
        for node, refusal in refused:
            pg.refuse(node, refusal.source, refusal.reason)
        for backend in backends:
            fuse_ops_by_pattern(
                pg, backend.patterns(), bind_constants=backend.bind_constants, skip=declined[backend.name]
            )
        merge_composite_functions(pg)
        offered = [r for r in drop_small_regions(pg, min_region_size) if r.backend != backends[-1].name]
        if not offered:
            return pg
        for region in offered:
            declined[region.backend].extend(region.nodes)
            refused += [(n, r) for n in region.nodes for r in pg.refusals[id(n)] if r.backend == region.backend]


__all__ = [
    "Composite",
    "PartitionedGraph",
    "Refusal",
    "Region",
    "boundary",
    "drop_small_regions",
    "fuse_ops_by_pattern",
    "merge_composite_functions",
    "partition",
]
