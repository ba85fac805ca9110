"""How the graph was cut for the NPU: host<->device transitions, the bytes they move, what they cost.

Every backend call is two switches (the host hands the region its activations, the
NPU hands back its outputs), and every byte crosses the DRAM the two share. A
*host island* (host ops with NPU regions on both sides) is what splits one region
into two: each is reported with the reason its ops stayed on the host, and the
reason is recorded under the op so ``--print-graph`` shows it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aot.compiler.backends.npu.device import DeviceProfile
from aot.compiler.partition import PartitionedGraph, Region
from aot.compiler.pattern import root_ops
from aot.compiler.pattern_registry import get_patterns_with_prefix
from aot.ir.graph import Node

BACKEND = "npu"
#: Islands listed in the summary (the smallest first); --print-graph shows every op of every island.
MAX_ISLANDS_LISTED = 5


@dataclass(frozen=True)
class Transitions:
    calls: int
    #: Activation bytes the host hands the NPU and the NPU hands back, over all calls.
    to_device: int
    to_host: int
    cycles: int

    @property
    def switches(self) -> int:
        return 2 * self.calls


def transitions(pg: PartitionedGraph, profile: DeviceProfile) -> Transitions:
    """The cost model's estimate: a fixed cost per switch plus the bytes over DRAM's bandwidth.

    Weights are not counted: they stay resident on a device after the first call.
    """
    regions = [r for r in pg.regions if r.backend == BACKEND]
    to_device = sum(v.type.nbytes for r in regions for v in r.inputs if not v.is_constant)
    to_host = sum(v.type.nbytes for r in regions for v in r.outputs)
    dram = profile.tiers[-1].bandwidth
    cycles = 2 * len(regions) * profile.switch_cycles + math.ceil((to_device + to_host) / dram)
    return Transitions(len(regions), to_device, to_host, cycles)


@dataclass
class Island:
    nodes: list[Node]
    before: list[Region]
    after: list[Region]


def host_islands(pg: PartitionedGraph) -> list[Island]:
    """Connected groups of host ops that read from an NPU region and feed one."""
    region_of = pg.region_of()
    # the partition's own producers: outlining later re-points region outputs at the call_module node
    producer = {id(o): n for n in pg.nodes for o in n.outputs}
    host = [n for n in pg.nodes if id(n) not in region_of]
    parent = {id(n): id(n) for n in host}

    def find(u: int) -> int:
        while parent[u] != u:
            parent[u] = parent[parent[u]]
            u = parent[u]
        return u

    for node in host:
        for v in node.inputs:
            if id(v) in producer and id(producer[id(v)]) in parent:
                parent[find(id(producer[id(v)]))] = find(id(node))
    groups: dict[int, Island] = {}
    for node in host:
        island = groups.setdefault(find(id(node)), Island([], [], []))
        island.nodes.append(node)
        for v in node.inputs:
            region = region_of.get(id(producer[id(v)])) if id(v) in producer else None
            if region is not None and region.backend == BACKEND and region not in island.before:
                island.before.append(region)
        for o in node.outputs:
            for user in pg.consumers.get(o, ()):
                region = region_of.get(id(user))
                if region is not None and region.backend == BACKEND and region not in island.after:
                    island.after.append(region)
    return [i for i in groups.values() if i.before and i.after]


def _reason(pg: PartitionedGraph, node: Node, supported: set[str]) -> str:
    refusals = [r for r in pg.refusals.get(id(node), ()) if r.backend == BACKEND]
    if refusals:
        return refusals[0].reason
    if node.op not in supported:
        return f"no npu pattern for {node.op}"
    return "no npu pattern matched it"


def partition_report(pg: PartitionedGraph, profile: DeviceProfile) -> list[str]:
    """Summary lines: the transitions and their estimated cost, then the host islands and why they exist."""
    t = transitions(pg, profile)
    lines = [
        f"{t.switches} host<->npu transitions ({t.calls} backend call{'s' if t.calls != 1 else ''}) move "
        f"{t.to_device:,} B in and {t.to_host:,} B out: est. {t.cycles:,} cycles "
        f"({profile.switch_cycles:,} per switch + bytes / {profile.tiers[-1].bandwidth} B/cycle of DRAM)"
    ]
    supported = set().union(*(root_ops(p.pattern) or () for p in get_patterns_with_prefix(BACKEND)))
    islands = sorted(host_islands(pg), key=lambda i: len(i.nodes))
    reasons = {id(n): _reason(pg, n, supported) for i in islands for n in i.nodes}
    for island in islands:
        between = " and ".join(r.id for r in (*island.before, *island.after))
        for node in island.nodes:
            if not any(r.backend == BACKEND for r in pg.refusals.get(id(node), ())):
                pg.refuse(node, BACKEND, f"{reasons[id(node)]}: a host island between {between}")
    for island in islands[:MAX_ISLANDS_LISTED]:
        between = ", ".join(r.id for r in island.before) + " -> " + ", ".join(r.id for r in island.after)
        ops = "; ".join(f"{n.op} '{n.name}' ({reasons[id(n)]})" for n in island.nodes[:3])
        more = f"; {len(island.nodes) - 3} more ops" if len(island.nodes) > 3 else ""
        lines.append(f"host island {between}: {ops}{more}")
    if len(islands) > MAX_ISLANDS_LISTED:
        lines.append(f"{len(islands) - MAX_ISLANDS_LISTED} more host islands (--print-graph shows each op)")
    return lines
