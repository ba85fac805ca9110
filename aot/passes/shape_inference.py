"""Re-infer every node's output types, in order, from the graph inputs.

Nodes are typed when created; this pass is for after the fact: when a user fixes
input shapes on an existing graph, or after a rewrite, to re-check that every
node still type-checks and to propagate the new dims.
"""

from __future__ import annotations

from aot.ir.graph import Graph
from aot.ir.ops import InferContext, get_op


def infer_shapes(graph: Graph) -> None:
    for node in graph.nodes:
        ctx = InferContext([v.type for v in node.inputs], node.attrs, graph.fresh_dim, node.name, node.inputs)
        for value, t in zip(node.outputs, get_op(node.op).infer(ctx)):
            value.type = t
