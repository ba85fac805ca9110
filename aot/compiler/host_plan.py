"""Lower a graph to the host executable plan (the ``plan`` record of a bundle).

The plan is a flat instruction list over numbered slots, written as the records
runtime_lite declares (``PlanRecord``, ``Instruction`` in runtime_lite/format/records.py);
runtime_lite/execution/plan.py runs it and docs/bundle-format.md gives the layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from aot.compiler.memory_plan import MemoryPlan, buffer_flags, plan_memory
from aot.errors import BuildError
from aot.ir.graph import Graph
from runtime_lite.format.records import Instruction, PlanRecord


@dataclass
class LoweredPlan:
    """A graph lowered to a plan: the record the bundle stores, the constants it indexes, the memory plan."""

    plan: PlanRecord
    constants: list[np.ndarray]
    memory: MemoryPlan

    @property
    def record(self) -> dict[str, Any]:
        """The ``plan`` record, as written into a bundle."""
        return self.plan.to_record()


def plain(value: Any, where: str) -> Any:
    """Attribute values as msgpack-safe Python data (no numpy scalars, tuples as lists)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v, where) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    raise BuildError(f"{where}: attribute value of type {type(value).__name__} cannot be stored in a bundle")


def copy_aliased_outputs(graph: Graph) -> int:
    """Give each graph output a buffer of its own.

    An output that is a graph input, a constant, or a view of one, would hand the
    caller memory it does not own (a read-only mapped weight, its own input); two
    outputs viewing one buffer would alias each other. Such outputs get a copy.
    """
    external = {id(v) for v in graph.inputs} | {id(v) for v in graph.constants()}
    root = {id(v): id(v) for v in graph.inputs + graph.constants()}
    for node in graph.nodes:
        for o in node.outputs:
            root[id(o)] = root[id(node.inputs[0])] if buffer_flags(node.op).view else id(o)
    claimed: set[int] = set()
    copies = 0
    for i, v in enumerate(graph.outputs):
        owner = root.get(id(v), id(v))
        if owner in external or owner in claimed:
            name = v.name
            v.name = graph.unique_name(f"{name}_value")
            copied = graph.op("copy", v, name=name)
            copied.name = name
            graph.outputs[i] = copied
            copies += 1
        else:
            claimed.add(owner)
    return copies


def lower_to_host_plan(graph: Graph) -> LoweredPlan:
    copy_aliased_outputs(graph)
    memory = plan_memory(graph)
    constant_values = graph.constants()
    slot = memory.slot_of
    instructions = [
        Instruction(
            op=node.op,
            name=node.name,
            inputs=tuple(slot[id(v)] for v in node.inputs),
            outputs=tuple(slot[id(v)] for v in node.outputs),
            attrs={k: plain(v, f"{node.op} '{node.name}'.{k}") for k, v in node.attrs.items()},
            inplace=memory.inplace.get(id(node)),
            free=tuple(memory.frees.get(id(node)) or ()),
        ).to_record()
        for node in graph.nodes
    ]
    plan = PlanRecord(
        num_slots=memory.num_slots,
        inputs=tuple(slot[id(v)] for v in graph.inputs),
        outputs=tuple(slot[id(v)] for v in graph.outputs),
        constants=tuple((slot[id(v)], i) for i, v in enumerate(constant_values)),
        instructions=instructions,
    )
    return LoweredPlan(plan, [v.data for v in constant_values], memory)
