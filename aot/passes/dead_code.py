"""Dead-code elimination: drop nodes none of whose outputs reach a graph output."""

from __future__ import annotations

from aot.ir.graph import Graph


def eliminate_dead_code(graph: Graph) -> int:
    live = {id(v) for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if any(id(o) in live for o in node.outputs):
            kept.append(node)
            live.update(id(v) for v in node.inputs)
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept[::-1]
    return removed
