"""The compiler's intermediate representation: typed dataflow graphs of canonical ops."""

from aot.ir import contrib, ml_ops  # noqa: F401 (register onnxruntime_contrib and the tree ensembles)
from aot.ir.graph import Graph, Node, Value
from aot.ir.ops import OPS, get_op
from aot.ir.types import TensorType, parse_shape

__all__ = ["Graph", "Node", "OPS", "TensorType", "Value", "get_op", "parse_shape"]
