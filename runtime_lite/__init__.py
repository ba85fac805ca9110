"""runtime_lite: run aot bundles with numpy and msgpack, no compiler installed.

import runtime_lite
module = runtime_lite.load("model.aotb")
outputs = module.run({"input": array})
"""

from runtime_lite.errors import BundleError, ExecutionError, InputError, OptionError, PlacementError, RuntimeLiteError
from runtime_lite.execution.module import Module, check_bundle, load
from runtime_lite.format.signature import TensorSpec
from runtime_lite.version import __version__

__all__ = [
    "BundleError",
    "ExecutionError",
    "InputError",
    "Module",
    "OptionError",
    "PlacementError",
    "RuntimeLiteError",
    "TensorSpec",
    "__version__",
    "check_bundle",
    "load",
]
