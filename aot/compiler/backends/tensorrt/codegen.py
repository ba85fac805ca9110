"""TensorRT codegen: a region becomes a recipe, a host plan of the same ops, and engines where possible.

Payloads of one TensorRT module:

* ``recipe``: the region as ONNX in the chosen precision (``recipe.py``), weights inside;
* ``fallback`` + ``fallback_weights``: the region's host plan, run where no engine fits;
* ``engine/<k>``: serialized engines built here, when this machine has TensorRT and a
  GPU, each tagged in ``compile_specs.engines`` with what it was built for.

Engines built here also go into the engine cache, so a deployment on this
machine, or a later build, finds them there.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TextIO

from aot.compiler.backends import ModuleArtifact
from aot.compiler.backends.fallback import host_fallback
from aot.compiler.backends.recipe import write_recipe
from aot.compiler.partition import Region
from aot.errors import BuildError
from aot.ir.graph import Graph
from aot.packager.bundle import spec_of
from runtime_lite.backends.tensorrt.engine_cache import EngineCache
from runtime_lite.backends.tensorrt.spec import (
    BuildSettings,
    EngineRecord,
    TensorRTSpecs,
    engine_tags_for,
    profiles,
)
from runtime_lite.format.signature import TensorSpec


@dataclass
class TensorRTOptions:
    """How ``aot-build`` lowers TensorRT regions (``build(..., backend_options={"tensorrt": ...})``)."""

    settings: BuildSettings = field(default_factory=BuildSettings)
    #: Build engines when this machine has TensorRT and a GPU ("auto"), or never.
    engines: str = "auto"
    #: Where built engines are cached (and looked up): shared with deployed runtimes on this machine.
    cache: EngineCache = field(default_factory=EngineCache)
    #: Where the engine build draws its progress; None is silent.
    progress: TextIO | None = sys.stderr


def bounds_profile(region: Region, inputs: tuple[TensorSpec, ...]) -> dict[str, list[list[int]]] | None:
    """[min, opt, max] per input with symbolic dims, from its shapes at the model's bounds (opt the maximum: the
    size that costs most is the one TensorRT tunes for), as Torch-TensorRT derives a partition's from its
    ``Dim`` ranges; None where the region has no symbolic input or no bounds cover one."""
    profile = {}
    for spec, bounds in zip(inputs, region.input_bounds or [None] * len(inputs)):
        if all(isinstance(d, int) for d in spec.shape):
            continue
        if bounds is None:
            return None
        low, high = bounds
        profile[spec.name] = [list(low), list(high), list(high)]
    return profile or None


def _engine(
    recipe: bytes,
    region_id: str,
    inputs: tuple[TensorSpec, ...],
    options: TensorRTOptions,
    notes: list[str],
    declared: dict | None = None,
):
    """(tags, engine bytes) built or found in the cache for this machine's GPU, or None with a note."""
    from runtime_lite.backends.tensorrt.builder import EngineBuildError, cached_engine
    from runtime_lite.backends.tensorrt.gpu import GpuUnavailable, probe

    try:
        device, _, _ = probe()
    except GpuUnavailable as e:
        notes.append(f"tensorrt: no engine built for {region_id} ({e}); it is built or run on the host at load")
        return None
    profile = profiles(inputs, options.settings, declared)
    try:
        key, data, _ = cached_engine(
            options.cache, recipe, options.settings, profile, device,
            label=region_id, build=True, progress=options.progress,
        )  # fmt: skip
    except EngineBuildError as e:
        raise BuildError(str(e)) from None
    return engine_tags_for(options.settings, profile, device, key), data


#: protobuf will not serialize a message of 2 GiB or more, and a recipe is one ONNX model per region.
RECIPE_LIMIT_BYTES = (1 << 31) - 1


def serialized_recipe(graph: Graph, precision: str, region_id: str) -> bytes:
    """The region's recipe as ONNX bytes, or a one-line BuildError where its weights pass protobuf's limit."""
    model = write_recipe(graph, precision)
    weights = sum(t.ByteSize() for t in model.graph.initializer)
    if weights >= RECIPE_LIMIT_BYTES:
        raise BuildError(
            f"tensorrt: region {region_id} holds {weights / (1 << 30):.2f} GiB of weights, past the 2 GiB an ONNX "
            "recipe (one protobuf message) can hold; build it for the host or the npu instead"
        )
    return model.SerializeToString()


def tensorrt_codegen(region: Region, options: TensorRTOptions | None = None) -> ModuleArtifact:
    options = options or TensorRTOptions()
    if options.engines not in ("auto", "never"):
        raise BuildError(f"tensorrt engines must be 'auto' or 'never', got {options.engines!r}")
    graph = region.as_graph()
    recipe = serialized_recipe(graph, options.settings.precision, region.id)
    inputs = tuple(spec_of(v) for v in graph.inputs)
    outputs = tuple(spec_of(v) for v in graph.outputs)
    payloads = {"recipe": recipe, **host_fallback(graph).payloads()}
    notes: list[str] = []
    declared = bounds_profile(region, inputs)
    if options.settings.batch and not any(spec.shape and isinstance(spec.shape[0], str) for spec in inputs):
        notes.append(f"tensorrt: --batch has no effect on {region.id}: its inputs have a fixed batch dimension")
    if declared:
        shown = "; ".join(
            f"{name} {' / '.join('x'.join(map(str, s)) for s in shapes)}" for name, shapes in declared.items()
        )
        notes.append(f"tensorrt: {region.id} profile from the bounds (min / opt / max): {shown}")
    engines: list[EngineRecord] = []
    built = _engine(recipe, region.id, inputs, options, notes, declared) if options.engines == "auto" else None
    if built is not None:
        tags, data = built
        payloads["engine/0"] = data
        engines.append(EngineRecord(payload="engine/0", tags=tags))
    specs = TensorRTSpecs(
        region=region.id, inputs=inputs, outputs=outputs, settings=options.settings, engines=tuple(engines),
        profile=declared,
    )  # fmt: skip
    return ModuleArtifact(payloads, specs.to_record(), notes)
