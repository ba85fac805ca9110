"""Compile-side backends: the half of a backend that claims ops and writes its payload.

The other half, with the same name, lives in ``runtime_lite.backends``. A
compiler backend says how to partition for it (its pattern prefix, whether
weights are baked into its payload, the smallest region worth offloading) and
how to turn a region into a payload (``codegen``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aot.compiler.pattern_registry import FusionPattern, get_patterns_with_prefix
from aot.errors import BuildError


@dataclass
class ModuleArtifact:
    """What codegen hands the packager: payload blobs by key, specs for ``init``, a summary for tools."""

    payloads: dict[str, bytes]
    compile_specs: dict[str, Any] = field(default_factory=dict)
    #: Lines for the build summary (what was not built, and why).
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CompilerBackend:
    name: str
    #: ``codegen(region, options)``: options are the backend's own (``build(backend_options=...)``), or None.
    codegen: Callable[..., ModuleArtifact]
    #: True: constants travel inside the payload; False: the host owns them and passes them in.
    bind_constants: bool = False
    #: Regions with fewer ops than this stay on the host: every switch of backend costs.
    min_region_size: int = 1

    def patterns(self) -> list[FusionPattern]:
        return get_patterns_with_prefix(self.name)


_BACKENDS: dict[str, CompilerBackend] = {}


def register_compiler_backend(backend: CompilerBackend) -> CompilerBackend:
    _BACKENDS[backend.name] = backend
    return backend


def get_compiler_backend(name: str) -> CompilerBackend:
    """The backend called ``name``; built-in ones register when their module is first imported."""
    if name not in _BACKENDS:
        try:
            importlib.import_module(f"aot.compiler.backends.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"aot.compiler.backends.{name}":
                raise
    try:
        return _BACKENDS[name]
    except KeyError:
        raise BuildError(f"no compiler backend called {name!r}") from None


__all__ = ["CompilerBackend", "ModuleArtifact", "get_compiler_backend", "register_compiler_backend"]
