"""Frontends: turn models as users bring them into the IR."""

from aot.frontend.onnx import from_onnx
from aot.frontend.torch import from_exported_program, load_exported_program

__all__ = ["from_exported_program", "from_onnx", "load_exported_program"]
