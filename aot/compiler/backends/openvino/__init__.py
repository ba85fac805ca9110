"""The OpenVINO backend, compile side: the onnxruntime backend's recipes, for OpenVINO's CPU plugin.

A region for OpenVINO is written exactly as one for onnxruntime
(aot/compiler/backends/onnxruntime): the same ops are admitted (OpenVINO's ONNX reader
takes every op they admit), the same ONNX recipe is written with its large weights as
placeholders for the host plan's own blobs (stored once), checked by the run side's
reader before it is written, and the same compile specs record says where each weight
lies (aot/compiler/backends/cpu_recipe.py). Only the module's backend name differs, so
the run side (``runtime_lite.backends.openvino``) hands the recipe to OpenVINO, falling
back to the region's host plan where OpenVINO is not installed. Threads, the performance
hint and the precision are load options, chosen where the bundle is deployed.
"""

from aot.compiler.backends.cpu_recipe import register_recipe_backend

BACKEND = register_recipe_backend("openvino")
openvino_codegen = BACKEND.codegen

__all__ = ["BACKEND", "openvino_codegen"]
