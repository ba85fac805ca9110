"""The bundle's records, each declared once (runtime_lite/format/schema.py says how).

``aot`` builds these dataclasses and writes ``to_record()``; runtime_lite reads
them back with ``from_record(record, field)``. Layouts are in docs/bundle-format.md
(host plan, constants) and docs/npu.md (the NPU graph and its dispatch records);
TensorRT's compile_specs and fallback plan are in runtime_lite/backends/tensorrt/spec.py.

* :class:`BlobRecord`, :class:`HostConstant`: the header's ``blobs`` and ``constants`` tables;
* :class:`PlanRecord`: the host plan's top level (``header.plan``, a TensorRT fallback's ``plan``);
* :class:`Instruction`: one plan instruction. Its fields are declared here for the
  writer and for the reader's slow path; runtime_lite/execution/plan.py reads well-formed
  instructions on a fast path of its own (a plan has tens of thousands);
* :class:`ConstantRecord`: one array in a backend's weights payload;
* :class:`NpuGraph`, :class:`NpuNode`, :class:`NpuTensor`, :class:`NpuKernel`,
  :class:`BodyOp`, :class:`DispatchRecord`, :class:`TensorPlacement`: the NPU's ``graph`` payload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from runtime_lite import format as fmt
from runtime_lite.errors import BundleError, describe
from runtime_lite.format.fields import expect
from runtime_lite.format.schema import (
    BOOL,
    BYTES,
    INT,
    LIST,
    MAP,
    STR,
    Dtype,
    Kind,
    ListOf,
    Nested,
    Nullable,
    OneOutput,
    Record,
    Shape,
    declare,
)
from runtime_lite.format.weights import view_constant

# -- the host plan ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction(Record):
    """One host instruction: ``op`` over slots ``inputs``, results into ``outputs``."""

    op: str = declare(STR)
    #: the source node, for errors and profiles; a record without one reads as "#<index>"
    name: str | None = declare(STR, default=None, omit_default=True)
    inputs: tuple[int, ...] = declare(ListOf(INT), key="in", default=())
    outputs: tuple[int, ...] = declare(ListOf(INT), key="out", default=())
    attrs: dict[str, Any] = declare(MAP, default={})
    #: the operand whose buffer receives the result, if any
    inplace: int | None = declare(Nullable(INT), default=None, omit_default=True)
    #: slots released after this instruction
    free: tuple[int, ...] = declare(ListOf(INT), default=(), omit_default=True)


@dataclass(frozen=True)
class PlanRecord(Record):
    """The host plan's top level; its instructions stay raw records, parsed by runtime_lite/execution/plan.py."""

    num_slots: int = declare(INT)
    inputs: tuple[int, ...] = declare(ListOf(INT))
    outputs: tuple[int, ...] = declare(ListOf(INT))
    #: (slot, index into the constants) pairs, preloaded before every run
    constants: tuple[tuple[int, int], ...] = declare(ListOf(ListOf(INT, 2, "a [slot, constant] pair")))
    instructions: list = declare(LIST)


# -- the header's blob and constant tables ------------------------------------------------------


@dataclass(frozen=True)
class BlobRecord(Record):
    """Where one blob's payload lies: ``offset`` from the data section's start (64-aligned), its size and sha256."""

    offset: int = declare(INT)
    size: int = declare(INT)
    sha256: bytes = declare(BYTES)

    def check(self, field: str) -> None:
        if self.offset < 0 or self.size < 0 or self.offset % fmt.ALIGNMENT or len(self.sha256) != 32:
            raise BundleError(f"bundle field '{field}' has a bad offset {self.offset}, size {self.size} or digest")


@dataclass(frozen=True)
class HostConstant(Record):
    """A constant of the host plan (``header.constants``): a little-endian C-order array filling blob ``blob``."""

    dtype: np.dtype = declare(Dtype())
    shape: tuple[int, ...] = declare(Shape())
    blob: int = declare(INT)


# -- constants in a backend's weights payload --------------------------------------------------


@dataclass(frozen=True)
class ConstantRecord(Record):
    """One little-endian C-order array at ``offset`` (64-aligned) in a weights payload; ``nbytes`` is checked."""

    shape: tuple[int, ...] = declare(Shape())
    dtype: np.dtype = declare(Dtype())
    offset: int = declare(INT)
    nbytes: int = declare(INT)

    def check(self, field: str) -> None:
        size = math.prod(self.shape) * self.dtype.itemsize
        if self.nbytes != size:
            raise BundleError(
                f"bundle field '{field}.nbytes' = {self.nbytes}, but {self.dtype.name}{list(self.shape)} "
                f"takes {size} bytes"
            )

    @classmethod
    def of(cls, array: np.ndarray, offset: int) -> ConstantRecord:
        return cls(tuple(array.shape), array.dtype, offset, array.nbytes)

    def view(self, weights: memoryview | None, field: str) -> np.ndarray:
        """A read-only view of the array in ``weights``; BundleError if it would reach outside it."""
        return view_constant(weights, self.shape, self.dtype, self.offset, field)

    # An NPU ``const`` node carries the same record as its attrs, with shape and dtype in the
    # one-output lists every node of TVM's JSON layout uses.

    @classmethod
    def from_node_attrs(cls, attrs: Any, field: str) -> ConstantRecord:
        tensor = NpuTensor.from_record(attrs, field)
        return cls.from_record({**attrs, "shape": list(tensor.shape), "dtype": tensor.dtype.name}, field)

    def to_node_attrs(self) -> dict[str, Any]:
        return {**self.to_record(), **NpuTensor(self.shape, self.dtype).to_record()}


# -- the NPU graph ------------------------------------------------------------------------------


class NodeRef(Kind):
    """A TVM node entry ``[node, output, version]``: every NPU node has one output, so ``[node, 0, 0]``."""

    def parse(self, value: Any, field: str) -> int:
        if not isinstance(value, list) or len(value) != 3 or value[1:] != [0, 0] or type(value[0]) is not int:
            raise BundleError(f"bundle field '{field}' must be [node, 0, 0], got {describe(value)}")
        return value[0]

    def dump(self, value: int) -> list[int]:
        return [value, 0, 0]


class BodyRef(Kind):
    """A body op's operand: ``["arg", i]`` the kernel's i-th input, ``["op", j]`` an earlier body op."""

    def parse(self, value: Any, field: str) -> tuple[str, int]:
        if not (isinstance(value, list) and len(value) == 2 and value[0] in ("arg", "op") and type(value[1]) is int):
            raise BundleError(f"bundle field '{field}' must be ['arg', i] or ['op', j], got {describe(value)}")
        return value[0], value[1]

    def dump(self, value: tuple[str, int]) -> list:
        return list(value)


@dataclass(frozen=True)
class NpuTensor(Record):
    """An ``input`` node's attrs (and the type part of the others'): one output's shape and dtype."""

    shape: tuple[int, ...] = declare(OneOutput(Shape()))
    dtype: np.dtype = declare(OneOutput(Dtype()))


@dataclass(frozen=True)
class TensorPlacement(Record):
    """Where a dispatch's operand or result lives: its memory tier, and the tier it spilled from."""

    tensor: str = declare(STR)
    bytes: int = declare(INT)
    tier: str = declare(STR)
    spilled_from: str | None = declare(Nullable(STR), default=None, omit_default=True)


@dataclass(frozen=True)
class DispatchRecord(Record):
    """The compiler's decisions for one NPU dispatch (aot/compiler/backends/npu/dispatch.py)."""

    engine: str = declare(STR)
    ops: tuple[str, ...] = declare(ListOf(STR))
    fused: bool = declare(BOOL)
    reads: tuple[TensorPlacement, ...] = declare(ListOf(Nested(TensorPlacement)))
    writes: tuple[TensorPlacement, ...] = declare(ListOf(Nested(TensorPlacement)))
    #: intermediates a fused dispatch keeps inside the engine
    on_chip: tuple[str, ...] = declare(ListOf(STR))
    #: (rows, cols) over the output's last two dims, or None when untiled
    tile: tuple[int, int] | None = declare(Nullable(ListOf(INT, 2, "[rows, cols]")))
    tiles: int = declare(INT)
    macs: int = declare(INT)
    cycles: int = declare(INT)
    #: "int8": an integer kernel (int8 products, int32 accumulation); "float" otherwise.
    precision: str = declare(STR, default="float")
    #: A layout op that moves no bytes: its output is its input read with another shape.
    view: bool = declare(BOOL, default=False, omit_default=True)

    def describe(self, name: str) -> str:
        """One log line."""
        reads = ",".join(r.tier for r in self.reads)
        writes = ",".join(w.tier + (f"(spilled from {w.spilled_from})" if w.spilled_from else "") for w in self.writes)
        tiles = f"{self.tiles}x{self.tile[0]}x{self.tile[1]}" if self.tile else "none"
        fused = "+".join(self.ops) if self.fused else "no"
        return (
            f"dispatch {name}: engine={self.engine} reads={reads} writes={writes} tiles={tiles} "
            f"fused={fused} cycles={self.cycles}"
            + (f" precision={self.precision}" if self.precision != "float" else "")
            + (" view" if self.view else "")
        )


@dataclass(frozen=True)
class BodyOp(Record):
    """One canonical op of a kernel's body, run with the host kernel of ``op``."""

    op: str = declare(STR)
    inputs: tuple[tuple[str, int], ...] = declare(ListOf(BodyRef()), default=())
    attrs: dict[str, Any] = declare(MAP, default={})


@dataclass(frozen=True)
class NpuKernel(Record):
    """A ``kernel`` node's attrs: one NPU dispatch of a composite, its output type, body and decisions."""

    composite: str = declare(STR)
    shape: tuple[int, ...] = declare(OneOutput(Shape()))
    dtype: np.dtype = declare(OneOutput(Dtype()))
    body: tuple[BodyOp, ...] = declare(ListOf(Nested(BodyOp)))
    dispatch: DispatchRecord = declare(Nested(DispatchRecord))

    def check(self, field: str) -> None:
        if not self.body:
            raise BundleError(f"bundle field '{field}.body' is empty")


class _NodeAttrs(Kind):
    """A node's attrs, whose layout depends on its ``op``: parsed by :meth:`NpuNode.from_record`."""

    def parse(self, value: Any, field: str) -> Any:
        return expect(value, dict, field)

    def dump(self, value: Any) -> dict[str, Any]:
        return value.to_node_attrs() if isinstance(value, ConstantRecord) else value.to_record()


#: What each kind of node carries as attrs.
NODE_ATTRS = {"input": NpuTensor.from_record, "const": ConstantRecord.from_node_attrs, "kernel": NpuKernel.from_record}


@dataclass(frozen=True, kw_only=True)
class NpuNode(Record):
    """A node of the graph: an ``input``, a ``const`` in the weights payload, or a ``kernel`` (one dispatch)."""

    op: str = declare(STR)
    name: str = declare(STR)
    #: for a kernel, the nodes it reads (only earlier ones: a graph cannot loop)
    inputs: tuple[int, ...] = declare(ListOf(NodeRef()), default=(), omit_default=True)
    attrs: NpuTensor | ConstantRecord | NpuKernel = declare(_NodeAttrs())

    @classmethod
    def from_record(cls, record: Any, field: str) -> NpuNode:
        node = super().from_record(record, field)
        parse = NODE_ATTRS.get(node.op)
        if parse is None:
            raise BundleError(f"bundle field '{field}.op' = {describe(node.op)} is not input, const or kernel")
        return replace(node, attrs=parse(node.attrs, f"{field}.attrs"))


@dataclass(frozen=True, kw_only=True)
class NpuGraph(Record):
    """The NPU's ``graph`` payload (JSON, TVM's JSON-runtime layout less what it never reads)."""

    FORMAT = fmt.NPU_GRAPH

    format: str = declare(STR, default=fmt.NPU_GRAPH)
    region: str = declare(STR, default="npu")
    nodes: tuple[NpuNode, ...] = declare(ListOf(Nested(NpuNode)))
    #: the input nodes, in the order the region's inputs are passed
    arg_nodes: tuple[int, ...] = declare(ListOf(INT))
    #: the nodes the region returns, in order
    heads: tuple[int, ...] = declare(ListOf(NodeRef()))
