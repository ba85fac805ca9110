"""NPU codegen: a region becomes a JSON graph in TVM's JSON-runtime layout, plus dispatch records.

    {"format": "npu-graph/1", "region": "npu_0",
     "nodes": [{"op": "input", "name": "x", "attrs": {"shape": [[1,3,32,32]], "dtype": ["float32"]}},
               {"op": "const", "name": "w", "attrs": {"shape": ..., "dtype": ..., "offset": 0, "nbytes": 1728}},
               {"op": "kernel", "name": "conv", "inputs": [[0, 0, 0], [1, 0, 0]],
                "attrs": {"composite": "npu.conv2d_relu_fused", "shape": ..., "dtype": ...,
                          "body": [{"op": "conv2d", "inputs": [["arg", 0], ["arg", 1]], "attrs": {...}},
                                   {"op": "relu", "inputs": [["op", 0]], "attrs": {}}],
                          "dispatch": {"engine": "CONV", "fused": true, "tile": [32, 32], ...}}}],
     "arg_nodes": [0], "heads": [[2, 0, 0]]}

The records are runtime_lite's (``NpuGraph`` and the rest, runtime_lite/format/npu_records.py),
so the writer and the reader share one declaration of every field.
One kernel node per composite: that is one NPU dispatch. Its ``body`` lists the
canonical ops it fuses, which the run side executes with the host's kernels.
Constants are ``input`` nodes when the host owns the weights (``bind_constants``
off, the NPU's default) and ``const`` nodes backed by the ``weights`` payload otherwise.
"""

from __future__ import annotations

import json

from aot.compiler.backends import ModuleArtifact
from aot.compiler.backends.npu.device import DEFAULT_PROFILE, DeviceProfile
from aot.compiler.backends.npu.dispatch import KernelPlan, plan_dispatch
from aot.compiler.backends.npu.int8 import lower_int8
from aot.compiler.backends.npu.int8_mobile import LOWERINGS
from aot.compiler.backends.weights import constant_record
from aot.compiler.host_plan import plain
from aot.compiler.partition import Region, boundary
from aot.errors import BuildError
from aot.ir.graph import Value
from runtime_lite import format as fmt
from runtime_lite.format.dtypes import to_numpy_dtype
from runtime_lite.format.npu_records import BodyOp, NpuGraph, NpuKernel, NpuNode, NpuTensor

FORMAT = fmt.NPU_GRAPH
#: Composites lowered to one integer kernel (int8.py, int8_mobile.py) instead of their ops' float kernels.
INT8_LOWERINGS = {"npu.int8_conv": lower_int8, "npu.int8_dense": lower_int8, **LOWERINGS}


def _tensor(value: Value) -> NpuTensor:
    return NpuTensor(tuple(value.type.shape), to_numpy_dtype(value.type.dtype))


def _kernel_plans(region: Region) -> list[KernelPlan]:
    plans = []
    for composite in region.composites:
        if composite.name == "npu.split":
            plans.extend(_split_plans(composite))
            continue
        if len(composite.outputs) != 1:
            raise BuildError(
                f"npu region {region.id}: composite {composite.name} has {len(composite.outputs)} outputs; "
                "an NPU dispatch writes exactly one"
            )
        name, output = composite.nodes[-1].name, composite.outputs[0]
        if composite.name in INT8_LOWERINGS:
            lowered = INT8_LOWERINGS[composite.name](composite.nodes)
            body = (
                BodyOp(
                    op=lowered.op,
                    inputs=tuple(("arg", i) for i in range(len(lowered.inputs))),
                    attrs={k: plain(v, f"{lowered.op} '{name}'.{k}") for k, v in lowered.attrs.items()},
                ),
            )
            plans.append(KernelPlan(name, composite.name, composite.nodes, lowered.inputs, output, lowered.anchor,
                                    body, "int8"))  # fmt: skip
            continue
        inputs, _ = boundary(composite.nodes, (), {}, bind_constants=False)
        plans.append(KernelPlan(name, composite.name, composite.nodes, inputs, output))
    return plans


def _split_plans(composite) -> list[KernelPlan]:
    """A split as one DMA dispatch per piece it is read for: each a slice of the input (same host kernel)."""
    (node,) = composite.nodes
    axis, start = node.attrs["axis"] % node.inputs[0].type.rank, 0
    plans, read = [], {id(v) for v in composite.outputs}
    for output, size in zip(node.outputs, node.attrs["sizes"]):
        if id(output) in read:
            attrs = {"starts": [start], "ends": [start + size], "axes": [axis], "steps": [1]}
            body = (BodyOp(op="slice", inputs=(("arg", 0),), attrs=attrs),)
            plans.append(KernelPlan(output.name, composite.name, composite.nodes, [node.inputs[0]], output, body=body))
        start += size
    return plans


def _body(k: KernelPlan) -> tuple[BodyOp, ...]:
    """The composite's canonical ops, each reading the kernel's inputs or an earlier op."""
    if k.body is not None:
        return k.body
    local = {id(n.outputs[0]): j for j, n in enumerate(k.nodes)}
    args = {id(v): j for j, v in enumerate(k.inputs)}
    return tuple(
        BodyOp(
            op=n.op,
            inputs=tuple(("op", local[id(v)]) if id(v) in local else ("arg", args[id(v)]) for v in n.inputs),
            attrs={key: plain(val, f"{n.op} '{n.name}'.{key}") for key, val in n.attrs.items()},
        )
        for n in k.nodes
    )


def npu_codegen(region: Region, options: DeviceProfile | None = None) -> ModuleArtifact:
    """``options``: the device profile to plan dispatches for (default: the reference NPU)."""
    profile = options or DEFAULT_PROFILE
    kernels = _kernel_plans(region)
    nodes: list[NpuNode] = []
    index: dict[int, int] = {}  # id(value) -> JSON node producing it
    arg_nodes = []
    for value in region.inputs:
        index[id(value)] = len(nodes)
        arg_nodes.append(len(nodes))
        nodes.append(NpuNode(op="input", name=value.name, attrs=_tensor(value)))

    weights = bytearray()
    for k in kernels:
        for value in k.inputs:
            if value.is_constant and id(value) not in index:
                index[id(value)] = len(nodes)
                nodes.append(NpuNode(op="const", name=value.name, attrs=constant_record(weights, value.data)))

    dispatch = plan_dispatch(kernels, region.inputs, region.outputs, profile)
    for k, record in zip(kernels, dispatch):
        body = _body(k)
        output = _tensor(k.output)
        index[id(k.output)] = len(nodes)
        kernel = NpuKernel(composite=k.composite, shape=output.shape, dtype=output.dtype, body=body, dispatch=record)
        nodes.append(NpuNode(op="kernel", name=k.name, inputs=tuple(index[id(v)] for v in k.inputs), attrs=kernel))
    graph = NpuGraph(
        region=region.id,
        nodes=tuple(nodes),
        arg_nodes=tuple(arg_nodes),
        heads=tuple(index[id(v)] for v in region.outputs),
    )
    payloads = {"graph": json.dumps(graph.to_record(), sort_keys=True, separators=(",", ":")).encode()}
    if weights:
        payloads["weights"] = bytes(weights)
    specs = {"format": FORMAT}
    if profile.calibration:
        specs["calibration"] = profile.calibration
    return ModuleArtifact(payloads, specs)
