"""The OpenVINO backend, run side: a region's recipe on OpenVINO's CPU plugin, else its host plan.

An OpenVINO module (``aot-build --target openvino``) carries exactly what an onnxruntime
module does (runtime_lite/backends/onnxruntime): the region as an ONNX ``recipe`` whose
large initializers are placeholders for the bundle's own blobs, its host plan
(``fallback`` + ``fallback_weights``) and, rarely, ``recipe_weights``; its compile specs
are the same record. Only the engine differs, chosen where the bundle is built
because it is the engine a fleet of Intel CPUs runs best, or the one measured faster.

At ``init`` the recipe passes the same check as onnxruntime's (recipe_check.py: no
paths, allow-listed default-domain ops, bounded opset and size, kernel geometry)
before OpenVINO parses anything, and the same footprint walk bounds a run's memory;
then OpenVINO reads the recipe with its weights in place (memory_recipe.py) and
compiles it for the CPU. An int8 recipe runs on OpenVINO's int8 kernels where the CPU has
an 8-bit dot product and on its float kernels elsewhere (int8.py; the ``int8`` option).
Where OpenVINO is not installed, is disabled, or refuses the recipe, the region runs its
host plan and the load says why, once;
``load(..., require=("openvino",))`` refuses instead. ``describe`` says which.

Nothing here imports openvino until an OpenVINO module is loaded (engine.py does, inside
a function).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import numpy as np

from runtime_lite.backends import register_backend
from runtime_lite.backends.cpu_module import CpuEngineBackend, CpuEngineModule
from runtime_lite.backends.fallback import bind_fallback, fallback_constants
from runtime_lite.backends.onnxruntime import recipe_weights
from runtime_lite.backends.onnxruntime.footprint import Footprint
from runtime_lite.backends.onnxruntime.recipe_check import RecipeFacts, check_recipe
from runtime_lite.backends.onnxruntime.spec import OnnxRuntimeSpecs
from runtime_lite.backends.openvino import int8
from runtime_lite.backends.openvino.engine import HINTS, PRECISIONS, Engine, EngineSettings, OpenVinoUnavailable
from runtime_lite.backends.options import Option, boolean, choice, thread_count
from runtime_lite.errors import BundleError
from runtime_lite.format.signature import TensorSpec

logger = logging.getLogger("runtime_lite.openvino")

SPECS_FIELD = "openvino.compile_specs"
RECIPE_FIELD = "openvino.payloads.recipe"


threads = thread_count("openvino's default, one per physical core")

#: What a deployment may set at load: ``load(path, backend_options={"openvino": {...}})``.
LOAD_OPTIONS = (
    Option("threads", threads, 0, "inference threads of each compiled model (0: openvino's default, one per core)"),
    Option("hint", choice(*HINTS), "latency", f"openvino's performance hint ({'|'.join(HINTS)})"),
    Option(
        "precision",
        choice(*PRECISIONS),
        "f32",
        f"the CPU plugin's inference precision ({'|'.join(PRECISIONS)}); f32 computes as the model does, bf16 "
        "is openvino's own default on CPUs with AMX or AVX512-BF16",
    ),
    Option(
        "int8",
        choice(*int8.INT8_CHOICES),
        "auto",
        "an int8 recipe's kernels: integer (openvino's int8 kernels), float (its low-precision transformations "
        "off), auto (integer where the CPU has an 8-bit dot product, VNNI or AMX)",
    ),
    Option("enabled", boolean, True, "false: never hand the recipe to openvino, run the host plan"),
    Option(
        "pinning",
        boolean,
        None,
        "pin the inference threads to cores (unset: openvino's choice, pinned on Linux); false suits a host whose "
        "cores other processes share",
    ),
)


def recipe_engine(
    recipe: memoryview, facts: RecipeFacts, weights: dict[str, np.ndarray], inputs, outputs, settings: EngineSettings
) -> Engine:
    """An engine over ``recipe``, which passed the check with ``facts`` (OpenVinoUnavailable where openvino is missing
    or refuses it, where the check could not follow a shape (shapes.py) or bound a run's memory (footprint.py))."""
    input_names, output_names = [s.name for s in inputs], [s.name for s in outputs]
    if not settings.enabled:
        raise OpenVinoUnavailable("openvino is disabled by the load option openvino.enabled=false")
    if facts.unverified is not None:
        raise OpenVinoUnavailable(f"the recipe check could not verify its geometry ({facts.unverified})")
    footprint = Footprint(
        facts.inputs, facts.dims, facts.operands, facts.nodes, facts.types, input_names, output_names, facts.shapes
    )
    if footprint.unbounded is not None:
        raise OpenVinoUnavailable(f"the recipe check could not bound its memory ({footprint.unbounded})")
    return Engine(recipe, weights, input_names, output_names, settings, footprint)


def region_engine(
    payloads: dict[str, memoryview], weights: dict[str, np.ndarray], inputs, outputs, settings: EngineSettings,
    int8_kernels: str | None, backend: str,
) -> tuple[Engine, str | None]:  # fmt: skip
    """An engine over the region's recipe, and what ``describe`` says of an int8 recipe's kernels (None for a float
    one). ``int8_kernels``: the ``int8`` choice for an int8 recipe (int8.py picks the kernels and the form), None
    for a float one; ``backend`` names the payload fields in errors. OpenVinoUnavailable as ``recipe_engine``."""
    field = int8.recipe_field(payloads) if int8_kernels is not None else "recipe"
    # the check before anything else: a bundle error whatever the host has
    facts = check_recipe(payloads[field], weights, f"{backend}.payloads.{field}")
    kernels = int8.kernels_for(int8_kernels, facts.nodes, facts.shapes) if int8_kernels is not None else None
    settings = dataclasses.replace(
        settings,
        low_precision=kernels is None or kernels.kernels == "integer",
        low_precision_fallback=field == int8.WEIGHTS_ONLY_FORM,  # a static recipe's int8 kernels only where chosen
        float_kernels=kernels is not None and kernels.kernels == "float",
    )
    engine = recipe_engine(payloads[field], facts, weights, inputs, outputs, settings)
    if kernels is None:
        return engine, None
    return engine, int8.describe(kernels, engine.low_precision == settings.low_precision, field)


class OpenVinoModule(CpuEngineModule):
    """One region, resolved at load to an OpenVINO compiled model or its host plan."""

    backend = "openvino"

    def __init__(self, payloads: dict[str, memoryview], specs: dict[str, Any], options: dict[str, Any]):
        record = OnnxRuntimeSpecs.from_record(specs, SPECS_FIELD)  # IncompatiblePayload for another format
        settings = EngineSettings(
            options["threads"], options["hint"], options["precision"], options["enabled"], options["pinning"]
        )
        self.id = record.region
        self.inputs: tuple[TensorSpec, ...] = record.inputs
        self.outputs: tuple[TensorSpec, ...] = record.outputs
        if "recipe" not in payloads:
            raise BundleError(f"bundle field 'openvino.payloads': module {self.id!r} has no 'recipe' payload")
        plan, constants = fallback_constants(payloads, self.id, "openvino")
        #: The recipe's initializers the bundle supplies, by name: read-only views of its blobs.
        self.weights = weights = recipe_weights(payloads, record, constants, SPECS_FIELD)
        start = time.perf_counter()
        try:
            self.engine: Engine | None
            self.engine, kernels = region_engine(
                payloads, weights, self.inputs, self.outputs, settings,
                options["int8"] if record.precision == "int8" else None, "openvino",
            )  # fmt: skip
            self.placement = (
                f"on openvino {self.engine.version} (CPU, {self.engine.threads} threads, {settings.hint} hint, "
                f"{settings.precision}{'' if settings.pinning is None else ', pinned' if settings.pinning else ', unpinned'}, compiled in {time.perf_counter() - start:.2f} s)"
            ) + (f"; {kernels}" if kernels else "")
        except OpenVinoUnavailable as e:
            self.engine, self.placement = None, f"on the host: {e}"
        #: "openvino" with an engine, "host" on the fallback plan (the module's load warns or refuses).
        self.runs_on = "openvino" if self.engine is not None else "host"
        arity = (len(self.inputs), len(self.outputs))
        self.bind_host = lambda: bind_fallback(plan, constants, self.id, "openvino", arity)
        if self.engine is None:
            self.host_plan()
        logger.info("openvino region %s runs %s", self.id, self.placement)


class OpenVinoBackend(CpuEngineBackend):
    name = "openvino"
    load_options = LOAD_OPTIONS
    module_class = OpenVinoModule


BACKEND = register_backend(OpenVinoBackend())

__all__ = ["BACKEND", "LOAD_OPTIONS", "OpenVinoBackend", "OpenVinoModule", "recipe_engine", "region_engine"]
