"""The build driver: model -> IR -> passes -> host plan -> bundle.

``build`` is what ``aot-build`` runs; it reports each stage through an optional
callback so a CLI can show progress on large models.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from aot.compiler.backends import available_compiler_backends, get_compiler_backend
from aot.compiler.host_plan import LoweredPlan, lower_to_host_plan
from aot.compiler.host_report import explain_host
from aot.compiler.outline import outline_regions
from aot.compiler.partition import PartitionedGraph, partition
from aot.compiler.quantize import NeedsCalibration, Quantization, QuantizeConfig, quantize_graph
from aot.compiler.quantize.insert import SYMMETRIC, Int8Scheme
from aot.compiler.targets import check_targets
from aot.compiler.worst_case import shapes_at_bounds, worst_case_activation_bytes
from aot.errors import BuildError
from aot.frontend.onnx import from_onnx
from aot.frontend.onnx.importer import InputShapes, InputValues, ModelSource
from aot.frontend.torch import from_exported_program, load_exported_program
from aot.ir import contrib
from aot.ir.graph import Graph
from aot.packager import BlobTable, make_header, read_back, save, to_bytes
from aot.passes import optimize

Progress = Callable[[str, float], None]


@dataclass
class BuildResult:
    """A compiled model, ready to be written as a bundle."""

    graph: Graph
    plan: LoweredPlan
    header: dict[str, Any]
    blobs: BlobTable
    targets: list[str]
    notes: list[str]
    pass_stats: dict[str, int]
    timings: dict[str, float] = field(default_factory=dict)
    #: The graph before regions were outlined, with its composites and regions (printable).
    partitioned: PartitionedGraph | None = None
    #: Lines each backend adds to the build summary (``CompilerBackend.report``), by backend.
    reports: dict[str, list[str]] = field(default_factory=dict)
    #: What the quantize stage did (``build(..., quantize=...)``): calibration table, accuracy report.
    quantization: Quantization | None = None

    @property
    def op_counts(self) -> dict[str, int]:
        nodes = self.partitioned.nodes if self.partitioned else self.graph.nodes
        return dict(collections.Counter(node.op for node in nodes))

    @property
    def regions(self) -> dict[str, int]:
        """Ops per backend, the host included."""
        if self.partitioned is None:
            return {"host": len(self.graph.nodes)}
        return self.partitioned.op_counts()

    def to_bytes(self) -> bytes:
        """The bundle in memory, read back by runtime_lite first (like ``save``)."""
        data = to_bytes(self.header, self.blobs)
        read_back(data)
        return data

    def save(self, path: str | os.PathLike[str]) -> int:
        """Write the bundle atomically; return its size in bytes."""
        start = time.perf_counter()
        size = save(path, self.header, self.blobs)
        self.timings["write"] = time.perf_counter() - start
        return size


def build(
    model: ModelSource | Graph,
    *,
    targets: Sequence[str] = ("host",),
    input_shapes: InputShapes | None = None,
    input_values: InputValues | None = None,
    name: str | None = None,
    min_region_size: int | None = None,
    partitioner: Callable[[Graph], PartitionedGraph] | None = None,
    backend_options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    log: TextIO | None = sys.stderr,
    quantize: QuantizeConfig | None = None,
) -> BuildResult:
    """Compile an ONNX model (path, bytes, ModelProto) or an IR graph into a bundle-ready result.

    ``targets`` name backends in priority order; the host runs whatever they do not take.
    ``input_shapes`` fixes inputs' dims (``{"x": (1, 3, 224, 224)}``); ``input_values`` binds ONNX inputs to
    values (``{"sr": 16000}``, scalars or lists in the input's declared dtype): each becomes a constant and
    leaves the bundle's signature, so an ``If`` on it folds (docs/inputs.md, "Inputs bound at build time").
    ``min_region_size`` overrides each backend's smallest region worth offloading.
    ``partitioner`` replaces the default partitioning (your own patterns or
    passes over ``fuse_ops_by_pattern`` / ``merge_composite_functions``); its
    regions must name registered compiler backends.
    ``backend_options`` maps a backend name to its codegen options: a mapping of the
    options it declares (``{"tensorrt": {"precision": "fp16"}}``, values as Python
    objects or command-line text), or its own options object
    (``{"tensorrt": TensorRTOptions(...)}``, ``{"npu": DeviceProfile(...)}``).
    ``log`` is where backends write progress of long work (engine builds); None is quiet.
    ``quantize`` calibrates (on onnxruntime where installed, else the host plan) and computes in int8 where the targets can
    (docs/quantization.md); it turns ``precision`` to int8 on every target with an int8 path.
    """
    report = progress or (lambda stage, seconds: None)
    ordered = check_targets(targets)
    offload = [t for t in ordered if t != "host"]
    given, int8_targets, quantize = _int8_options(offload, backend_options or {}, quantize)
    configured = _configure(offload, given, log)
    notes: list[str] = [] if quantize is not None else _unused_int8_options(offload, given)
    timings: dict[str, float] = {}

    def stage(label: str, fn: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        result = fn()
        timings[label] = time.perf_counter() - start
        report(label, timings[label])
        return result

    if isinstance(model, Graph):
        if input_values:
            raise BuildError("input_values (--bind) applies to an ONNX model, not to an IR graph")
        graph = model
    else:
        graph = stage("import", lambda: _import(model, input_shapes, name or _default_name(model), input_values))
    stats = stage("optimize", lambda: optimize(graph))
    quantization = None
    if quantize is not None:
        rules = {t: get_compiler_backend(t).int8 for t in int8_targets}
        scheme, scheme_note = _int8_scheme(int8_targets, configured)
        quantization = stage("quantize", lambda: _quantize(graph, quantize, rules, log, scheme, int8_targets))
        notes.extend(quantization.notes + scheme_note)
        for t in int8_targets:  # the table's digest goes into each target's settings (and cache keys)
            configured[t] = get_compiler_backend(t).configure(
                {**given[t], "calibration": quantization.table.digest}, log
            )
    worst_case = worst_case_activation_bytes(graph)  # before regions are outlined: every node re-infers
    graph.shape_bounds = shapes_at_bounds(graph)
    blobs = BlobTable()
    partitioned, modules = None, []
    if partitioner is not None:
        partitioned = stage("partition", lambda: partitioner(graph))
    elif offload:
        partitioned = stage("partition", lambda: partition(graph, offload, min_region_size=min_region_size))
    if partitioned is not None:
        notes.extend(explain_host(partitioned, [get_compiler_backend(t) for t in offload]))
        modules = stage("codegen", lambda: _codegen(partitioned, blobs, configured, log, notes))
        outline_regions(partitioned)
    refuse_contrib_on_the_host(graph, offload)
    plan = stage("plan", lambda: lower_to_host_plan(graph))
    header = stage("package", lambda: make_header(graph, plan, blobs, modules, worst_case))
    reports = {}
    for name in sorted({m["backend"] for m in modules}):
        backend = get_compiler_backend(name)
        if backend.report is not None and name in configured:
            reports[name] = backend.report(configured[name])
        if backend.partition_report is not None and name in configured:
            reports[name] = [*reports.get(name, []), *backend.partition_report(partitioned, configured[name])]
    result = BuildResult(graph, plan, header, blobs, ordered, notes, stats, timings, partitioned, reports, quantization)
    if quantization is not None and quantization.samples:
        stage("accuracy", lambda: quantization.measure(log))
        notes.extend(quantization.report_lines())
    return result


def refuse_contrib_on_the_host(graph: Graph, offload: Sequence[str]) -> None:
    """A contrib op outside an onnxruntime region has no kernel to run it: one line naming the op and the node."""
    for node in graph.nodes:
        if node.op == contrib.OP:
            where = (
                "stayed on the host (aot-build --print-graph says why)"
                if "onnxruntime" in offload
                else "runs only in an onnxruntime region: build with --target onnxruntime"
            )
            raise BuildError(
                f"{contrib.qualified(node.attrs)} (node {node.name!r}) is an onnxruntime contrib op the host plan "
                f"and the other targets have no kernel for; it {where}"
            )


def _quantize(graph: Graph, quantize: QuantizeConfig, rules: dict, log: TextIO | None, scheme: Int8Scheme,
              targets: list[str]) -> Quantization:  # fmt: skip
    try:
        return quantize_graph(graph, quantize, rules, log, scheme)
    except NeedsCalibration as e:  # int8 asked for without data, where the graph needs calibrated ranges
        schemed = [t for t in targets if any(o.name == "int8_scheme" for o in get_compiler_backend(t).options)]
        raise BuildError(f"{', '.join(targets)} precision {e}{e.advice(schemed[0] if schemed else None)}") from None


def _int8_options(
    offload: list[str], given: Mapping[str, Any], quantize: QuantizeConfig | None
) -> tuple[dict[str, Any], list[str], QuantizeConfig | None]:
    """The options with precision int8 on every target that has an int8 path when quantizing, those targets, and
    the quantize config.

    Asking for int8 without calibration data is an error, except for a backend whose matmuls may quantize with no
    calibration (an ``int8_scheme`` option: the quantize stage says whether this graph needs ranges); so is
    quantizing for targets none of which has int8.
    """
    options = dict(given)
    int8_targets = []
    if quantize is None:
        free = [name for name in offload if _asks_int8(get_compiler_backend(name), options.get(name))]
        if free and all(any(o.name == "int8_scheme" for o in get_compiler_backend(n).options) for n in free):
            quantize = QuantizeConfig(report=False)
    for name in offload:
        backend = get_compiler_backend(name)
        mine = options.get(name)
        if mine is not None and not isinstance(mine, Mapping):
            continue  # the backend's own options object: the caller decided
        mine = dict(mine or {})
        declares = any(o.name == "precision" for o in backend.options)
        if quantize is None:
            if declares and str(mine.get("precision", "")).lower() == "int8":
                raise BuildError(
                    f"{name} precision int8 needs calibration data: --calibration DIR (or --calibration-table "
                    "FILE), quantize=QuantizeConfig(...) in aot.build"
                )
            continue
        if backend.int8 is None or not declares:
            continue
        mine.setdefault("precision", "int8")
        if str(mine["precision"]).lower() != "int8":
            raise BuildError(f"{name} precision {mine['precision']} contradicts calibrating for int8; drop one")
        options[name] = mine
        int8_targets.append(name)
    if quantize is not None and not int8_targets:
        capable = ", ".join(name for name in available_compiler_backends() if get_compiler_backend(name).int8)
        raise BuildError(
            f"quantizing needs a target that computes in int8 ({capable}); targets: {', '.join(offload) or 'host'}"
        )
    return options, int8_targets, quantize


def _unused_int8_options(offload: list[str], given: Mapping[str, Any]) -> list[str]:
    """Notes for the int8 options of a build that does not quantize: set, and doing nothing."""
    notes = []
    for name in offload:
        mine = given.get(name)
        if isinstance(mine, Mapping):
            for option in sorted(k for k in mine if isinstance(k, str) and k.startswith("int8")):
                notes.append(f"{name}.{option}={mine[option]} does nothing: the build is float (add --precision int8)")
    return notes


def _asks_int8(backend: Any, mine: Any) -> bool:
    return isinstance(mine, Mapping) and str(mine.get("precision", "")).lower() == "int8" and backend.int8 is not None


def _int8_scheme(int8_targets: list[str], configured: dict[str, Any]) -> tuple[Int8Scheme, list[str]]:
    """The Q/DQ scheme every int8 target reads: the one they all ask for, else the symmetric one (with a note)."""
    asked = {}
    for t in int8_targets:
        scheme = get_compiler_backend(t).int8_scheme or SYMMETRIC
        asked[t] = scheme(configured.get(t)) if callable(scheme) else scheme
    schemes = set(asked.values())
    if len(schemes) == 1:
        return schemes.pop(), []
    apart = sorted(t for t, s in asked.items() if s != SYMMETRIC)
    return SYMMETRIC, [
        f"int8: symmetric Q/DQ, which every target reads; {', '.join(apart)} would fuse more into integer kernels "
        "with its own scheme (build for it alone)"
    ]


def _configure(offload: list[str], given: Mapping[str, Any], log: TextIO | None) -> dict[str, Any]:
    """Each target's codegen options; options for a backend that is not a target are an error, not ignored."""
    stray = sorted(set(given) - set(offload))
    if stray:
        raise BuildError(
            f"backend options given for {', '.join(stray)}, which is not a target of this build; "
            f"add --target {stray[0]} (targets: {', '.join(offload) or 'host only'})"
        )
    return {name: get_compiler_backend(name).configure(given.get(name), log) for name in offload}


def _import(model: Any, input_shapes: InputShapes | None, name: str, input_values: InputValues | None = None) -> Graph:
    """The frontend for what was given: a torch.export program (or .pt2 file), else ONNX."""
    torch_program = hasattr(model, "graph_signature") or (
        isinstance(model, (str, os.PathLike)) and os.fspath(model).endswith(".pt2")
    )
    if torch_program and input_values:
        raise BuildError("input_values (--bind) applies to ONNX models; a torch.export program takes no bound inputs")
    if hasattr(model, "graph_signature"):
        return from_exported_program(model, input_shapes=input_shapes, name=name)
    if isinstance(model, (str, os.PathLike)) and os.fspath(model).endswith(".pt2"):
        return from_exported_program(load_exported_program(model), input_shapes=input_shapes, name=name)
    return from_onnx(model, input_shapes=input_shapes, name=name, input_values=input_values)


def _codegen(
    pg: PartitionedGraph, blobs: BlobTable, configured: dict[str, Any], log: TextIO | None, notes: list[str]
) -> list[dict[str, Any]]:
    """Each region through its backend's codegen, as the bundle's module records."""
    records = []
    for region in pg.regions:
        backend = get_compiler_backend(region.backend)
        if region.backend not in configured:  # a custom partitioner's region: the backend's defaults
            configured[region.backend] = backend.configure(None, log)
        region.input_bounds = [pg.graph.shape_bounds.get(id(v)) for v in region.inputs]
        artifact = backend.codegen(region, configured[region.backend])
        notes.extend(artifact.notes)
        records.append(
            {
                "id": region.id,
                "backend": region.backend,
                "compile_specs": artifact.compile_specs,
                "payloads": {key: blobs.add(data) for key, data in sorted(artifact.payloads.items())},
                "summary": region_summary(region),
            }
        )
    return records


def region_summary(region) -> dict[str, Any]:
    """What tools (aot-inspect) show of a region without knowing its backend's payload."""
    composite_of = {id(n): c.name for c in region.composites for n in c.nodes}
    return {
        "inputs": [v.name for v in region.inputs],
        "outputs": [v.name for v in region.outputs],
        "nodes": [
            {
                "name": n.name,
                "op": n.op,
                "composite": composite_of[id(n)],
                "inputs": [v.name for v in n.inputs],
                "outputs": [o.name for o in n.outputs],
            }
            for n in region.nodes
        ],
    }


def _default_name(model: Any) -> str | None:
    if isinstance(model, (str, os.PathLike)):
        return os.path.splitext(os.path.basename(os.fspath(model)))[0]
    return None


def parse_input_shapes(specs: Sequence[str]) -> dict[str, tuple]:
    """Parse ``NAME:1x3x224x224`` options (the name may itself contain ':')."""
    from aot.ir.types import parse_shape

    shapes: dict[str, tuple] = {}
    for spec in specs:
        name, sep, shape = spec.rpartition(":")
        if not sep or not name:
            raise BuildError(f"--input must look like NAME:1x3x224x224, got {spec!r}")
        try:
            shapes[name] = parse_shape(shape)
        except ValueError as e:
            raise BuildError(f"--input {spec!r}: {e}") from None
    return shapes


__all__ = ["BuildResult", "QuantizeConfig", "build", "parse_input_shapes"]
