"""A readable text form of a graph, one node per line.

    graph main(%x: float32[1,3,32,32]) -> (%probs: float32[1,10])
      %conv1 = conv2d(%x, @w1: float32[8,3,3,3], @b1: float32[8]) {strides=[1,1], ...} : float32[1,8,32,32]
      ...
      return %probs

Constants print as ``@name`` with their type (scalars with their value), so the
text never dumps weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aot.ir.graph import Graph, Node, Value


def format_attr(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_attr(v) for v in value) + "]"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def format_value(value: Value) -> str:
    if value.is_constant:
        if value.data.size == 1 and value.data.ndim <= 1:
            return f"@{value.name}={format_attr(value.data.reshape(-1)[0].item())}"
        return f"@{value.name}: {value.type}"
    return f"%{value.name}"


def format_node(node: Node) -> str:
    outs = ", ".join(f"%{o.name}" for o in node.outputs)
    args = ", ".join(format_value(v) for v in node.inputs)
    attrs = ", ".join(f"{k}={format_attr(v)}" for k, v in node.attrs.items())
    types = ", ".join(str(o.type) for o in node.outputs)
    return f"{outs} = {node.op}({args})" + (f" {{{attrs}}}" if attrs else "") + f" : {types}"


def format_graph(graph: Graph) -> str:
    params = ", ".join(f"%{v.name}: {v.type}" for v in graph.inputs)
    results = ", ".join(f"{format_value(v)}: {v.type}" for v in graph.outputs)
    lines = [f"graph {graph.name}({params}) -> ({results})"]
    lines.extend("  " + format_node(node) for node in graph.nodes)
    lines.append("  return " + ", ".join(format_value(v) for v in graph.outputs))
    return "\n".join(lines)
