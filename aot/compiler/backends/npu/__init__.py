"""The virtual NPU backend, compile side: patterns, dispatch planning and JSON codegen.

Importing it registers its patterns (``get_patterns_with_prefix("npu")``) and the
backend; the run side is ``runtime_lite.backends.npu``.
"""

from aot.compiler.backends import CompilerBackend, register_compiler_backend
from aot.compiler.backends.npu.codegen import npu_codegen
from aot.compiler.backends.npu.device import DEFAULT_PROFILE, DeviceProfile
from aot.compiler.backends.npu.patterns import npu_patterns, register

register()
BACKEND = register_compiler_backend(CompilerBackend("npu", npu_codegen, bind_constants=False, min_region_size=1))

__all__ = ["BACKEND", "DEFAULT_PROFILE", "DeviceProfile", "npu_codegen", "npu_patterns"]
