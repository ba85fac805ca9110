"""What an ATen converter sees: one FX node's arguments, bound by name to IR values and Python values."""

from __future__ import annotations

from typing import Any

import numpy as np

from aot.errors import ShapeError, UnsupportedOpsError
from aot.ir.graph import Graph, Value
from aot.passes.constant_folding import add_or_fold

TORCH_DTYPES = {
    "torch.float32": "float32",
    "torch.float16": "float16",
    "torch.float64": "float64",
    "torch.int64": "int64",
    "torch.int32": "int32",
    "torch.int16": "int16",
    "torch.int8": "int8",
    "torch.uint8": "uint8",
    "torch.bool": "bool",
}


class SymbolicSize:
    """A size known only at run time (``x.size(0)`` under a dynamic dim): torch's symbol, and the
    int64 IR value of shape [1] that computes it, so shapes built from it (``arange(seq)``,
    ``expand(b, s)``) still follow the input at run time. Shape [1], not 0-d: numpy turns 0-d
    results into scalars, which the runtime cannot write into."""

    def __init__(self, symbol: str, value: Value):
        self.symbol = symbol
        self.value = value

    def __repr__(self) -> str:
        return self.symbol


def numpy_dtype(torch_dtype: Any) -> str:
    name = TORCH_DTYPES.get(str(torch_dtype))
    if name is None:
        raise UnsupportedOpsError(f"dtype {torch_dtype} is not supported")
    return name


class AtenContext:
    """One ATen call: ``ctx["weight"]`` is its argument by schema name, ``ctx.emit`` adds IR ops."""

    def __init__(self, graph: Graph, node: Any, args: dict[str, Any]):
        self.graph = graph
        self.node = node
        self.name = node.name
        self.args = args

    def __getitem__(self, name: str) -> Any:
        return self.args[name]

    def get(self, name: str, default: Any = None) -> Any:
        value = self.args.get(name, default)
        return default if value is None else value

    def emit(self, op: str, *inputs: Value, **attrs: Any) -> Value:
        """Add an IR op; one whose inputs are all constants is folded at once (weights' permutes, etc.)."""
        try:
            (out,) = add_or_fold(self.graph, op, list(inputs), attrs, self.name)
        except ShapeError as e:
            raise ShapeError(f"ATen {self.op_name} node '{self.name}': {e}") from None
        return out

    def constant(self, data: Any, dtype: str) -> Value:
        return self.graph.constant(np.asarray(data, dtype=dtype), name=f"{self.name}_const")

    def emit_all(self, op: str, *inputs: Value, **attrs: Any) -> list[Value]:
        """``emit`` for an op with several outputs (split, topk)."""
        return add_or_fold(self.graph, op, list(inputs), attrs, self.name)

    def size(self, size: int | SymbolicSize) -> Value:
        """A size as an int64 value of shape [1]: a constant, or the run-time value behind a symbol."""
        return size.value if isinstance(size, SymbolicSize) else self.constant([int(size)], "int64")

    def scalar(self, size: int | SymbolicSize) -> Value:
        """A size as a 0-d int64 value, for ops that take scalars (range)."""
        return self.emit("reshape", self.size(size), shape=[])

    def dim(self, x: Value, axis: int) -> Value:
        """``x.size(axis)`` as an int64 value of shape [1] (a constant when the dim is static)."""
        d = x.type.shape[axis]
        if isinstance(d, int):
            return self.constant([d], "int64")
        return self.emit("slice", self.emit("shape", x), starts=[axis], ends=[axis + 1], axes=[0], steps=[1])

    def floor_divide(self, a: Value, b: Value) -> Value:
        """``a // b`` of int64 sizes (mostly >= 0): a - a mod b is an exact multiple of b."""
        return self.emit("divide", self.emit("subtract", a, self.emit("mod", a, b, fmod=0)), b)

    def shape_tensor(self, sizes: list[Any]) -> Value:
        """A 1-d int64 shape from ints and run-time sizes (for reshape, expand, constant_of_shape)."""
        if not any(isinstance(s, SymbolicSize) for s in sizes):
            return self.constant([int(s) for s in sizes], "int64")
        return self.emit("concat", *[self.size(s) for s in sizes], axis=0)

    def tensor(self, value: Any, like: Value) -> Value:
        """A Python scalar as a constant of ``like``'s dtype, a run-time size (``x * x.shape[1]``) as its 0-d value
        in that dtype (tensors pass through)."""
        if isinstance(value, SymbolicSize):
            size = self.emit("reshape", value.value, shape=[])
            return size if like.type.dtype == "int64" else self.emit("cast", size, to=like.type.dtype)
        return value if isinstance(value, Value) else self.constant(value, like.type.dtype)

    @property
    def op_name(self) -> str:
        return str(self.node.target)

    def unsupported(self, message: str) -> UnsupportedOpsError:
        return UnsupportedOpsError(f"ATen {self.op_name} node '{self.name}': {message}")


def ntuple(value: Any, n: int) -> list[int]:
    """Torch's int-or-list arguments (``stride=2``, ``padding=[1]``) as a list of ``n``."""
    if isinstance(value, (list, tuple)):
        values = [int(v) for v in value]
        return values * n if len(values) == 1 else values
    return [int(value)] * n
