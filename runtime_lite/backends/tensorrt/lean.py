"""Which TensorRT this process runs: the full library, else the lean runtime.

The lean runtime (``tensorrt-lean-cu13``: about 45 MB against the full library's
gigabyte) deserializes and runs engines but cannot build them, and it runs only
*version-compatible* engines built with the lean runtime *excluded*
(``BuilderFlag.VERSION_COMPATIBLE`` + ``BuilderFlag.EXCLUDE_LEAN_RUNTIME``, the
``--exclude-lean-runtime`` build option): such an engine carries no host code, so
loading it needs no trust opt-in, and the lean runtime that loads it must be the
TensorRT version that built it.

Its Python module is ``tensorrt_lean`` (the ``tensorrt-lean-cu13`` package), or
``tensorrt_lean_bindings`` where only the ``-bindings`` and ``-libs`` wheels are
installed. Creating a ``Runtime`` without a usable CUDA device does not fail in
Python: the lean bindings return an object around a null runtime, which crashes the
process when touched (seen with 10.16.1.11 on a machine without a GPU), so the
runner creates one only after the device probe has found a GPU.
"""

from __future__ import annotations

import importlib
from typing import Any

#: The modules tried in order, and which runtime each is.
CANDIDATES = (("tensorrt", "full"), ("tensorrt_lean", "lean"), ("tensorrt_lean_bindings", "lean"))


class TensorRTMissing(ImportError):
    """No TensorRT module imports here; the message lists what was tried."""


def import_tensorrt() -> tuple[Any, str]:
    """(the TensorRT module, "full" or "lean"): the full library where installed, else the lean runtime."""
    problems = []
    for name, runtime in CANDIDATES:
        try:
            return importlib.import_module(name), runtime
        except ImportError as e:
            problems.append(str(e))
    lean = ", ".join(name for name, runtime in CANDIDATES if runtime == "lean")
    raise TensorRTMissing(f"tensorrt is not installed ({problems[0]}), nor its lean runtime ({lean})")


def lean_misfit(tags: dict[str, Any], version: str) -> str | None:
    """Why the lean runtime of TensorRT ``version`` cannot run an engine with ``tags``, or None if it can."""
    if not (tags.get("version_compatible") and tags.get("exclude_lean_runtime")):
        return "the lean runtime runs only engines built with --version-compatible --exclude-lean-runtime"
    if tags.get("tensorrt") != version:
        return f"built with TensorRT {tags.get('tensorrt')}, the lean runtime here is {version}"
    return None


def can_build(trt: Any) -> bool:
    """The lean runtime has no builder: engines for it are built where the full TensorRT is installed."""
    return hasattr(trt, "Builder")
