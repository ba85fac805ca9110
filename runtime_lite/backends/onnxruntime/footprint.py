"""The activation memory an onnxruntime run will take, known before it starts, so ``max_memory`` holds there too.

The host plan checks every allocation against the run's ``max_memory`` before it
happens (execution/limits.py); onnxruntime allocates whatever its graph asks. A
recipe of a few hundred bytes can ask for gigabytes: an ``Expand`` of a one-element
input to a constant ``[23170, 23170]`` took a delegate run to 2.3 GB of resident
memory under ``max_memory = 1 GiB`` (the host plan refused the same graph before
allocating), and a larger one gets the process killed for memory. So before a
session runs, the recipe's shapes are followed from the actual input shapes (the
walk of shapes.py) and its activations are added up in node order, each freed
after its last reader, as onnxruntime's own memory plan frees them: the peak must fit
the run's budget, or the run is refused with ``BudgetExceeded`` as the host plan's is.

Where the walk cannot follow a value at load (an op it does not model, a shape that
depends on values it cannot read), the run's memory cannot be bounded, and the region
runs its host plan instead (fail closed, the load says why), as for unverified
geometry. onnxruntime's scratch (a convolution's packed weights, its arena's slack)
is its own and not counted; outputs and intermediates are.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from runtime_lite.backends.onnxruntime.shapes import BadGeometry, Node, Shape, walk
from runtime_lite.execution.limits import BudgetExceeded

#: Bytes per element of each ONNX element type (TensorProto.DataType).
ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}
BOOL, INT64 = 9, 7
FLOAT, UINT8, INT32 = 1, 2, 6
#: Ops whose outputs have element types of their own, whatever their inputs.
OUTPUT_TYPES = {"DynamicQuantizeLinear": (UINT8, FLOAT, UINT8), "MatMulInteger": (INT32,)}
#: Ops whose output is boolean, whatever their inputs.
BOOLEAN_OPS = frozenset(
    {"Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor", "Not", "IsNaN", "IsInf"}
)
#: Input signatures remembered per session (a server sees a few batch and sequence sizes).
REMEMBERED_SIGNATURES = 256


def _output_type(node: Node, types: dict[str, int]) -> int | None:
    """The element type of ``node``'s outputs (all of them: only the ops of ``OUTPUT_TYPES`` mix types)."""
    op = node.op_type

    def of(i: int) -> int | None:
        return types.get(node.inputs[i]) if i < len(node.inputs) and node.inputs[i] else None

    if op == "Cast":
        to = node.attrs.get("to")
        return to if isinstance(to, int) else None
    if op in BOOLEAN_OPS:
        return BOOL
    if op in ("ArgMax", "ArgMin", "Shape"):
        return INT64
    if op == "QuantizeLinear":  # opset 21's output_dtype, else the zero point's type, else uint8
        declared = node.attrs.get("output_dtype")
        if isinstance(declared, int) and declared:
            return declared
        return of(2) if len(node.inputs) > 2 and node.inputs[2] else 2
    if op in ("DequantizeLinear", "Where"):
        return of(1)
    if op == "ConstantOfShape":  # its value's type (one element), float32 without one
        value = node.attrs.get("value")
        if value is None:
            return FLOAT
        if not isinstance(value, dict) or value.get("dims") not in ((1,), ()):
            return None  # not what onnxruntime takes: nothing the walk sizes
        kind = value.get("data_type")
        return kind if isinstance(kind, int) else None
    return of(0)


def _element_types(inputs: dict[str, int], nodes: Sequence[Node]) -> dict[str, int]:
    types = dict(inputs)
    for node in nodes:
        fixed = OUTPUT_TYPES.get(node.op_type)
        if fixed is not None:
            types.update((name, kind) for name, kind in zip(node.outputs, fixed) if name)
            continue
        kind = _output_type(node, types)
        if kind is not None:
            for name in node.outputs:
                if name:
                    types[name] = kind
    return types


class Footprint:
    """The peak bytes of a recipe's activations for given input shapes, remembered per input signature."""

    def __init__(
        self,
        graph_inputs: dict[str, Shape],
        initializers: dict[str, Shape],
        operands: dict,
        nodes: Sequence[Node],
        types: dict[str, int],
        input_names: Sequence[str],
        output_names: Sequence[str],
        shapes: dict[str, Shape] | None = None,
    ) -> None:
        """``shapes``: what the walk followed from the declared inputs, where the recipe check already walked."""
        self._initializers, self._operands, self._nodes = initializers, operands, list(nodes)
        self._input_names = list(input_names)
        self._types = _element_types(types, self._nodes)
        last_use: dict[str, int] = {}
        for index, node in enumerate(self._nodes):
            for name in node.inputs:
                if name:
                    last_use[name] = index
        producer = {name: index for index, node in enumerate(self._nodes) for name in node.outputs if name}
        # Alive to the end: every graph output (``output_names``: onnxruntime keeps each one, fetched or not)
        # and every value no node reads (an output a recipe does not declare: counted the same, an upper bound).
        kept = set(output_names) | {name for name in producer if name not in last_use}
        #: Per node: the activations freed once it ran (its operands read for the last time).
        self._frees: list[list[str]] = [[] for _ in self._nodes]
        for name in producer:
            if name not in kept:
                self._frees[last_use[name]].append(name)
        if shapes is None:
            shapes, _ = walk(graph_inputs, initializers, operands, self._nodes)
        #: Why no run of this recipe can be bounded (the first activation the walk lost), or None.
        self.unbounded = self._lost(shapes)
        self._peaks: OrderedDict[tuple, int] = OrderedDict()
        self._lock = threading.Lock()
        declared = tuple(graph_inputs.get(name) for name in self._input_names)
        if self.unbounded is None and all(s is not None and None not in s for s in declared):
            self._peaks[declared] = self._peak(shapes)  # static inputs: the walk at load already sized the run

    def _lost(self, shapes: dict[str, Shape]) -> str | None:
        for node in self._nodes:
            for name in node.outputs:
                if name and (name not in shapes or name not in self._types or self._types[name] not in ITEMSIZE):
                    return f"the size of {node.op_type} {node.where}'s output {name!r} could not be followed"
        return None

    def peak_bytes(self, input_shapes: Sequence[tuple[int, ...]]) -> int:
        """The most activation bytes alive at once for these input shapes; BadGeometry where they cannot fit."""
        key = tuple(input_shapes)
        peak = self._peaks.get(key)
        if peak is None:
            peak = self._measure(key)
            with self._lock:
                self._peaks[key] = peak
                if len(self._peaks) > REMEMBERED_SIGNATURES:
                    self._peaks.popitem(last=False)
        return peak

    def _measure(self, input_shapes: tuple) -> int:
        return self._peak(walk(dict(zip(self._input_names, input_shapes)), self._initializers, self._operands,
                               self._nodes)[0])  # fmt: skip

    def _peak(self, shapes: dict[str, Shape]) -> int:
        live = peak = 0
        sizes: dict[str, int] = {}
        for node, frees in zip(self._nodes, self._frees):
            for name in node.outputs:
                if name:
                    shape = shapes.get(name)
                    if shape is None or any(d is None or d < 0 for d in shape):
                        raise BadGeometry(f"the size of {node.op_type} {node.where}'s output could not be followed")
                    sizes[name] = math.prod(shape) * ITEMSIZE[self._types[name]]
                    live += sizes[name]
            peak = max(peak, live)
            live -= sum(sizes.pop(name, 0) for name in frees)
        return peak


__all__ = ["ITEMSIZE", "Footprint"]


def check_run(footprint: Footprint | None, inputs: Sequence, engine: str, max_memory: int) -> None:
    """Before ``engine`` runs a recipe on ``inputs``: BudgetExceeded where the walk sizes its activations past
    ``max_memory``, ValueError where the inputs' shapes cannot fit the recipe (None: nothing to size)."""
    if footprint is None:
        return
    try:
        need = footprint.peak_bytes([x.shape if type(x) is np.ndarray else np.shape(x) for x in inputs])
    except BadGeometry as e:
        raise ValueError(f"inputs of shapes {[list(np.shape(x)) for x in inputs]} do not fit: {e}") from None
    if need > max_memory:
        raise BudgetExceeded(
            f"{engine} would hold {need:,} bytes of activations, more than max_memory = {max_memory:,}"
        )
