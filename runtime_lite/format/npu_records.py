"""The NPU's ``graph`` payload as records (runtime_lite/format/schema.py says how), apart from records.py.

* :class:`NpuGraph`, :class:`NpuNode`, :class:`NpuTensor`, :class:`NpuKernel`, :class:`BodyOp`:
  the graph, TVM's JSON-runtime layout (docs/npu.md);
* :class:`DispatchRecord`, :class:`TensorPlacement`: the compiler's decisions for each dispatch.

Why a module of its own: a dataclass costs its definition at import, and a bundle without an
NPU region (one onnxruntime region, say) should not pay for eight of them at every cold start.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from runtime_lite import format as fmt
from runtime_lite.errors import BundleError, describe
from runtime_lite.format.fields import expect
from runtime_lite.format.records import ConstantRecord
from runtime_lite.format.schema import (
    BOOL,
    INT,
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


# An NPU ``const`` node carries a weights payload's ConstantRecord as its attrs, with shape and dtype in the
# one-output lists every node of TVM's JSON layout uses.


def constant_from_node_attrs(attrs: Any, field: str) -> ConstantRecord:
    tensor = NpuTensor.from_record(attrs, field)
    return ConstantRecord.from_record({**attrs, "shape": list(tensor.shape), "dtype": tensor.dtype.name}, field)


def constant_to_node_attrs(record: ConstantRecord) -> dict[str, Any]:
    return {**record.to_record(), **NpuTensor(record.shape, record.dtype).to_record()}


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
        return constant_to_node_attrs(value) if isinstance(value, ConstantRecord) else value.to_record()


#: What each kind of node carries as attrs.
NODE_ATTRS = {"input": NpuTensor.from_record, "const": constant_from_node_attrs, "kernel": NpuKernel.from_record}


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
