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
* :class:`ConstantRecord`: one array in a backend's weights payload.

The NPU's ``graph`` payload has records of its own (npu_records.py), imported only where an NPU
region is built or loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime_lite import format as fmt
from runtime_lite.errors import BundleError
from runtime_lite.format.schema import (
    BYTES,
    INT,
    LIST,
    MAP,
    STR,
    Dtype,
    ListOf,
    Nullable,
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
