"""What a host plan derives from its inputs' shapes alone, remembered per input signature.

A bundle with symbolic dims keeps the shape arithmetic exporters write (``Shape -> Gather
-> Unsqueeze -> Concat -> Reshape``, ``y[:, :, : y.shape[2] // 2]``) as instructions, which a
bundle built for one size folds away. Those instructions read nothing but shapes and
constants, so their results are a function of the input signature: the first run at a
signature computes them and keeps copies; later runs at that signature put the copies in
their slots instead of calling the kernels. Only small integer results are kept (a shape
tensor, an index): anything larger is data, and the signature is then not remembered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: Ops whose result is a function of their operands' values alone, as shape arithmetic uses them.
SHAPE_OPS = frozenset(
    "shape gather slice concat unsqueeze squeeze reshape flatten cast copy add subtract multiply divide floor "
    "ceil maximum minimum equal where reduce_prod reduce_sum reduce_max reduce_min range".split()
)
#: A remembered value is a shape tensor or an index, never data.
MAX_ELEMENTS = 64
#: Input signatures remembered per plan; a service fed ever-new sizes starts again past it.
MAX_SIGNATURES = 64

Row = tuple  # (step, cost, out, free, entry): what the plan's run loop unpacks per instruction


def shape_derived(instructions: Sequence[Any], constant_slots: Sequence[int]) -> frozenset[int]:
    """Indices of the instructions whose results depend on the inputs' shapes and the constants only."""
    kind: dict[int, str] = dict.fromkeys(constant_slots, "constant")
    derived = set()
    for index, ins in enumerate(instructions):
        sources = [kind.get(slot) for slot in ins.inputs]
        is_derived = ins.op in SHAPE_OPS and (
            ins.op == "shape" or (all(sources) and "derived" in sources)
        )  # a shape op reads only its operand's shape; the rest read derived values and constants
        for slot in ins.outputs:
            if is_derived:
                kind[slot] = "derived"
            else:
                kind.pop(slot, None)
        for slot in ins.free:
            kind.pop(slot, None)
        if is_derived:
            derived.add(index)
    return frozenset(derived)


def _copies(values: Sequence[Any]) -> tuple[np.ndarray, ...] | None:
    copies = tuple(np.array(v, copy=True) for v in values)
    return copies if all(c.size <= MAX_ELEMENTS for c in copies) else None


def _replay(outs: tuple[int, ...], values: tuple[np.ndarray, ...]) -> Callable[[list], None]:
    def step(slots: list) -> None:
        for slot, value in zip(outs, values):
            slots[slot] = value.copy()  # a later instruction may write into it in place

    return step


def _free(slots: list) -> int:
    return 0


class SignatureCache:
    """The run loop's rows per input signature: shape-derived instructions replayed from their results."""

    def __init__(self, rows: list[Row], derived: frozenset[int]):
        self._rows = rows
        self._derived = derived
        self._known: dict[tuple, list[Row]] = {}
        self._lock = threading.Lock()

    def rows_for(self, inputs: Sequence[Any]) -> tuple[list[Row], Callable[[], None] | None]:
        """The rows to run for these inputs, and what to call once the run succeeds (None: nothing to keep)."""
        key = tuple(getattr(value, "shape", None) for value in inputs)
        rows = self._known.get(key)
        if rows is not None:
            return rows, None
        captured: dict[int, tuple[np.ndarray, ...] | None] = {}
        recording = list(self._rows)
        for index in self._derived:
            step, cost, out, free, entry = recording[index]
            recording[index] = (self._recorder(step, entry.outs, index, captured), cost, out, free, entry)

        def keep() -> None:
            if len(captured) != len(self._derived) or any(v is None for v in captured.values()):
                return  # data, not shapes (or an instruction that did not run): not remembered
            replayed = list(self._rows)
            for index, values in captured.items():
                _, _, out, free, entry = replayed[index]
                replayed[index] = (_replay(entry.outs, values), _free, out, free, entry)
            with self._lock:
                if len(self._known) >= MAX_SIGNATURES:
                    self._known.clear()
                self._known[key] = replayed

        return recording, keep

    @staticmethod
    def _recorder(step, outs: tuple[int, ...], index: int, captured: dict) -> Callable[[list], None]:
        def recording(slots: list) -> None:
            step(slots)
            captured[index] = _copies([slots[slot] for slot in outs])

        return recording
