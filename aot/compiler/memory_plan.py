"""Memory planning for the host plan: liveness, buffer aliasing, in-place reuse, slot reuse.

Values live in numbered slots. Three decisions are made here, ahead of time:

* **frees**: each instruction lists the slots whose value dies there, so a buffer
  is released the moment its last reader has run (not when the slot is reused);
* **in place**: an elementwise op writes its result into an operand's buffer when
  that buffer is fresh (produced by a kernel, not a graph input or constant) and
  neither it nor any view of it is read later;
* **slot reuse**: a linear scan hands dead slots to new values, so a plan needs as
  many slots as values are live at once, not one per value.

Views matter: ``reshape``/``slice``/``transpose`` results share their input's
buffer, so values are grouped by buffer ("root") and a buffer dies only when every
value in its group has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aot.ir.graph import Graph, Node, Value
from aot.ir.types import TensorType
from runtime_lite.kernels import KERNELS, Kernel

#: How a backend call (``call_module``) treats buffers: fresh outputs, never in place, never a view.
OPAQUE_CALL = Kernel("call_module", lambda *args: None)


def buffer_flags(op: str) -> Kernel:
    """The in-place/view flags of ``op``'s host kernel (a backend call has neither)."""
    return KERNELS.get(op, OPAQUE_CALL)


@dataclass
class MemoryPlan:
    slot_of: dict[int, int]  # id(value) -> slot
    num_slots: int
    inplace: dict[int, int]  # id(node) -> operand index written in place
    frees: dict[int, list[int]]  # id(node) -> slots released after it
    peak_bytes: int | None

    @property
    def inplace_count(self) -> int:
        return len(self.inplace)


def _broadcasts_into(shape: tuple, out: tuple) -> bool:
    """True when every dim of ``shape`` (right-aligned) is 1 or provably equal to the output's."""
    if len(shape) > len(out):
        return False
    return all(d == 1 or d == o for d, o in zip(shape[::-1], out[::-1]))


def _can_write_into(node: Node, k: int, out_type: TensorType) -> bool:
    operand = node.inputs[k]
    if operand.type != out_type:
        return False
    # The other operands must fit inside the output without widening it.
    return all(_broadcasts_into(v.type.shape, out_type.shape) for i, v in enumerate(node.inputs) if i != k)


def plan_memory(graph: Graph, call_bytes: Callable[[Node], int] | None = None) -> MemoryPlan:
    """Slots, in-place writes and frees; the peak of live activations, where ``call_bytes`` (what a node's
    kernel allocates, outputs and scratch) counts each node's own allocation on top of what is live before it."""
    nodes = graph.nodes
    end = len(nodes)
    last_use: dict[int, int] = {}
    for i, node in enumerate(nodes):
        for v in node.inputs:
            last_use[id(v)] = i
    for v in graph.outputs:
        last_use[id(v)] = end

    external = {id(v) for v in graph.inputs} | {id(v) for v in graph.constants()}
    root: dict[int, int] = {}  # id(value) -> id of the value owning its buffer
    group_last: dict[int, int] = {}  # root -> last use over the whole group

    def join(value: Value, owner: int) -> None:
        root[id(value)] = owner
        group_last[owner] = max(group_last.get(owner, -1), last_use.get(id(value), -1))

    for v in graph.inputs + graph.constants():
        join(v, id(v))

    inplace: dict[int, int] = {}
    for i, node in enumerate(nodes):
        kernel = buffer_flags(node.op)
        out = node.outputs[0]
        chosen = None
        if len(node.outputs) == 1:
            for k in kernel.inplace:
                if k >= len(node.inputs):
                    continue
                owner = root[id(node.inputs[k])]
                if owner not in external and group_last[owner] == i and _can_write_into(node, k, out.type):
                    chosen = k
                    break
        if chosen is not None:
            inplace[id(node)] = chosen
            join(out, root[id(node.inputs[chosen])])
        elif kernel.view:
            for o in node.outputs:
                join(o, root[id(node.inputs[0])])
        else:
            for o in node.outputs:
                join(o, id(o))

    return _assign_slots(graph, last_use, inplace, root, group_last, call_bytes)


def _assign_slots(graph, last_use, inplace, root, group_last, call_bytes=None) -> MemoryPlan:
    slot_of: dict[int, int] = {}
    pool: list[int] = []
    num_slots = 0

    def take() -> int:
        nonlocal num_slots
        if pool:
            return pool.pop()
        num_slots += 1
        return num_slots - 1

    for v in graph.inputs:
        slot_of[id(v)] = take()
    for v in graph.constants():
        slot_of[id(v)] = take()
    constants = {id(v) for v in graph.constants()}

    frees: dict[int, list[int]] = {}
    live_bytes: dict[int, int] = {}
    peak = 0
    static = True
    for i, node in enumerate(graph.nodes):
        dying = []
        seen = set()
        for v in node.inputs:
            if id(v) in seen or id(v) in constants:
                continue
            seen.add(id(v))
            if last_use.get(id(v)) == i:
                dying.append(slot_of[id(v)])
        k = inplace.get(id(node))
        if k is not None:
            reused = slot_of[id(node.inputs[k])]
            slot_of[id(node.outputs[0])] = reused
            dying = [s for s in dying if s != reused]
        pool.extend(sorted(dying, reverse=True))
        for o in node.outputs:
            if id(o) not in slot_of:
                slot_of[id(o)] = take()
        reused_now = {slot_of[id(o)] for o in node.outputs}
        frees[id(node)] = [s for s in dying if s not in reused_now]

        # Bookkeeping for the peak: fresh buffers are born at their producer, die with their group.
        if call_bytes is not None:
            peak = max(peak, sum(live_bytes.values()) + call_bytes(node))
        for o in node.outputs:
            if root[id(o)] == id(o) and o.type.nbytes is not None:
                live_bytes[id(o)] = o.type.nbytes
            elif o.type.nbytes is None:
                static = False
        peak = max(peak, sum(live_bytes.values()))
        for owner in [r for r in live_bytes if group_last[r] <= i]:
            del live_bytes[owner]

    return MemoryPlan(
        slot_of,
        num_slots,
        inplace,
        frees,
        peak if static else None,
    )
