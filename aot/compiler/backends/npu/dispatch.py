"""Ahead-of-time dispatch decisions for one NPU region: engine, memory tier, tiling, fusion, cycles.

The runtime executes what is decided here; it never re-decides. Rules (docs/npu.md):

* **tiers**: a tensor goes to the smallest tier it fits in *given what is live*
  there; when that tier is full it spills upward (the record says so);
* **tiling**: an output larger than L1 is cut along its last two dims, starting
  at 32x32 and halving (floor 8) until one tile fits in L1;
* **fusion**: a fused composite's intermediates stay in the engine, costing no traffic;
* **cycles**: MACs / 256 on CONV and MATRIX (int8 kernels: MACs / 1024), elements / 64
  elsewhere, plus the bytes each operand moves divided by its tier's bandwidth (int8
  operands move a quarter of float32's bytes);
* **data movement**: the DMA engine's copies (concat, slice, split, a transpose that
  reorders data) cost only the bytes they move; a reshape, flatten, squeeze, unsqueeze,
  or a transpose that only moves unit axes, is a *view*: no bytes, no cycles, its output
  lives in its source's tier and keeps the source alive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from aot.compiler.backends.npu.device import DeviceProfile
from aot.compiler.backends.npu.mobile import is_view
from aot.ir.graph import Node, Value
from runtime_lite.format.npu_records import DispatchRecord, TensorPlacement


@dataclass
class KernelPlan:
    """One NPU dispatch: a composite's nodes, what it reads, what it writes."""

    name: str
    composite: str
    nodes: list[Node]
    inputs: list[Value]
    output: Value
    #: The node that picks the engine and counts the MACs (default: the first).
    anchor: Node | None = None
    #: The kernel's body when it is not the nodes' own ops (an integer kernel), as BodyOps.
    body: Any = None
    #: "int8": integer products at the engine's int8 rate; "float" otherwise.
    precision: str = "float"


def _macs(node: Node) -> int:
    out = node.outputs[0].type
    if node.op in ("conv1d", "conv2d"):
        w = node.inputs[1].type.shape
        return out.numel * math.prod(w[1:])  # each output: C_in/groups x kernel taps
    if node.op == "conv_transpose2d":
        w = node.inputs[1].type.shape
        return node.inputs[0].type.numel * math.prod(w[1:])  # each input scatters C_out/groups x taps
    if node.op in ("matmul", "dense"):
        k = node.inputs[0].type.shape[-1]
        return out.numel * k
    return 0


def _tile(shape: tuple, itemsize: int, profile: DeviceProfile) -> tuple[list[int] | None, int]:
    """The tile shape over the last two dims and the tile count; (None, 1) when untiled."""
    nbytes = math.prod(shape) * itemsize
    if nbytes <= profile.tile_budget or len(shape) == 0:
        return None, 1
    lead = shape[:-2] if len(shape) >= 2 else ()
    dims = list(shape[-2:]) if len(shape) >= 2 else [1, shape[-1]]
    side = profile.tile_start
    tile = [min(side, d) for d in dims]
    while math.prod(lead) * math.prod(tile) * itemsize > profile.tile_budget and side > profile.tile_floor:
        side = max(side // 2, profile.tile_floor)
        tile = [min(side, d) for d in dims]
    count = math.prod(math.ceil(d / t) for d, t in zip(dims, tile))
    return tile, count


class _TierAllocator:
    """Live bytes per tier; a tensor takes the smallest tier with room, else spills upward."""

    def __init__(self, profile: DeviceProfile):
        self.profile = profile
        self.used = [0] * len(profile.tiers)
        self.where: dict[int, tuple[int, int]] = {}  # id(value) -> (tier index, bytes)

    def place(self, value: Value) -> TensorPlacement:
        nbytes = value.type.nbytes
        tiers = self.profile.tiers
        preferred = next((i for i, t in enumerate(tiers) if nbytes <= t.bytes), len(tiers) - 1)
        chosen = next(
            (i for i in range(preferred, len(tiers)) if self.used[i] + nbytes <= tiers[i].bytes), len(tiers) - 1
        )
        self.used[chosen] += nbytes
        self.where[id(value)] = (chosen, nbytes)
        return self.describe(value, spilled_from=tiers[preferred].name if chosen != preferred else None)

    def alias(self, view: Value, source: Value) -> TensorPlacement:
        """A view takes no room of its own: it lives where its source's bytes are."""
        self.where[id(view)] = (self.where[id(source)][0], 0)
        return self.describe(view)

    def describe(self, value: Value, spilled_from: str | None = None) -> TensorPlacement:
        tier, _ = self.where[id(value)]
        return TensorPlacement(value.name, value.type.nbytes, self.profile.tiers[tier].name, spilled_from or None)

    def release(self, value: Value) -> None:
        tier, nbytes = self.where.pop(id(value))
        self.used[tier] -= nbytes

    def bandwidth(self, value: Value) -> int:
        return self.profile.tiers[self.where[id(value)][0]].bandwidth


def _is_view(k: KernelPlan) -> bool:
    """A float layout op alone, or an int8 one that moves the int8 bytes themselves (int8_mobile.py)."""
    anchor = k.anchor or k.nodes[0]
    if k.body is None:
        return len(k.nodes) == 1 and is_view(anchor)
    return len(k.body) == 1 and k.body[0].op == anchor.op and is_view(anchor)


def _lifetimes(kernels: list[KernelPlan], kept: set[int]) -> dict[int, list[Value]]:
    """Kernel index -> the values whose bytes are free after it: their last reader, or their views' last.

    A view holds its source's bytes, so the source lives as long as its longest-lived view
    (and is kept when a view of it leaves the region).
    """
    last_use: dict[int, int] = {}
    values: dict[int, Value] = {}
    for i, k in enumerate(kernels):
        for v in k.inputs:
            last_use[id(v)] = i
            values[id(v)] = v
    root: dict[int, int] = {}
    for i, k in enumerate(kernels):
        if _is_view(k):
            source = root.get(id(k.inputs[0]), id(k.inputs[0]))
            root[id(k.output)] = source
            last_use[source] = max(last_use[source], last_use.get(id(k.output), i))
            if id(k.output) in kept:
                kept.add(source)
    frees: dict[int, list[Value]] = {}
    for key, i in last_use.items():
        if key not in kept:
            frees.setdefault(i, []).append(values[key])
    return frees


def _compute_cycles(k: KernelPlan, engine: str, anchor: Node, profile: DeviceProfile) -> int:
    """Cycles of the engine's arithmetic; a DMA copy has none (its cost is the bytes it moves)."""
    if engine in ("CONV", "MATRIX"):
        rate = profile.int8_macs_per_cycle if k.precision == "int8" else profile.macs_per_cycle
        return math.ceil(_macs(anchor) / rate)
    if engine == "DMA":
        return 0
    return math.ceil(max(k.output.type.numel, *(v.type.numel for v in k.inputs)) / profile.vector_lanes)


def plan_dispatch(
    kernels: list[KernelPlan], region_inputs: list[Value], region_outputs: list[Value], profile: DeviceProfile
) -> list[DispatchRecord]:
    """One dispatch record per kernel, in execution order."""
    frees = _lifetimes(kernels, {id(v) for v in region_outputs})
    alloc = _TierAllocator(profile)
    records = []
    for v in region_inputs:
        alloc.place(v)
    for v in {id(v): v for k in kernels for v in k.inputs if v.is_constant and id(v) not in alloc.where}.values():
        alloc.place(v)  # weights baked into the payload are resident like inputs
    for i, k in enumerate(kernels):
        anchor = k.anchor or k.nodes[0]
        engine = profile.engine(anchor.op)
        reads = [alloc.describe(v) for v in k.inputs]
        view = _is_view(k)
        if view:
            write = alloc.alias(k.output, k.inputs[0])
            tile, tiles, cycles = None, 1, 0
        else:
            write = alloc.place(k.output)
            itemsize = np.dtype(k.output.type.dtype).itemsize
            tile, tiles = _tile(tuple(k.output.type.shape), itemsize, profile)
            traffic = sum(math.ceil(v.type.nbytes / alloc.bandwidth(v)) for v in k.inputs)
            traffic += math.ceil(k.output.type.nbytes / alloc.bandwidth(k.output))
            cycles = _compute_cycles(k, engine, anchor, profile) + traffic
        record = DispatchRecord(
            engine=engine,
            ops=tuple(n.op for n in k.nodes),
            fused=len(k.nodes) > 1,
            reads=tuple(reads),
            writes=(write,),
            on_chip=tuple(o.name for n in k.nodes[:-1] for o in n.outputs),
            tile=tuple(tile) if tile else None,
            tiles=tiles,
            macs=sum(_macs(n) for n in k.nodes),
            cycles=cycles,
            precision=k.precision,
            view=view,
        )
        records.append(record)
        for v in frees.get(i, ()):
            if id(v) in alloc.where:
                alloc.release(v)
    return records
