"""The IR: a typed dataflow graph of canonical ops.

A ``Value`` is an edge: a graph input, a constant (it holds ``data``) or an output
of a ``Node``. Nodes are kept in topological order; every node's output types are
inferred from the op registry the moment it is added, so a frontend always knows
the shape of what it has built so far (and can fold shape arithmetic on the fly).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from aot.errors import ShapeError
from aot.ir.names import NamePool
from aot.ir.ops import InferContext, get_op
from aot.ir.types import TensorType


class Value:
    __slots__ = ("name", "type", "producer", "data")

    def __init__(self, name: str, type: TensorType, producer: Node | None = None, data: np.ndarray | None = None):
        self.name = name
        self.type = type
        self.producer = producer
        self.data = data

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


class Node:
    __slots__ = ("op", "name", "inputs", "outputs", "attrs")

    def __init__(self, op: str, name: str, inputs: list[Value], attrs: dict[str, Any]):
        self.op = op
        self.name = name
        self.inputs = inputs
        self.outputs: list[Value] = []
        self.attrs = attrs

    def __repr__(self) -> str:
        return f"<Node {self.name}: {self.op}>"


_NAME_SAFE = re.compile(r"[^A-Za-z0-9_./:-]")


class Graph:
    def __init__(self, name: str = "main"):
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.nodes: list[Node] = []
        self._names: dict[str, NamePool] = {"value": NamePool(), "node": NamePool()}
        self._unknown_dims = itertools.count()
        self._derived_dims: dict[tuple, str] = {}
        #: Facts about where the graph came from (frontend, opset, node count), for summaries.
        self.metadata: dict[str, Any] = {}
        #: The inputs' symbolic dims by name: where each came from and its bounds (aot/ir/dims.py).
        self.dims: dict[str, Any] = {}
        #: With every symbolic input dim bounded: each value's shape at the bounds' minimum and at their maximum,
        #: by id (aot/compiler/worst_case.py ``shapes_at_bounds``); TensorRT's profiles come from it.
        self.shape_bounds: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    # -- naming -------------------------------------------------------------------------
    def unique_name(self, base: str, kind: str = "value") -> str:
        return self._names[kind].take(_NAME_SAFE.sub("_", base) or "v")

    def fresh_dim(self, key: tuple | None = None) -> str:
        """A new symbol; with ``key`` (how a dim is derived: op, input dim, constants), the same symbol for
        the same derivation, so two branches that compute one size from one input agree (a residual add's
        operands then have one shape, and the memory planner may write it in place)."""
        if key is None:
            return f"?{next(self._unknown_dims)}"
        derived = self._derived_dims.get(key)
        if derived is None:
            derived = self._derived_dims[key] = f"?{next(self._unknown_dims)}"
        return derived

    # -- construction -------------------------------------------------------------------
    def add_input(self, name: str, type: TensorType) -> Value:
        value = Value(self.unique_name(name), type)
        self.inputs.append(value)
        return value

    def constant(self, data: Any, name: str = "const") -> Value:
        array = np.asarray(data)
        if array.dtype == np.float64 and not isinstance(data, np.ndarray):
            array = array.astype(np.float32)
        return Value(self.unique_name(name), TensorType(array.shape, array.dtype.name), data=array)

    def add_node(
        self, op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None, name: str | None = None
    ) -> Node:
        """Append a node; attributes are checked and completed with defaults, outputs typed."""
        opdef = get_op(op)
        node_name = self.unique_name(name or op, "node")
        attrs = opdef.complete_attrs(attrs or {}, node_name)
        opdef.check_arity(len(inputs), node_name)
        node = Node(op, node_name, list(inputs), attrs)
        types = opdef.infer(InferContext([v.type for v in inputs], attrs, self.fresh_dim, node_name, inputs))
        for i, t in enumerate(types):
            out_name = node_name if len(types) == 1 else f"{node_name}:{i}"
            node.outputs.append(Value(self.unique_name(out_name), t, producer=node))
        self.nodes.append(node)
        return node

    def op(self, op: str, *inputs: Value, name: str | None = None, **attrs: Any) -> Value:
        """Add a single-output node and return its value: ``g.op("relu", x)``."""
        node = self.add_node(op, inputs, attrs, name)
        if len(node.outputs) != 1:
            raise ShapeError(f"{op} '{node.name}' has {len(node.outputs)} outputs; use add_node")
        return node.outputs[0]

    # -- queries ------------------------------------------------------------------------
    def consumers(self) -> dict[Value, list[Node]]:
        users: dict[Value, list[Node]] = {}
        for node in self.nodes:
            for v in node.inputs:
                users.setdefault(v, []).append(node)
        return users

    def constants(self) -> list[Value]:
        """Every constant value referenced by a node or an output, in first-use order."""
        seen: dict[int, Value] = {}
        for v in itertools.chain((v for n in self.nodes for v in n.inputs), self.outputs):
            if v.is_constant and id(v) not in seen:
                seen[id(v)] = v
        return list(seen.values())

    def values(self) -> Iterator[Value]:
        yield from self.inputs
        yield from self.constants()
        for node in self.nodes:
            yield from node.outputs

    # -- rewriting ----------------------------------------------------------------------
    def replace_uses(self, old: Value, new: Value, nodes: Iterable[Node] | None = None) -> None:
        for node in self.nodes if nodes is None else nodes:
            node.inputs = [new if v is old else v for v in node.inputs]
        self.outputs = [new if v is old else v for v in self.outputs]

    def toposort(self) -> None:
        """Restore topological order after a rewrite appended nodes out of place."""
        producers = {id(o): n for n in self.nodes for o in n.outputs}
        order: list[Node] = []
        state: dict[int, int] = {}
        for root in self.nodes:
            stack = [(root, False)]
            while stack:
                node, expanded = stack.pop()
                key = id(node)
                if expanded:
                    state[key] = 2
                    order.append(node)
                    continue
                if state.get(key) == 2:
                    continue
                if state.get(key) == 1:
                    raise ShapeError(f"the graph has a cycle through node '{node.name}' ({node.op})")
                state[key] = 1
                stack.append((node, True))
                for v in reversed(node.inputs):
                    producer = producers.get(id(v))
                    if producer is not None and state.get(id(producer)) != 2:
                        if state.get(id(producer)) == 1:
                            raise ShapeError(f"the graph has a cycle through node '{producer.name}' ({producer.op})")
                        stack.append((producer, False))
        self.nodes = order

    def __str__(self) -> str:
        from aot.ir.printer import format_graph

        return format_graph(self)
