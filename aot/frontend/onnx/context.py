"""What an ONNX op converter sees: the node, its inputs as IR values, and helpers.

``emit`` adds a canonical node and folds it at once when all its inputs are
constants, which is how shape arithmetic (Shape -> Gather -> Concat -> Reshape)
collapses to constants as the model is read, once input shapes are fixed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.errors import ShapeError, UnsupportedOpsError
from aot.frontend.onnx.dtypes import onnx_dtype_name
from aot.ir.graph import Graph, Value
from aot.passes.constant_folding import add_or_fold


class NodeContext:
    def __init__(
        self,
        graph: Graph,
        node: onnx.NodeProto,
        inputs: list[Value | None],
        opset: int,
        used_names: set[str] = frozenset(),
    ):
        self.graph = graph
        self.used_names = used_names
        self.node = node
        self.inputs = inputs
        self.opset = opset
        self.name = node.name or (node.output[0] if node.output else node.op_type)
        self._attrs = {a.name: a for a in node.attribute}

    # -- attributes ---------------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        proto = self._attrs.get(name)
        if proto is None:
            return default
        value = helper.get_attribute_value(proto)
        if isinstance(value, bytes):
            return value.decode("utf-8")
        if isinstance(value, onnx.TensorProto):
            return numpy_helper.to_array(value)
        if isinstance(value, list):
            return [v.decode("utf-8") if isinstance(v, bytes) else v for v in value]
        return value

    def extra_outputs_used(self) -> bool:
        """Whether anything reads an output past the first (training-only outputs, indices, masks)."""
        return any(name in self.used_names for name in self.node.output[1:] if name)

    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    # -- inputs -------------------------------------------------------------------------
    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def const(self, i: int) -> np.ndarray | None:
        v = self.input(i)
        return v.data if v is not None and v.is_constant else None

    def require_const(self, i: int, what: str) -> np.ndarray:
        v = self.input(i)
        if v is None:
            raise self.error(f"input '{what}' is missing")
        if not v.is_constant:
            raise UnsupportedOpsError(
                f"{self.node.op_type} '{self.name}': input '{what}' must be a constant once input shapes are fixed "
                f"(it is computed at run time; try fixing input shapes with --input NAME:SHAPE)"
            )
        return v.data

    def ints(self, i: int, what: str) -> list[int]:
        return [int(x) for x in self.require_const(i, what).reshape(-1)]

    def rank(self, i: int = 0) -> int:
        return self.inputs[i].type.rank

    def static_dims(self, i: int = 0) -> tuple[int, ...]:
        t = self.inputs[i].type
        if not t.is_static:
            raise UnsupportedOpsError(
                f"{self.node.op_type} '{self.name}': needs a static input shape, got {t} "
                f"(fix symbolic dims with --input NAME:SHAPE)"
            )
        return t.shape

    # -- building -----------------------------------------------------------------------
    def emit_node(self, op: str, inputs: list[Value], **attrs: Any) -> list[Value]:
        try:
            return add_or_fold(self.graph, op, inputs, attrs, self.name)
        except ShapeError as e:
            raise ShapeError(f"{self.node.op_type} node '{self.name}': {e}") from None

    def emit(self, op: str, *inputs: Value, **attrs: Any) -> Value:
        (out,) = self.emit_node(op, list(inputs), **attrs)
        return out

    def constant(self, data: Any, dtype: str | None = None) -> Value:
        array = np.asarray(data, dtype=dtype) if dtype else np.asarray(data)
        return self.graph.constant(array, name=f"{self.name}_const")

    def error(self, message: str) -> ShapeError:
        return ShapeError(f"{self.node.op_type} node '{self.name}': {message}")

    def unsupported(self, message: str) -> UnsupportedOpsError:
        return UnsupportedOpsError(f"{self.node.op_type} node '{self.name}': {message}")

    def dtype_attr(self, name: str, default: int | None = None) -> str:
        code = self.attr(name, default)
        try:
            return onnx_dtype_name(code)
        except ValueError as e:
            raise self.unsupported(str(e)) from None
