"""The virtual NPU backend, compile side: patterns, dispatch planning and JSON codegen.

Importing it registers its patterns (``get_patterns_with_prefix("npu")``) and the
backend; the run side is ``runtime_lite.backends.npu``. Its options change the
device profile the dispatches are planned for (``--backend-option npu.macs_per_cycle=512``).
"""

import dataclasses
from typing import Any, TextIO

from aot.compiler.backends import CompilerBackend, register_compiler_backend
from aot.compiler.backends.npu.codegen import npu_codegen
from aot.compiler.backends.npu.device import DEFAULT_PROFILE, DeviceProfile
from aot.compiler.backends.npu.patterns import int8_reason, npu_patterns, register
from aot.compiler.backends.npu.transitions import partition_report
from aot.errors import BuildError
from runtime_lite.backends.options import Option, choice, integer

OPTIONS = (
    Option(
        "macs_per_cycle", integer, DEFAULT_PROFILE.macs_per_cycle, "multiply-accumulates per cycle of the CONV engine"
    ),
    Option(
        "int8_macs_per_cycle", integer, DEFAULT_PROFILE.int8_macs_per_cycle, "int8 MACs per cycle of CONV and MATRIX"
    ),
    Option("vector_lanes", integer, DEFAULT_PROFILE.vector_lanes, "lanes of the VECTOR engine"),
    Option("tile_start", integer, DEFAULT_PROFILE.tile_start, "first tile edge tried when an output exceeds L1"),
    Option("tile_floor", integer, DEFAULT_PROFILE.tile_floor, "smallest tile edge before the tiler gives up"),
    Option("switch_cycles", integer, DEFAULT_PROFILE.switch_cycles, "cycles one host<->npu switch costs"),
    Option(
        "precision", choice("fp32", "int8"), "fp32",
        "int8: quantized convolutions and matrix products run as integer kernels (needs --calibration)",
        flag="--precision",
    ),
    Option("calibration", str, None, "the calibration table's digest (set by the build when it quantizes)"),
)  # fmt: skip
_SETTINGS = ("precision", "calibration")


def make_options(values: dict[str, Any], log: TextIO | None) -> DeviceProfile:
    for name, value in values.items():
        if name not in _SETTINGS and (not isinstance(value, int) or value <= 0):
            raise BuildError(f"npu option {name} must be a positive integer, got {value!r}")
    return dataclasses.replace(DEFAULT_PROFILE, **values)


register()
BACKEND = register_compiler_backend(
    CompilerBackend(
        "npu",
        npu_codegen,
        bind_constants=False,
        min_region_size=1,
        options=OPTIONS,
        make_options=make_options,
        int8=int8_reason,
        partition_report=partition_report,
    )  # fmt: skip
)

__all__ = ["BACKEND", "DEFAULT_PROFILE", "DeviceProfile", "npu_codegen", "npu_patterns"]
