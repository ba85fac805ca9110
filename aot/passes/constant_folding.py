"""Constant folding with the runtime's own kernels, so folded values match run-time ones."""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Graph, Node, Value
from runtime_lite.kernels import KERNELS, get_kernel


def is_foldable(node: Node) -> bool:
    """All inputs constant, and a host kernel to compute it (an onnxruntime contrib op has none)."""
    return node.op in KERNELS and all(v.is_constant for v in node.inputs)


def fold_node(node: Node) -> list[Value]:
    """Evaluate a node whose inputs are all constants; return one constant Value per output."""
    kernel = get_kernel(node.op)
    with np.errstate(all="ignore"):
        result = kernel.fn(*[v.data for v in node.inputs], **node.attrs)
    results = list(result) if isinstance(result, tuple) else [result]
    folded = []
    for out, array in zip(node.outputs, results):
        # Own the bytes: a view of a constant would keep the whole weight alive for a slice of it.
        array = np.array(array, dtype=out.type.dtype, order="C", copy=True)
        folded.append(Value(out.name, out.type.with_shape(array.shape), data=array))
    return folded


def add_or_fold(graph: Graph, op: str, inputs: list[Value], attrs: dict, name: str) -> list[Value]:
    """Add a node, or, when all its inputs are constants, its folded outputs instead.

    Frontends call this while reading a model, so shape arithmetic and weight
    transposes collapse to constants as they are met.
    """
    node = graph.add_node(op, inputs, attrs, name=name)
    if is_foldable(node):
        graph.nodes.pop()
        return fold_node(node)
    return node.outputs


def fold_constants(graph: Graph) -> int:
    """Fold every node whose inputs are all constant, in one topological sweep; return values folded."""
    users = graph.consumers()
    replaced: dict[Value, Value] = {}
    kept = []
    for node in graph.nodes:
        if not is_foldable(node):
            kept.append(node)
            continue
        for out, value in zip(node.outputs, fold_node(node)):
            replaced[out] = value
            for user in users.get(out, ()):
                user.inputs = [value if v is out else v for v in user.inputs]
    graph.nodes = kept
    graph.outputs = [replaced.get(v, v) for v in graph.outputs]
    return len(replaced)
