"""Command-line values parsed into compiler options, each failure a one-line BuildError."""

from __future__ import annotations

import re
import sys

from aot.compiler.backends.tensorrt import TensorRTOptions
from aot.errors import BuildError
from runtime_lite.backends.tensorrt.engine_cache import EngineCache
from runtime_lite.backends.tensorrt.spec import BuildSettings

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30,
          "kb": 10**3, "mb": 10**6, "gb": 10**9}  # fmt: skip


def parse_size(text: str, option: str) -> int:
    """``512MiB``, ``1GiB``, ``2g``, ``1000000`` -> bytes."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not found or found.group(2).lower() not in _UNITS:
        raise BuildError(f"{option} must be a size such as 512MiB or 1GiB, got {text!r}")
    size = int(float(found.group(1)) * _UNITS[found.group(2).lower()])
    if size <= 0:
        raise BuildError(f"{option} must be positive, got {text!r}")
    return size


def parse_batch(text: str | None) -> tuple[int, int, int] | None:
    """``MIN:OPT:MAX`` (``8`` alone means 8:8:8)."""
    if text is None:
        return None
    parts = text.split(":")
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise BuildError(f"--batch must look like MIN:OPT:MAX, e.g. 1:8:32, got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def tensorrt_options(
    precision: str,
    workspace: str,
    batch: str | None,
    hardware_compatible: bool,
    version_compatible: bool,
    cache_dir: str | None,
    no_engines: bool,
    quiet: bool,
) -> TensorRTOptions:
    try:
        settings = BuildSettings(
            precision=precision,
            workspace=parse_size(workspace, "--workspace"),
            batch=parse_batch(batch),
            hardware_compatibility="ampere_plus" if hardware_compatible else "none",
            version_compatible=version_compatible,
        )
    except ValueError as e:
        raise BuildError(str(e).replace("batch range", "--batch")) from None
    return TensorRTOptions(
        settings=settings,
        engines="never" if no_engines else "auto",
        cache=EngineCache(cache_dir),
        progress=None if quiet else sys.stderr,
    )
