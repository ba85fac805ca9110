"""The onnxruntime backend, compile side: every op the recipe writer can lower, one recipe per region.

As ExecuTorch delegates CPU work to XNNPACK: ``--target onnxruntime`` puts the
regions onnxruntime can run (usually the whole model) into modules whose recipe
runs on onnxruntime's CPU provider where it is installed at deployment, and on
the region's host plan where it is not. Weights travel in the module's payloads
(bound, as for TensorRT), but once: the recipe's initializers point at the host
plan's blobs. The run side is ``runtime_lite.backends.onnxruntime``; its session
options (threads, graph optimization, memory arena) are load options, chosen
where the bundle is deployed, so this half declares none.
"""

from aot.compiler.backends import CompilerBackend, register_compiler_backend
from aot.compiler.backends.onnxruntime.codegen import onnxruntime_codegen
from aot.compiler.backends.onnxruntime.lowerings import ONNXRUNTIME_EXPORTS
from aot.compiler.backends.onnxruntime.patterns import onnxruntime_patterns, register

register()
BACKEND = register_compiler_backend(
    CompilerBackend("onnxruntime", onnxruntime_codegen, bind_constants=True, min_region_size=1)
)

__all__ = ["BACKEND", "ONNXRUNTIME_EXPORTS", "onnxruntime_codegen", "onnxruntime_patterns"]
