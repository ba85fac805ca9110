"""Frontends: turn models as users bring them into the IR."""

from aot.frontend.onnx import from_onnx

__all__ = ["from_onnx"]
