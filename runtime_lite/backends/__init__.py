"""The run-side backend contract, and the registry that finds backends by name.

A backend is the run-side half of a compiler backend. The interface is
ExecuTorch's ``BackendInterface`` reduced to what a Python runtime needs; every
backend, the built-in NPU and TensorRT ones included, subclasses :class:`Backend`:

* ``name``: the id bundles refer to;
* ``load_options``: the :class:`~runtime_lite.backends.options.Option`\\ s a deployment may set
  (``load(path, backend_options={name: {...}})``, ``--backend-option name.key=value``);
* ``is_available()``: whether this host can run it at all;
* ``init(context, payloads, compile_specs) -> handle``: prepare one module from its
  blobs; raise :class:`IncompatiblePayload` when the payload is not for this host;
* ``tensor_payloads``: the payloads ``init`` only hands on as numbers (weights), whose
  sha256 may still be running while it does (every other payload is verified first);
* ``execute(context, handle, inputs) -> outputs``: run it on numpy arrays (GPU arrays too where
  ``accepts_device_arrays``); when
  ``context.trace`` is a list (``Module.profile``) append one event (a dict) per dispatch;
* ``close(handle)``: release what ``init`` took (device memory, engines);
* ``describe(handle) -> Placement``: where the module runs (its backend, or e.g.
  ``"host"`` when a TensorRT region fell back), and why.

Built-in backends register on first use; third-party ones are found through the
``runtime_lite.backends`` entry-point group, so installing a package is enough
to make its backend loadable (``examples/byoc_plugin``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime_lite.backends.options import Option, OptionError, resolve_options
from runtime_lite.errors import IncompatiblePayload  # noqa: F401 (part of the backend contract)

ENTRY_POINT_GROUP = "runtime_lite.backends"


@dataclass(frozen=True)
class BackendContext:
    """What a backend gets besides its payload: its own load options and, when profiling, the trace."""

    #: This backend's load options, every declared one resolved (given or default).
    options: Mapping[str, Any] = field(default_factory=dict)
    #: A list to append dispatch events to while ``Module.profile`` runs; None otherwise.
    trace: list[dict[str, Any]] | None = None
    #: Every backend's load options as the caller gave them (resolved), by backend name: a backend that opens
    #: another's engine (TensorRT's recipe on onnxruntime) configures it as that backend's own modules are.
    given: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: The bundle's digest (it names every blob) where the load verifies the blobs, else None: what a backend
    #: may key a cache of things it derives from them by (onnxruntime's optimized graphs).
    bundle_digest: str | None = None
    #: The bundle's symbolic dims by name, with the bounds its signature declares (format/signature.DimSpec): a
    #: backend that picks sizes of its own (auto, timing its engines) stays within what the bundle accepts.
    dims: Mapping[str, Any] = field(default_factory=dict)

    def tracing(self, trace: list[dict[str, Any]] | None) -> BackendContext:
        return self if trace is None else dataclasses.replace(self, trace=trace)


@dataclass(frozen=True)
class Where:
    """Where one module runs, as its backend tells it: ``runs_on`` a name, ``detail`` why."""

    runs_on: str
    detail: str | None = None


class Backend:
    """Subclass this to bring a backend; override ``init`` and ``execute`` at least."""

    name: str = ""
    load_options: tuple[Option, ...] = ()
    #: Whether ``execute`` takes GPU arrays (runtime_lite.execution.device) as they are; a backend that
    #: does not gets numpy arrays, converted once at the boundary by the plan.
    accepts_device_arrays: bool = False
    #: Payloads (by key) that ``init`` only views as arrays of numbers and hands on as data (weights to a
    #: numeric library), never parses as structure (records, graphs, engines, recipes): while ``init``
    #: runs, their sha256 may still be computing on a background thread (runtime_lite/format/hashing.py);
    #: ``load`` waits for it before it returns and, on a mismatch, closes the module and raises the same
    #: BundleError. Declare a payload only if nothing in ``init`` trusts its bytes, i.e. if a hostile bundle
    #: handing the same bytes with a valid checksum could do no more. The default, none: every payload is
    #: verified before ``init`` sees it.
    tensor_payloads: frozenset[str] = frozenset()

    def is_available(self) -> bool:
        return True

    def init(self, context: BackendContext, payloads: dict[str, memoryview], compile_specs: dict[str, Any]) -> Any:
        raise NotImplementedError(f"backend {self.name!r} does not implement init")

    def execute(self, context: BackendContext, handle: Any, inputs: Sequence[np.ndarray]) -> Sequence[np.ndarray]:
        raise NotImplementedError(f"backend {self.name!r} does not implement execute")

    def close(self, handle: Any) -> None:
        """Release what ``init`` took; called once per module by ``Module.close``."""

    def output_shapes(self, handle: Any) -> list[tuple[int, ...]] | None:
        """The shapes ``execute`` returns, where the module fixes and enforces them; None where it does not.
        The load follows them to check the plan's outputs against the signature before any run."""
        return None

    def verified(self, handle: Any) -> None:
        """Called once the load verified every blob (the ``tensor_payloads`` hashed while ``init`` ran): what a
        module derived from them may now outlive the load (a cache entry). Not called on a failed load."""

    def check_constant_inputs(self, handle: Any, constants: dict[int, np.ndarray]) -> None:
        """Refuse (BundleError) a call whose inputs, known at load as the host plan's constants, the module
        cannot use (``constants`` by input position): so a bundle is refused at load, not at its first run."""

    def describe(self, handle: Any) -> Where:
        return Where(self.name)


_REGISTRY: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    """Make ``backend`` available under ``backend.name``; a later registration replaces an earlier one."""
    if not isinstance(backend, Backend):
        raise TypeError(f"{backend!r} is not a runtime_lite.backends.Backend; subclass it to bring a backend")
    if not isinstance(backend.name, str) or not backend.name:
        raise TypeError(f"backend {type(backend).__name__} has no name")
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
    try:
        backend = entry.load()
        backend = backend() if isinstance(backend, type) else backend
        return register_backend(backend)
    except Exception as e:  # a broken plugin must not take the load down with a traceback
        raise ImportError(f"backend plugin {name!r} ({entry.value}) failed to load: {type(e).__name__}: {e}") from None


#: Backends shipped with runtime_lite, imported on first use so ``import runtime_lite`` stays cheap.
BUILTIN_BACKENDS = {
    "npu": "runtime_lite.backends.npu",
    "tensorrt": "runtime_lite.backends.tensorrt",
    "onnxruntime": "runtime_lite.backends.onnxruntime",
    "openvino": "runtime_lite.backends.openvino",
    "auto": "runtime_lite.backends.auto",
}


def get_backend(name: str) -> Backend | None:
    """The backend called ``name``: registered, built in, or found in installed entry points."""
    if name not in _REGISTRY and name in BUILTIN_BACKENDS:
        importlib.import_module(BUILTIN_BACKENDS[name])
    return _REGISTRY.get(name) or _from_entry_points(name)


def available_backends() -> list[str]:
    return sorted(set(_REGISTRY) | set(BUILTIN_BACKENDS) | set(_installed_entry_points()))


def resolve_backend_options(given: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Each named backend's options, checked against what it declares; a name no backend has is refused."""
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise OptionError(f"backend_options must map backend names to their options, got {type(given).__name__}")
    resolved = {}
    for name, options in given.items():
        backend = get_backend(name) if isinstance(name, str) else None
        if backend is None:
            raise OptionError(
                f"backend_options names {name!r}, which is not installed (installed: {', '.join(available_backends())})"
            )
        resolved[name] = resolve_options(name, backend.load_options, options)
    return resolved


def context_for(backend: Backend, resolved: Mapping[str, dict[str, Any]]) -> BackendContext:
    """The context ``init`` and ``execute`` get: the backend's options as given, else its defaults."""
    options = resolved.get(backend.name)
    if options is None:
        options = resolve_options(backend.name, backend.load_options, None)
    return BackendContext(options, given=resolved)


__all__ = [
    "Backend",
    "BackendContext",
    "IncompatiblePayload",
    "Where",
    "available_backends",
    "context_for",
    "get_backend",
    "register_backend",
    "resolve_backend_options",
]
