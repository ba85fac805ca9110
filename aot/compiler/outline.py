"""Replace each region of a partitioned graph by one ``call_module`` node.

After this the graph is what the host runs: its own ops plus one call per
region, reading the region's inputs and defining its outputs (the same
``Value`` objects, so nothing downstream changes). The host plan lowers a
``call_module`` node to the instruction that hands those values to the backend.
"""

from __future__ import annotations

from aot.compiler.partition import PartitionedGraph
from aot.ir.graph import Node

CALL_MODULE = "call_module"


def outline_regions(pg: PartitionedGraph) -> list[Node]:
    """Rewrite ``pg.graph`` in place; region ``k`` becomes ``call_module {module=k}``. Returns the calls."""
    graph = pg.graph
    region_of = pg.region_of()
    calls: dict[int, Node] = {}
    nodes: list[Node] = []
    for k, region in enumerate(pg.regions):
        call = Node(CALL_MODULE, graph.unique_name(region.id, "node"), list(region.inputs), {"module": k})
        call.outputs = list(region.outputs)
        for value in call.outputs:
            value.producer = call
        calls[id(region)] = call
    placed: set[int] = set()
    for node in graph.nodes:
        region = region_of.get(id(node))
        if region is None:
            nodes.append(node)
        elif id(region) not in placed:
            placed.add(id(region))
            nodes.append(calls[id(region)])
    graph.nodes = nodes
    graph.toposort()  # the call sits where the region began; ops it waits for move ahead of it
    return list(calls.values())
