"""The TensorRT backend, compile side: patterns, recipe codegen and (where a GPU is present) engines.

Importing it registers the patterns (``get_patterns_with_prefix("tensorrt")``) and
the backend. Weights are bound into the region (TensorRT bakes them into the
engine), and regions under five ops stay on the host: every switch between the
host and the GPU costs two copies, which a tiny engine does not earn back
(Torch-TensorRT's ``min_block_size`` is 5 for the same reason). Its options are
declared in ``options.py``. The run side is ``runtime_lite.backends.tensorrt``.
"""

from aot.compiler.backends import CompilerBackend, register_compiler_backend
from aot.compiler.backends.recipe import write_recipe
from aot.compiler.backends.tensorrt.codegen import TensorRTOptions, tensorrt_codegen
from aot.compiler.backends.tensorrt.options import OPTIONS, make_options, report
from aot.compiler.backends.tensorrt.patterns import int8_reason, register, tensorrt_patterns

register()
BACKEND = register_compiler_backend(
    CompilerBackend(
        "tensorrt",
        tensorrt_codegen,
        bind_constants=True,
        min_region_size=5,
        options=OPTIONS,
        make_options=make_options,
        report=report,
        int8=int8_reason,
    )
)

__all__ = ["BACKEND", "TensorRTOptions", "tensorrt_codegen", "tensorrt_patterns", "write_recipe"]
