"""Test stand-in for TensorRT's lean runtime module ``tensorrt_lean`` (see tests/standins/README.md).

The full stand-in without its builder and parser, and with a Runtime that, as the
lean runtime does, deserializes only version-compatible engines built with the lean
runtime excluded (and by its own TensorRT version).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_source = Path(__file__).resolve().parents[2] / "standins" / "tensorrt" / "__init__.py"
_spec = importlib.util.spec_from_file_location("_standin_tensorrt_for_lean", _source)
_full = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _full
_spec.loader.exec_module(_full)

__version__ = _full.__version__
Logger, DataType, TensorIOMode, BuilderFlag, nptype = (
    _full.Logger, _full.DataType, _full.TensorIOMode, _full.BuilderFlag, _full.nptype
)  # fmt: skip


class Runtime(_full.Runtime):
    lean = True
