"""Assemble a bundle header from a compiled graph and its host plan."""

from __future__ import annotations

import platform
from typing import Any

import numpy as np

from aot.compiler.host_plan import LoweredPlan
from aot.compiler.worst_case import WorstCase
from aot.errors import BuildError
from aot.ir.dims import dims_record
from aot.ir.graph import Graph, Value
from aot.packager.writer import BlobTable
from runtime_lite import format as fmt
from runtime_lite.format.dtypes import to_numpy_dtype
from runtime_lite.format.records import HostConstant
from runtime_lite.format.signature import TensorSpec
from runtime_lite.version import __version__


def spec_of(value: Value) -> TensorSpec:
    """The value's name, shape and dtype, as the signature and a TensorRT module's specs declare them."""
    try:
        dtype = to_numpy_dtype(value.type.dtype)
    except ValueError as e:
        raise BuildError(f"'{value.name}': {e}; a bundle cannot store it") from None
    return TensorSpec(value.name, tuple(value.type.shape), dtype)


def tensor_spec(value: Value) -> dict[str, Any]:
    return spec_of(value).to_record()


def producer_versions() -> dict[str, str]:
    """Who wrote the bundle; recorded so a bad bundle can be traced to a toolchain, never checked."""
    versions = {"name": "aot", "version": __version__, "numpy": np.__version__, "python": platform.python_version()}
    try:
        import onnx

        versions["onnx"] = onnx.__version__
    except ImportError:  # pragma: no cover - onnx is a dependency of aot
        pass
    return versions


def _signature(graph: Graph, worst_case: WorstCase | None) -> dict[str, Any]:
    """Inputs and outputs; ``dims`` (where each symbolic input dim's name came from, its bounds) when any,
    and the peak activation bytes at the dims' upper bounds when every one is bounded."""
    signature: dict[str, Any] = {
        "inputs": [tensor_spec(v) for v in graph.inputs],
        "outputs": [tensor_spec(v) for v in graph.outputs],
    }
    used = {d for v in graph.inputs for d in v.type.shape if isinstance(d, str)}
    dims = dims_record(graph.dims, used)
    if dims:
        signature["dims"] = dims
    if worst_case is not None:
        signature["worst_case_activation_bytes"] = int(worst_case.activation_bytes)
        signature["worst_case_budget_bytes"] = int(worst_case.budget_bytes)
    return signature


def make_header(
    graph: Graph,
    plan: LoweredPlan,
    blobs: BlobTable,
    modules: list[dict[str, Any]] | None = None,
    worst_case: WorstCase | None = None,
) -> dict[str, Any]:
    constants = []
    for array in plan.constants:
        array = np.asarray(array, order="C")
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        constants.append(HostConstant(array.dtype, tuple(array.shape), blobs.add(array)).to_record())
    features = [fmt.HOST_PLAN] + ([fmt.CALL_MODULE] if modules else [])
    return {
        "required_features": features,
        "producer": producer_versions(),
        "model": {"name": graph.name, **{k: v for k, v in graph.metadata.items() if isinstance(v, (str, int))}},
        "signature": _signature(graph, worst_case),
        "constants": constants,
        "modules": modules or [],
        "plan": plan.record,
    }
