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

An int8 recipe (``aot-build --target onnxruntime --precision int8``) runs on onnxruntime's
integer kernels where this CPU has an 8-bit dot product (VNNI), and on float kernels with
its int8 weights where it has not (``int8.py``); ``describe`` says which, and why.

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
from runtime_lite.backends.onnxruntime.int8 import EMULATED_KERNELS, INT8_CHOICES, Int8Kernels, kernels_here
from runtime_lite.backends.onnxruntime.known_bugs import wrong_on
from runtime_lite.backends.onnxruntime.recipe_check import CONTRIB_OP, check_recipe
from runtime_lite.backends.onnxruntime.session import (
    OPTIMIZATION_LEVELS,
    OnnxRuntimeUnavailable,
    Session,
    SessionSettings,
    import_onnxruntime,
)
from runtime_lite.backends.onnxruntime.spec import OnnxRuntimeSpecs
from runtime_lite.backends.options import Option, boolean, choice, env_choice, env_flag, path, thread_count
from runtime_lite.errors import BundleError, OptionError, PlacementError
from runtime_lite.execution.plan import HostPlan
from runtime_lite.format.signature import TensorSpec

logger = logging.getLogger("runtime_lite.onnxruntime")

SPECS_FIELD = "onnxruntime.compile_specs"
#: The recipe payload each int8 kernel choice runs, the first of these the bundle has, else ``recipe`` (a dynamic
#: recipe's float forms; a bundle written before ``recipe_emulated`` runs ``recipe_float`` there).
FORMS_BY_KERNELS = {"float": ("recipe_float",), "emulated": ("recipe_emulated", "recipe_float")}


def recipe_form(payloads: dict[str, memoryview], kernels: str | None) -> str:
    """The payload that holds the recipe form for ``kernels`` (an int8 recipe's; None for a float recipe)."""
    return next((form for form in FORMS_BY_KERNELS.get(kernels or "", ()) if form in payloads), "recipe")


threads = thread_count("onnxruntime's default, one per physical core")

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
    Option(
        "graph_cache",
        boolean,
        env_flag("AOT_ONNXRUNTIME_GRAPH_CACHE", False),
        "keep the graph onnxruntime optimized on this host in the cache (authenticated, checked) and open it from "
        "there at later loads of a verified bundle (default: $AOT_ONNXRUNTIME_GRAPH_CACHE, else false: on 2 cores "
        "hashing the kept weights cost more than it saved, docs/onnxruntime.md)",
    ),
    Option("cache_dir", path, None, "the cache directory (default: $AOT_CACHE_DIR, else the XDG cache dir)"),
    Option(
        "int8",
        choice(*INT8_CHOICES),
        env_choice("AOT_ONNXRUNTIME_INT8", INT8_CHOICES),
        "an int8 recipe's kernels: auto (integer where the CPU has VNNI or another 8-bit dot product, else float), "
        "integer, float (int8 weights dequantized at load, activations in float: float speed) or emulated (the "
        "quantized function exactly, on float kernels) (default: $AOT_ONNXRUNTIME_INT8, else auto)",
    ),
)


def session_settings(options: dict[str, Any]) -> SessionSettings:
    """The load options as session settings; OptionError naming the option for a value of the wrong kind."""
    count, level, arena, enabled = options["threads"], options["optimization"], options["arena"], options["enabled"]
    spinning, int8 = options["spinning"], options["int8"]
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise OptionError(f"onnxruntime option threads={count!r}: must be an integer, 0 or more")
    if level not in OPTIMIZATION_LEVELS:
        raise OptionError(
            f"onnxruntime option optimization={level!r}: expected one of {', '.join(OPTIMIZATION_LEVELS)}"
        )
    for name, value in (("arena", arena), ("enabled", enabled), ("spinning", spinning)):
        if not isinstance(value, bool):
            raise OptionError(f"onnxruntime option {name}={value!r}: must be true or false")
    if int8 not in INT8_CHOICES:
        raise OptionError(f"onnxruntime option int8={int8!r}: expected one of {', '.join(INT8_CHOICES)}")
    return SessionSettings(count, level, arena, enabled, spinning, int8)


def load_settings(options: dict[str, Any] | None) -> SessionSettings:
    """The onnxruntime load options as given to ``load`` (its defaults where none were): every session the
    bundle opens takes them, a TensorRT recipe's fallback session too."""
    from runtime_lite.backends.options import resolve_options

    return session_settings(options if options is not None else resolve_options("onnxruntime", LOAD_OPTIONS, None))


def int8_kernels(settings: SessionSettings) -> Int8Kernels:
    """The kernels an int8 recipe runs on: by the CPU and the ``int8`` option, unless the optimization level
    leaves the Q/DQ unfused (onnxruntime fuses them at ``extended`` and ``all``)."""
    if settings.optimization in ("disable", "basic"):
        folded = "weights dequantized once at load" if settings.optimization == "basic" else "weights dequantized "\
                 "at every run"  # fmt: skip
        why = f"onnxruntime.optimization={settings.optimization} fuses and drops no Q/DQ ({folded})"
        return Int8Kernels("emulated", why, dict(EMULATED_KERNELS))
    return kernels_here(settings.int8)


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
    recipe: memoryview,
    weights: dict[str, np.ndarray],
    inputs,
    outputs,
    settings: SessionSettings,
    where: str,
    int8: Int8Kernels | None = None,
    place: Any = None,
) -> Session:
    """A session over ``recipe`` once it passed the check (OnnxRuntimeUnavailable where onnxruntime is missing,
    where the check could not follow a shape onnxruntime would check statically (shapes.py), or where it could
    not bound a run's memory (footprint.py), or where this onnxruntime computes one of its nodes wrongly
    (known_bugs.py)). ``int8``: the kernels of an int8 recipe (``int8_kernels``). ``place``: where the region's
    optimized graph is kept (optimized.py ``GraphPlace``); the session's ``pending_graph`` then makes and keeps
    it, once the load is verified."""
    facts = check_recipe(recipe, weights, where)
    input_names, output_names = [s.name for s in inputs], [s.name for s in outputs]
    if not settings.enabled:  # Session says so; no shape walk or version check for a recipe never run
        return Session(bytes(recipe), weights, input_names, output_names, settings)
    if facts.unverified is not None:
        raise OnnxRuntimeUnavailable(f"the recipe check could not verify its geometry ({facts.unverified})")
    alive = [*output_names, *facts.outputs]  # onnxruntime keeps every graph output to the end, fetched or not
    footprint = Footprint(
        facts.inputs, facts.dims, facts.operands, facts.nodes, facts.types, input_names, alive, facts.shapes
    )
    if footprint.unbounded is not None:
        raise OnnxRuntimeUnavailable(f"the recipe check could not bound its memory ({footprint.unbounded})")
    version = import_onnxruntime().__version__
    wrong = wrong_on(version, facts.nodes, facts.shapes)
    if wrong is not None:
        raise OnnxRuntimeUnavailable(f"this is onnxruntime {version}, and {wrong}")
    config, disabled = (int8.config, int8.disabled) if int8 is not None else (None, ())
    if place is None:
        return Session(bytes(recipe), weights, input_names, output_names, settings, footprint, config, disabled,
                       placeholders=facts.placeholder_at)  # fmt: skip
    from runtime_lite.backends.onnxruntime.optimized import cached_session  # where the graph cache is on

    return cached_session(
        place, recipe, weights, input_names, output_names, settings, footprint, config, disabled, version,
        facts.placeholder_at,
    )  # fmt: skip


def region_session(
    payloads: dict[str, memoryview], weights: dict[str, np.ndarray], inputs, outputs, settings: SessionSettings,
    int8: Int8Kernels | None, backend: str, place: Any = None,
) -> Session:  # fmt: skip
    """A session over the region's recipe in the form ``int8``'s kernels run (``recipe_form``: a dynamically
    quantized recipe's MatMulInteger runs on integer kernels whatever the session says, so float kernels take its
    float form, emulated ones the quantized function on float kernels); ``backend`` names the payload fields in
    errors. OnnxRuntimeUnavailable as ``recipe_session``."""
    field = recipe_form(payloads, int8.kernels if int8 is not None else None)
    return recipe_session(
        payloads[field], weights, inputs, outputs, settings, f"{backend}.payloads.{field}", int8, place
    )


def session_placement(session: Session, settings: SessionSettings, seconds: float, int8: Int8Kernels | None) -> str:
    """Where a recipe runs, as ``describe`` says it: onnxruntime's version, threads, build time, int8 kernels."""
    where = (
        f"on onnxruntime {session.version}'s CPU provider ({settings.threads or 'default'} threads, "
        f"session built in {seconds:.2f} s from {session.source})"
    )
    return f"{where}; {int8.describe()}" if int8 is not None else where


def _refuse_contrib_ops(plan, region: str, placement: str) -> None:
    """A region holding an onnxruntime contrib op (aot/ir/contrib.py) has no host plan to fall back on."""
    for instruction in plan.instructions:
        if isinstance(instruction, dict) and instruction.get("op") == CONTRIB_OP:
            attrs = instruction.get("attrs") if isinstance(instruction.get("attrs"), dict) else {}
            raise PlacementError(
                f"onnxruntime region {region} holds {attrs.get('domain')}.{attrs.get('op_type')}, which only "
                f"onnxruntime computes, and onnxruntime does not run here: {placement}"
            )


class OnnxRuntimeModule:
    """One region, resolved at load to an onnxruntime session or its host plan."""

    def __init__(
        self, payloads: dict[str, memoryview], specs: dict[str, Any], options: dict[str, Any],
        bundle_digest: str | None = None,
    ):  # fmt: skip
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
        #: An int8 recipe's kernels here (integer or float, and why); None for a float recipe.
        self.int8 = int8_kernels(settings) if record.precision == "int8" else None
        place = None
        if options.get("graph_cache", False) and bundle_digest is not None and settings.optimization != "disable":
            from runtime_lite.backends.onnxruntime.optimized import GraphPlace

            place = GraphPlace(options.get("cache_dir"), bundle_digest, self.id)
        start = time.perf_counter()
        try:
            self.session: Session | None = region_session(
                payloads, weights, self.inputs, self.outputs, settings, self.int8, "onnxruntime", place
            )
            self.placement = session_placement(self.session, settings, time.perf_counter() - start, self.int8)
        except OnnxRuntimeUnavailable as e:
            self.session, self.placement = None, f"on the host: {e}"
        #: "onnxruntime" with a session, "host" on the fallback plan (the module's load warns or refuses).
        self.runs_on = "onnxruntime" if self.session is not None else "host"
        #: Whether what runs takes no statistic over the batch at run time though the fallback plan does: a dynamic
        #: int8 recipe's float form (float kernels, a CPU without VNNI) quantizes no activation, so a server may
        #: batch its rows (``Module.row_coupling`` reads the fallback plan otherwise, runtime_lite/execution/rows.py).
        self.rows_independent = self.session is not None and self.int8 is not None and \
            recipe_form(payloads, self.int8.kernels) == "recipe_float"  # fmt: skip
        #: The host plan, checked and bound only where it runs: a session never needs it (load time).
        if self.session is None:
            _refuse_contrib_ops(plan, self.id, self.placement)
        self.fallback = None if self.session is not None else self._bind(plan, constants)
        logger.info("onnxruntime region %s runs %s", self.id, self.placement)

    def _bind(self, plan, constants: list[np.ndarray]) -> HostPlan:
        return bind_fallback(plan, constants, self.id, "onnxruntime", (len(self.inputs), len(self.outputs)))

    def verified(self) -> None:
        """The load verified every blob: a graph onnxruntime optimized from them may now be kept."""
        pending = self.session.pending_graph if self.session is not None else None
        if pending is not None:
            self.session.pending_graph = None
            pending.keep()

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
        return OnnxRuntimeModule(payloads, compile_specs, dict(context.options), context.bundle_digest)

    def verified(self, handle: OnnxRuntimeModule) -> None:
        handle.verified()

    def execute(self, context: BackendContext, handle: OnnxRuntimeModule, inputs: Sequence[np.ndarray]):
        return handle.run(inputs, context.trace)

    def close(self, handle: OnnxRuntimeModule) -> None:
        handle.close()

    def describe(self, handle: OnnxRuntimeModule) -> Where:
        return Where(handle.runs_on, handle.placement)


BACKEND = register_backend(OnnxRuntimeBackend())

__all__ = [
    "BACKEND", "LOAD_OPTIONS", "OnnxRuntimeBackend", "OnnxRuntimeModule", "int8_kernels", "load_settings",
    "recipe_session", "region_session", "session_placement",
]  # fmt: skip
