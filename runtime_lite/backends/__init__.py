"""The runtime backend registry: what executes a ``call_module`` instruction.

A backend is the run-side half of a compiler backend (ExecuTorch's
BackendInterface, reduced to what a Python runtime needs):

* ``name``: the id bundles refer to;
* ``is_available()``: whether this host can run it at all (a GPU, a library);
* ``init(payloads, compile_specs) -> handle``: prepare one module from its blobs,
  raising :class:`IncompatiblePayload` when the payload is not for this host; a
  backend whose ``init`` also takes ``options`` receives the caller's
  :class:`LoadOptions` (engine cache, whether it may build engines);
* ``execute(handle, inputs) -> outputs``: run it on numpy arrays; a backend whose
  ``execute`` also takes ``trace`` appends one event (a dict) per dispatch to it
  when the caller profiles (``Module.profile``).

Built-in backends register themselves on import; third-party ones are found
through the ``runtime_lite.backends`` entry-point group, so installing a package
is enough to make its backend loadable.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

ENTRY_POINT_GROUP = "runtime_lite.backends"


class IncompatiblePayload(Exception):
    """A backend cannot use this payload here (other hardware, other library version)."""


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class LoadOptions:
    """What the deployment allows backends to do at load (``runtime_lite.load`` keywords)."""

    #: Build a missing engine from the bundle's recipe into the engine cache (default: $AOT_ALLOW_ENGINE_BUILD).
    allow_engine_build: bool = field(default_factory=lambda: _env_flag("AOT_ALLOW_ENGINE_BUILD"))
    #: The engine cache directory (default: $AOT_CACHE_DIR, else the XDG cache dir).
    cache_dir: str | os.PathLike[str] | None = None
    #: Load version-compatible TensorRT engines, which run host code embedded in the engine.
    allow_version_compatible: bool = False


class Backend(Protocol):
    name: str

    def is_available(self) -> bool: ...

    def init(self, payloads: dict[str, memoryview], compile_specs: dict[str, Any]) -> Any: ...

    def execute(self, handle: Any, inputs: Sequence[np.ndarray]) -> Sequence[np.ndarray]: ...


_REGISTRY: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    """Make ``backend`` available under ``backend.name``; a later registration replaces an earlier one."""
    _REGISTRY[backend.name] = backend
    return backend


@functools.cache
def _installed_entry_points() -> dict[str, Any]:
    """The ``runtime_lite.backends`` entry points, read once per process.

    Reading them walks every installed distribution's metadata; a bundle naming an
    unknown backend must not make each load pay that again.
    """
    from importlib.metadata import entry_points

    return {entry.name: entry for entry in entry_points(group=ENTRY_POINT_GROUP)}


def _from_entry_points(name: str) -> Backend | None:
    entry = _installed_entry_points().get(name)
    if entry is None:
        return None
    backend = entry.load()
    backend = backend() if isinstance(backend, type) else backend
    return register_backend(backend)


#: Backends shipped with runtime_lite, imported on first use so ``import runtime_lite`` stays cheap.
BUILTIN_BACKENDS = {"npu": "runtime_lite.backends.npu", "tensorrt": "runtime_lite.backends.tensorrt"}


def get_backend(name: str) -> Backend | None:
    """The backend called ``name``: registered, built in, or found in installed entry points."""
    if name not in _REGISTRY and name in BUILTIN_BACKENDS:
        importlib.import_module(BUILTIN_BACKENDS[name])
    return _REGISTRY.get(name) or _from_entry_points(name)


def available_backends() -> list[str]:
    return sorted(set(_REGISTRY) | set(BUILTIN_BACKENDS) | set(_installed_entry_points()))
