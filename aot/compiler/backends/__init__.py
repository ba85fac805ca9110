"""The compile-side backend contract: what a backend claims and how it writes its payload.

The other half, with the same name, lives in ``runtime_lite.backends``. A
compiler backend is a :class:`CompilerBackend` value:

* its **patterns**, registered in ``aot.compiler.pattern_registry`` under
  ``"<name>.<what>"`` (with priorities, and checks that say why they reject);
* ``codegen(region, options) -> ModuleArtifact``: payload blobs and compile specs;
* ``bind_constants``: whether weights travel inside its payload (True) or stay
  with the host plan and are passed in (False);
* ``min_region_size``: regions with fewer ops stay on the host;
* ``options``: the :class:`~runtime_lite.backends.options.Option`\\ s its codegen accepts
  (``aot-build --backend-option NAME.KEY=VALUE``, ``build(backend_options=...)``),
  and ``make_options`` turning them into the object ``codegen`` takes;
* ``report``: optional lines for the build summary (e.g. the engine cache's hits);
* ``partition_report``: optional lines about how the graph was cut for it (transitions, host islands);
* ``int8``: which ops it computes in int8 when a build quantizes (docs/quantization.md), and
  ``int8_scheme``: how it wants the Q/DQ written (``aot.compiler.quantize.insert.Int8Scheme``).

Built-in backends live in ``aot.compiler.backends.<name>``; a backend from another
package is found through the ``aot.backends`` entry-point group, whose value is its
``CompilerBackend`` (``examples/byoc_plugin``). Both go through the same registry.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from aot.compiler.pattern_registry import FusionPattern, get_patterns_with_prefix
from aot.errors import BuildError
from runtime_lite.backends.options import Option, resolve_options
from runtime_lite.errors import OptionError

ENTRY_POINT_GROUP = "aot.backends"
#: Backends shipped with aot, imported on first use.
BUILTIN_BACKENDS = ("npu", "tensorrt", "onnxruntime", "openvino", "auto")


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
    #: ``codegen(region, options)``: options are what ``make_options`` made of the caller's, or None.
    codegen: Callable[..., ModuleArtifact]
    #: True: constants travel inside the payload; False: the host owns them and passes them in.
    bind_constants: bool = False
    #: Regions with fewer ops than this stay on the host: every switch of backend costs.
    min_region_size: int = 1
    #: The options codegen accepts, each with its parser, default and help.
    options: tuple[Option, ...] = ()
    #: ``make_options(values, log)``: the resolved option values (and where to log progress, or None
    #: when quiet) as the object codegen takes; without it codegen gets the values dict.
    make_options: Callable[[dict[str, Any], TextIO | None], Any] | None = None
    #: ``report(options)``: extra lines for the build summary once codegen ran.
    report: Callable[[Any], list[str]] | None = None
    #: ``partition_report(partitioned, options)``: summary lines about how the graph was cut for this
    #: backend (the NPU's host<->device transitions and host islands); it may add refusals to print.
    partition_report: Callable[[Any, Any], list[str]] | None = None
    #: ``int8(node)``: why this backend keeps ``node`` in float, or None when it computes it in int8
    #: (``aot.compiler.quantize``); None: the backend has no int8 path.
    int8: Callable[[Any], str | None] | None = None
    #: How its int8 kernels want the Q/DQ written (an ``Int8Scheme``, or a function of its configured options that
    #: gives one); None: the symmetric scheme. A build whose
    #: int8 targets ask for different schemes writes the symmetric one, which every int8 target reads.
    int8_scheme: Any = None

    def patterns(self) -> list[FusionPattern]:
        return get_patterns_with_prefix(self.name)

    def configure(self, given: Any, log: TextIO | None = None) -> Any:
        """The caller's options as codegen takes them: a mapping (or None) is resolved, anything else passes."""
        if given is not None and not isinstance(given, Mapping):
            return given  # already the backend's own options object, e.g. TensorRTOptions(...)
        try:
            values = resolve_options(self.name, self.options, given)
        except OptionError as e:
            raise BuildError(str(e)) from None
        return self.make_options(values, log) if self.make_options else values


_BACKENDS: dict[str, CompilerBackend] = {}


def register_compiler_backend(backend: CompilerBackend) -> CompilerBackend:
    """Make ``backend`` a target; a later registration under the same name replaces an earlier one."""
    if not isinstance(backend, CompilerBackend):
        raise TypeError(f"{backend!r} is not an aot.compiler.backends.CompilerBackend")
    if not backend.name or "." in backend.name or backend.name == "host":
        raise ValueError(f"backend name {backend.name!r} must be non-empty, without '.', and not 'host'")
    _BACKENDS[backend.name] = backend
    return backend


@functools.cache
def _installed_entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {entry.name: entry for entry in entry_points(group=ENTRY_POINT_GROUP)}


def _from_entry_point(name: str) -> None:
    entry = _installed_entry_points().get(name)
    if entry is None:
        return
    try:
        backend = entry.load()
        register_compiler_backend(
            backend() if callable(backend) and not isinstance(backend, CompilerBackend) else backend
        )
    except Exception as e:  # a broken plugin is a one-line build error, not a traceback
        raise BuildError(f"backend plugin {name!r} ({entry.value}) failed to load: {type(e).__name__}: {e}") from None


def get_compiler_backend(name: str) -> CompilerBackend:
    """The backend called ``name``: registered, built in, or from an installed package's entry point."""
    if name not in _BACKENDS:
        if name in BUILTIN_BACKENDS:
            importlib.import_module(f"aot.compiler.backends.{name}")
        else:
            _from_entry_point(name)
    try:
        return _BACKENDS[name]
    except KeyError:
        raise BuildError(
            f"no compiler backend called {name!r} (installed: {', '.join(available_compiler_backends())})"
        ) from None


def available_compiler_backends() -> list[str]:
    """Every backend a build may target besides the host: built in, registered, or installed as a plugin."""
    return sorted(set(BUILTIN_BACKENDS) | set(_BACKENDS) | set(_installed_entry_points()))


__all__ = [
    "CompilerBackend",
    "ModuleArtifact",
    "available_compiler_backends",
    "get_compiler_backend",
    "register_compiler_backend",
]
