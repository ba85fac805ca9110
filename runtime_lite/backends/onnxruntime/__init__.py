"""The onnxruntime backend, run side: a region's recipe on onnxruntime's CPU provider, else its host plan.

An onnxruntime module record (``aot-build --target onnxruntime``) carries:

* ``recipe``: the region as ONNX with no weights inside: every initializer is an
  external-data placeholder;
* ``fallback`` + ``fallback_weights``: the region's host plan and its constants
  (runtime_lite/backends/fallback.py);
* ``recipe_weights``: the few arrays only the recipe needs (most recipes have none).

At ``init`` the recipe is checked (``recipe_check``: no external-data paths,
allow-listed default-domain ops, bounded opset and size) and, where onnxruntime
is installed, one InferenceSession is built with the recipe's initializers bound
to read-only views of the bundle's blobs, so the weights are stored once, in the
bundle, and handed to onnxruntime without a copy. Where onnxruntime is not
installed the region runs its host plan and logs why, once; ``load(...,
require=("onnxruntime",))`` refuses instead. ``describe`` says which.

Nothing here imports onnxruntime until an onnxruntime module is loaded
(``session.py`` does, inside a function).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime_lite.backends import Backend, BackendContext, Where, register_backend
from runtime_lite.backends.fallback import bind_fallback, fallback_constants
from runtime_lite.backends.onnxruntime.footprint import Footprint
from runtime_lite.backends.onnxruntime.known_bugs import wrong_on
from runtime_lite.backends.onnxruntime.recipe_check import check_recipe
from runtime_lite.backends.onnxruntime.session import (
    OPTIMIZATION_LEVELS,
    OnnxRuntimeUnavailable,
    Session,
    SessionSettings,
    import_onnxruntime,
)
from runtime_lite.backends.onnxruntime.spec import OnnxRuntimeSpecs
from runtime_lite.backends.options import Option, accepting, boolean, choice
from runtime_lite.errors import BundleError, OptionError
from runtime_lite.execution.plan import HostPlan
from runtime_lite.format.signature import TensorSpec

logger = logging.getLogger("runtime_lite.onnxruntime")

SPECS_FIELD = "onnxruntime.compile_specs"


def _thread_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a thread count (0: onnxruntime's default), got {type(value).__name__}")
    if value < 0:
        raise ValueError("must be 0 (onnxruntime's default) or more")
    return value


@accepting(_thread_count)
def threads(text: str) -> int:
    """A thread count: 0 (onnxruntime's default, one per physical core) or more."""
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError("expected a thread count (0: onnxruntime's default)") from None
    return _thread_count(value)


#: What a deployment may set at load: ``load(path, backend_options={"onnxruntime": {...}})``.
LOAD_OPTIONS = (
    Option("threads", threads, 0, "intra-op threads of each session (0: onnxruntime's default, one per core)"),
    Option(
        "optimization",
        choice(*OPTIMIZATION_LEVELS),
        "all",
        f"onnxruntime's graph optimization level ({'|'.join(OPTIMIZATION_LEVELS)})",
    ),
    Option("arena", boolean, True, "onnxruntime's CPU memory arena (off: memory goes back between runs)"),
    Option(
        "enabled",
        boolean,
        True,
        "false: never hand the recipe to onnxruntime, run the host plan",
    ),
    Option(
        "spinning",
        boolean,
        True,
        "intra-op threads spin between runs (onnxruntime's default); false: they sleep, leaving the cores to "
        "other work between requests",
    ),
)


def session_settings(options: dict[str, Any]) -> SessionSettings:
    """The load options as session settings; OptionError naming the option for a value of the wrong kind."""
    count, level, arena, enabled = options["threads"], options["optimization"], options["arena"], options["enabled"]
    spinning = options["spinning"]
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise OptionError(f"onnxruntime option threads={count!r}: must be an integer, 0 or more")
    if level not in OPTIMIZATION_LEVELS:
        raise OptionError(
            f"onnxruntime option optimization={level!r}: expected one of {', '.join(OPTIMIZATION_LEVELS)}"
        )
    for name, value in (("arena", arena), ("enabled", enabled), ("spinning", spinning)):
        if not isinstance(value, bool):
            raise OptionError(f"onnxruntime option {name}={value!r}: must be true or false")
    return SessionSettings(count, level, arena, enabled, spinning)


def recipe_weights(
    payloads: dict[str, memoryview], specs: OnnxRuntimeSpecs, fallback: list[np.ndarray], field: str = SPECS_FIELD
):
    """Each recipe initializer's array, a read-only view into the bundle: name -> array (errors name ``field``,
    the module record's compile specs: the OpenVINO backend reads the same record under its own name)."""
    recipe_only = [
        c.view(payloads.get("recipe_weights"), f"{field}.recipe_constants[{i}]")
        for i, c in enumerate(specs.recipe_constants)
    ]
    sources = {"fallback_weights": fallback, "recipe_weights": recipe_only}
    weights = {}
    for i, ref in enumerate(specs.weights):
        arrays = sources[ref.payload]
        if ref.constant >= len(arrays):
            raise BundleError(
                f"bundle field '{field}.weights[{i}].constant' = {ref.constant}, but {ref.payload} "
                f"holds {len(arrays)} constants"
            )
        if ref.name in weights:
            raise BundleError(f"bundle field '{field}.weights[{i}].name': {ref.name!r} is named twice")
        weights[ref.name] = arrays[ref.constant]
    return weights


def recipe_session(
    recipe: memoryview, weights: dict[str, np.ndarray], inputs, outputs, settings: SessionSettings, where: str
) -> Session:
    """A session over ``recipe`` once it passed the check (OnnxRuntimeUnavailable where onnxruntime is missing,
    where the check could not follow a shape onnxruntime would check statically (shapes.py), or where it could
    not bound a run's memory (footprint.py), or where this onnxruntime computes one of its nodes wrongly
    (known_bugs.py))."""
    facts = check_recipe(recipe, weights, where)
    input_names, output_names = [s.name for s in inputs], [s.name for s in outputs]
    if not settings.enabled:  # Session says so; no shape walk or version check for a recipe never run
        return Session(bytes(recipe), weights, input_names, output_names, settings)
    if facts.unverified is not None:
        raise OnnxRuntimeUnavailable(f"the recipe check could not verify its geometry ({facts.unverified})")
    footprint = Footprint(
        facts.inputs, facts.dims, facts.operands, facts.nodes, facts.types, input_names, output_names, facts.shapes
    )
    if footprint.unbounded is not None:
        raise OnnxRuntimeUnavailable(f"the recipe check could not bound its memory ({footprint.unbounded})")
    version = import_onnxruntime().__version__
    wrong = wrong_on(version, facts.nodes, facts.shapes)
    if wrong is not None:
        raise OnnxRuntimeUnavailable(f"this is onnxruntime {version}, and {wrong}")
    return Session(bytes(recipe), weights, input_names, output_names, settings, footprint)


class OnnxRuntimeModule:
    """One region, resolved at load to an onnxruntime session or its host plan."""

    def __init__(self, payloads: dict[str, memoryview], specs: dict[str, Any], options: dict[str, Any]):
        record = OnnxRuntimeSpecs.from_record(specs, SPECS_FIELD)  # IncompatiblePayload for another format
        settings = session_settings(options)
        self.id = record.region
        self.inputs: tuple[TensorSpec, ...] = record.inputs
        self.outputs: tuple[TensorSpec, ...] = record.outputs
        if "recipe" not in payloads:
            raise BundleError(f"bundle field 'onnxruntime.payloads': module {self.id!r} has no 'recipe' payload")
        plan, constants = fallback_constants(payloads, self.id, "onnxruntime")
        #: The recipe's initializers the bundle supplies, by name: read-only views of its blobs.
        self.weights = weights = recipe_weights(payloads, record, constants)
        start = time.perf_counter()
        try:
            self.session: Session | None = recipe_session(
                payloads["recipe"], weights, self.inputs, self.outputs, settings, "onnxruntime.payloads.recipe"
            )
            self.placement = (
                f"on onnxruntime {self.session.version} (CPU, {settings.threads or 'default'} threads, "
                f"session built in {time.perf_counter() - start:.2f} s)"
            )
        except OnnxRuntimeUnavailable as e:
            self.session, self.placement = None, f"on the host: {e}"
        #: "onnxruntime" with a session, "host" on the fallback plan (the module's load warns or refuses).
        self.runs_on = "onnxruntime" if self.session is not None else "host"
        #: The host plan, checked and bound only where it runs: a session never needs it (load time).
        self.fallback = None if self.session is not None else self._bind(plan, constants)
        logger.info("onnxruntime region %s runs %s", self.id, self.placement)

    def _bind(self, plan, constants: list[np.ndarray]) -> HostPlan:
        return bind_fallback(plan, constants, self.id, "onnxruntime", (len(self.inputs), len(self.outputs)))

    def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.close()

    def run(self, inputs: Sequence[np.ndarray], trace: list | None = None) -> list[np.ndarray]:
        start = time.perf_counter() if trace is not None else 0.0
        session = self.session
        outputs = session.run(inputs) if session is not None else self.fallback.execute(list(inputs))
        if trace is not None:
            trace.append(
                {"backend": "onnxruntime", "module": self.id, "node": self.id, "placement": self.runs_on,
                 "start_s": start, "wall_s": time.perf_counter() - start}
            )  # fmt: skip
        return outputs


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    load_options = LOAD_OPTIONS
    #: The weights: ``init`` views them as arrays by the (verified) records of ``fallback`` and the compile
    #: specs, and hands them to onnxruntime as initializer data; the recipe check reads their dtype and
    #: shape from those records, never their values. So their sha256 may finish while the session is built.
    tensor_payloads = frozenset({"fallback_weights", "recipe_weights"})

    def is_available(self) -> bool:
        return True  # without onnxruntime a region runs its host plan

    def init(self, context: BackendContext, payloads: dict[str, memoryview], compile_specs: dict[str, Any]):
        return OnnxRuntimeModule(payloads, compile_specs, dict(context.options))

    def execute(self, context: BackendContext, handle: OnnxRuntimeModule, inputs: Sequence[np.ndarray]):
        return handle.run(inputs, context.trace)

    def close(self, handle: OnnxRuntimeModule) -> None:
        handle.close()

    def describe(self, handle: OnnxRuntimeModule) -> Where:
        return Where(handle.runs_on, handle.placement)


BACKEND = register_backend(OnnxRuntimeBackend())

__all__ = ["BACKEND", "LOAD_OPTIONS", "OnnxRuntimeBackend", "OnnxRuntimeModule", "recipe_session"]
