"""aot: the ahead-of-time compiler that packs a model into one runtime_lite bundle.

import aot
result = aot.build("model.onnx", input_shapes={"images": (1, 3, 224, 224)})
result.save("model.aotb")
"""

from aot.compiler import BuildResult, QuantizeConfig, build
from aot.errors import AotError, BuildError, ModelError, ShapeError, UnsupportedOpsError
from aot.frontend import from_onnx
from aot.ir import Graph, TensorType
from runtime_lite.version import __version__

__all__ = [
    "AotError",
    "BuildError",
    "BuildResult",
    "Graph",
    "ModelError",
    "QuantizeConfig",
    "ShapeError",
    "TensorType",
    "UnsupportedOpsError",
    "__version__",
    "build",
    "from_onnx",
]
