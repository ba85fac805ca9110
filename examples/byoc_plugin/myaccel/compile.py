"""myaccel, compile side: what it takes (patterns and their checks) and how it writes a region.

Registered through the ``aot.backends`` entry point; aot imports this module when a
build names ``--target myaccel``, which registers the patterns below.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from aot.compiler.backends import CompilerBackend, ModuleArtifact
from aot.compiler.pattern import is_const, is_op, wildcard
from aot.compiler.pattern_registry import FusionPattern, PatternCheckContext, Rejected, register_patterns, reject
from myaccel.program import ALIGN, DTYPES, FORMAT

# -- patterns ---------------------------------------------------------------------------

CONV = is_op("conv2d")(wildcard(), is_const(), ...)
DENSE = is_op("dense")(wildcard(), is_const(), ...)


def _activated(core):
    return is_op("relu")(core) | is_op("relu6")(core) | is_op("clip")(core)


def _check(ctx: PatternCheckContext) -> bool | Rejected:
    """The accelerator's limits, each refusal with its reason (aot-build --print-graph shows them)."""
    core = (ctx.annotated.get("conv") or ctx.annotated["dense"]).producer
    for value in ctx.values():
        if value.type.dtype not in DTYPES:
            return reject(f"%{value.name} is {value.type.dtype}; myaccel computes in float32 only")
        if not value.type.is_static:
            return reject(f"%{value.name} has a symbolic shape {value.type}; myaccel needs static shapes")
    if len(core.inputs) > 2 and not core.inputs[2].is_constant:
        return reject(f"{core.op} {core.name}: its bias is computed at run time; myaccel takes constant biases")
    if core.op == "conv2d" and set(core.attrs["dilations"]) != {1}:
        return reject(f"conv2d {core.name}: dilations {list(core.attrs['dilations'])} not supported by myaccel")
    if ctx.intermediate_used_outside():
        return reject("the value before the activation is also read outside the match")
    root = ctx.root.producer
    if root.op == "clip" and (root.attrs.get("min") is None or root.attrs.get("max") is None):
        return reject("clip without both bounds is not one of myaccel's activations")
    return True


def patterns() -> list[FusionPattern]:
    """Fused forms first (higher priority), so a conv followed by relu becomes one step."""
    return [
        FusionPattern("myaccel.conv2d_act", _activated(CONV), {"conv": CONV}, _check, priority=10),
        FusionPattern("myaccel.dense_act", _activated(DENSE), {"dense": DENSE}, _check, priority=10),
        FusionPattern("myaccel.conv2d", CONV, {"conv": CONV}, _check),
        FusionPattern("myaccel.dense", DENSE, {"dense": DENSE}, _check),
    ]


register_patterns(patterns())

# -- codegen ----------------------------------------------------------------------------


class _Weights:
    """Arrays appended to one blob, aligned, described the way the run side reads them."""

    def __init__(self) -> None:
        self.blob = bytearray()

    def add(self, array: np.ndarray) -> dict[str, Any]:
        array = np.ascontiguousarray(array, dtype=np.dtype(array.dtype).newbyteorder("<"))
        self.blob.extend(b"\0" * (-len(self.blob) % ALIGN))
        record = {"offset": len(self.blob), "shape": list(array.shape), "dtype": array.dtype.name}
        self.blob.extend(array.tobytes())
        return record


def _activation(node) -> list:
    if node.op == "relu":
        return ["relu"]
    if node.op == "relu6":
        return ["clip", 0.0, 6.0]
    if node.op == "clip":
        return ["clip", float(node.attrs["min"]), float(node.attrs["max"])]
    return []


def codegen(region, options: dict[str, Any]) -> ModuleArtifact:
    """One step per composite: its conv or dense, with bias and activation folded in (myaccel has no options)."""
    number: dict[int, int] = {id(v): i for i, v in enumerate(region.inputs)}
    weights = _Weights()
    steps = []
    for composite in region.composites:
        core = next(n for n in composite.nodes if n.op in ("conv2d", "dense"))
        tail = [n for n in composite.nodes if n is not core]
        out = composite.outputs[0]
        step: dict[str, Any] = {
            "kind": core.op,
            "x": number[id(core.inputs[0])],
            "out": len(number),
            "weight": weights.add(core.inputs[1].data),
            "bias": weights.add(core.inputs[2].data) if len(core.inputs) > 2 else None,
            "activation": _activation(tail[0]) if tail else [],
            "shape": list(out.type.shape),
        }
        if core.op == "conv2d":
            step.update(strides=list(core.attrs["strides"]), pads=list(core.attrs["pads"]),
                        groups=int(core.attrs["groups"]))  # fmt: skip
        number[id(out)] = len(number)
        steps.append(step)
    program = {
        "format": FORMAT,
        "num_values": len(number),
        "inputs": list(range(len(region.inputs))),
        "outputs": [number[id(v)] for v in region.outputs],
        "steps": steps,
    }
    payloads = {"program": json.dumps(program).encode(), "weights": bytes(weights.blob)}
    return ModuleArtifact(payloads, {"format": FORMAT, "steps": len(steps)})


BACKEND = CompilerBackend(
    "myaccel",
    codegen,
    bind_constants=True,  # weights travel inside the payload, as on a device with its own memory
    min_region_size=1,
)
