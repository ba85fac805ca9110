"""Constant folding with the runtime's own kernels, so folded values match run-time ones."""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Graph, Node, Value
from runtime_lite.kernels import KERNELS, get_kernel

#: Integer types a ``dequantize`` of a constant keeps: the weight stays stored in it (see ``keeps_integer_weight``).
QUANTIZED_DTYPES = frozenset({"int8", "uint8", "int16", "uint16", "int32"})


def keeps_integer_weight(node: Node) -> bool:
    """A ``dequantize`` of a constant integer tensor (a quantized model's weight or int32 bias): it stays a node.

    Folded, it would store the weight as float32 (4x the bytes) and hide from every backend that the model
    computes it in int8; kept, the bundle stores the integer weight, onnxruntime's QDQ fusions see
    ``DequantizeLinear(int8 initializer)`` and the host plan dequantizes it once, at its first run (plan.py).
    """
    return node.op == "dequantize" and node.inputs[0].is_constant and node.inputs[0].type.dtype in QUANTIZED_DTYPES


def is_foldable(node: Node) -> bool:
    """All inputs constant, and a host kernel to compute it (an onnxruntime contrib op has none); a
    dequantized integer weight is not folded (``keeps_integer_weight``)."""
    return node.op in KERNELS and all(v.is_constant for v in node.inputs) and not keeps_integer_weight(node)


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
