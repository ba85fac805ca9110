"""The ONNX frontend (opsets 9-21, read with the ``onnx`` package)."""

from aot.frontend.onnx.converters import SUPPORTED_OP_TYPES
from aot.frontend.onnx.importer import from_onnx, load_model

__all__ = ["SUPPORTED_OP_TYPES", "from_onnx", "load_model"]
