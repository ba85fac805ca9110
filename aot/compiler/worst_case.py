"""The activation memory a bundle with bounded dims needs at its upper bounds.

With every symbolic input dim bounded above, the shapes at the bounds are a static
graph: the inputs are set to them, every node re-inferred (shape arithmetic follows
through its producers), the memory plan's peak read, and the symbolic types put back.
The second figure adds each node's kernel cost (its declared bound on outputs and scratch,
runtime_lite/kernels/cost.py) to what is live before it, as a run's ``max_memory`` budget
counts it: the budget that admits every size inside the bounds. These are what ``aot-inspect`` and ``runtime-lite info`` state as the worst case.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.lib.stride_tricks import as_strided

from aot.errors import AotError
from aot.ir.graph import Graph, Node, Value
from aot.passes.shape_inference import infer_shapes
from runtime_lite.kernels import KERNELS

T = TypeVar("T")


@dataclass(frozen=True)
class WorstCase:
    """At the upper bounds: the plan's peak of live activations, and the peak a run's memory budget counts
    (each kernel's declared cost, its conservative bound on outputs and scratch, on top of what is live)."""

    activation_bytes: int
    budget_bytes: int


def _bounds(graph: Graph, which: str) -> dict[str, int] | None:
    """Each symbolic input dim at its ``which`` ("min" or "max") bound; None unless every one is bounded."""
    given = {name: getattr(info, which) for name, info in graph.dims.items() if getattr(info, which) is not None}
    symbols = {d for v in graph.inputs for d in v.type.shape if isinstance(d, str)}
    if not symbols or not symbols <= given.keys():
        return None
    return given


def at_sizes(graph: Graph, sizes: dict[str, int], measure: Callable[[Graph], T]) -> T | None:
    """``measure(graph)`` with the inputs' symbolic dims set to ``sizes`` and every node re-inferred; the
    symbolic types put back after. None where the sizes make a shape impossible (nothing wrong is stated)."""
    values = [*graph.inputs, *(v for node in graph.nodes for v in node.outputs)]
    saved = [v.type for v in values]
    try:
        for v in graph.inputs:
            v.type = v.type.with_shape(sizes.get(d, d) if isinstance(d, str) else d for d in v.type.shape)
        infer_shapes(graph)
        return measure(graph)
    except AotError:
        return None
    finally:
        for v, t in zip(values, saved):
            v.type = t


def worst_case_activation_bytes(graph: Graph) -> WorstCase | None:
    """The memory a run needs with every symbolic input dim at its maximum; None if one is unbounded."""
    uppers = _bounds(graph, "max")
    if uppers is None:
        return None
    from aot.compiler.memory_plan import plan_memory

    def measure(g: Graph) -> WorstCase | None:
        activations, budget = plan_memory(g).peak_bytes, plan_memory(g, _kernel_bytes).peak_bytes
        return None if activations is None or budget is None else WorstCase(activations, budget)

    return at_sizes(graph, uppers, measure)


def shapes_at_bounds(graph: Graph) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each value's shape with every symbolic input dim at its minimum and at its maximum, by id; empty unless
    every one is bounded. Sizes grow with their inputs through every op a region takes (convolutions, pools,
    resizes, reshapes), so a value's run-time shape lies between the two: TensorRT's profile for it."""
    lowers, uppers = _bounds(graph, "min"), _bounds(graph, "max")
    if lowers is None or uppers is None:
        return {}

    def shapes(g: Graph) -> dict[int, tuple[int, ...]]:
        values = [*g.inputs, *(v for node in g.nodes for v in node.outputs)]
        return {id(v): tuple(v.type.shape) for v in values if v.type.is_static}

    low, high = at_sizes(graph, {k: max(v, 1) for k, v in lowers.items()}, shapes), at_sizes(graph, uppers, shapes)
    if low is None or high is None:
        return {}
    return {key: (low[key], high[key]) for key in low.keys() & high.keys()}


def _stand_in(value: Value) -> np.ndarray:
    """The operand a cost reads: a constant's data, else an array of the value's shape that owns one element."""
    if value.is_constant:
        return value.data
    return as_strided(np.zeros(1, value.type.dtype), shape=value.type.shape, strides=(0,) * value.type.rank)


def _kernel_bytes(node: Node) -> int:
    kernel = KERNELS.get(node.op)
    if kernel is None or not all(v.type.is_static for v in node.inputs):
        return 0
    try:
        return int(kernel.cost(*(_stand_in(v) for v in node.inputs), **node.attrs))
    except (ValueError, TypeError, IndexError):  # a shape tensor's stand-in zeros: its kernel costs little
        return 0
