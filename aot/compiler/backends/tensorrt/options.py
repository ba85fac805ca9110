"""The TensorRT backend's build options, declared once for ``build()``, ``--backend-option`` and the aliases."""

from __future__ import annotations

import re
from typing import Any, TextIO

from aot.compiler.backends.tensorrt.codegen import TensorRTOptions
from aot.errors import BuildError
from runtime_lite.backends.options import Option, accepting, boolean, choice, path
from runtime_lite.backends.tensorrt.engine_cache import EngineCache
from runtime_lite.backends.tensorrt.spec import DEFAULT_WORKSPACE, PRECISIONS, BuildSettings

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30,
          "kb": 10**3, "mb": 10**6, "gb": 10**9}  # fmt: skip


def _is_size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"expected a positive number of bytes, got {type(value).__name__}")
    return value


def _is_batch(value: Any) -> tuple[int, int, int]:
    if not (isinstance(value, (tuple, list)) and len(value) == 3):
        raise ValueError("expected (MIN, OPT, MAX)")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise ValueError("expected (MIN, OPT, MAX) positive integers")
    return tuple(value)


@accepting(_is_size)
def parse_size(text: str) -> int:
    """``512MiB``, ``1GiB``, ``2g``, ``1000000`` -> bytes."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not found or found.group(2).lower() not in _UNITS:
        raise ValueError("expected a size such as 512MiB or 1GiB")
    size = int(float(found.group(1)) * _UNITS[found.group(2).lower()])
    if size <= 0:
        raise ValueError("must be positive")
    return size


@accepting(_is_batch)
def parse_batch(text: str) -> tuple[int, int, int]:
    """``MIN:OPT:MAX`` (``8`` alone means 8:8:8)."""
    parts = text.split(":")
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise ValueError("expected MIN:OPT:MAX, e.g. 1:8:32")
    return int(parts[0]), int(parts[1]), int(parts[2])


OPTIONS = (
    Option("precision", choice(*PRECISIONS), "fp32", "precision written into each recipe (fp16: fp16 weights, "
           "casts at the region boundary; int8: explicit Q/DQ from calibration, needs --calibration)",
           flag="--precision"),
    Option("workspace", parse_size, DEFAULT_WORKSPACE, "builder workspace limit, e.g. 512MiB", flag="--workspace"),
    Option("batch", parse_batch, None, "optimization profile MIN:OPT:MAX for a symbolic batch dim", flag="--batch"),
    Option("hardware_compatible", boolean, False, "engines that run on any Ampere or newer GPU (AMPERE_PLUS)",
           flag="--hardware-compatible", flag_value=True),
    Option("version_compatible", boolean, False, "engines later TensorRT versions can run; they embed host code, "
           "so loading one needs an opt-in", flag="--version-compatible", flag_value=True),
    Option("exclude_lean_runtime", boolean, False, "with --version-compatible: leave the lean runtime out of the "
           "engine (no host code inside); runs where runtime-lite[tensorrt-lean] of the same TensorRT is installed",
           flag="--exclude-lean-runtime", flag_value=True),
    Option("cache_dir", path, None, "engine cache shared with deployed runtimes (default: $AOT_CACHE_DIR, else "
           "the XDG cache dir)", flag="--cache-dir"),
    Option("engines", choice("auto", "never"), "auto", "build engines where this machine has TensorRT and a GPU "
           "(auto), or write recipes only (never)", flag="--no-engines", flag_value="never",
           flag_help="write ONNX recipes only and build no engine, even where TensorRT and a GPU are present"),
    Option("calibration", str, None, "the calibration table's digest (set by the build when it quantizes; "
           "part of the engine cache key)"),
)  # fmt: skip


def make_options(values: dict[str, Any], log: TextIO | None) -> TensorRTOptions:
    try:
        settings = BuildSettings(
            precision=values["precision"],
            workspace=values["workspace"],
            batch=values["batch"],
            hardware_compatibility="ampere_plus" if values["hardware_compatible"] else "none",
            version_compatible=values["version_compatible"],
            exclude_lean_runtime=values["exclude_lean_runtime"],
            calibration=values["calibration"],
        )
    except ValueError as e:
        raise BuildError(f"tensorrt options: {e}") from None
    return TensorRTOptions(settings, values["engines"], EngineCache(values["cache_dir"]), log)


def report(options: TensorRTOptions) -> list[str]:
    stats = options.cache.stats
    return [f"engine cache {options.cache.root}: {stats.hits} hits, {stats.misses} misses, {stats.builds} built"]
