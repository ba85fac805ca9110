"""Sizes known only at run time: ``x.size(1)`` under a dynamic dim, and Python arithmetic on it.

torch.export writes ``seq = input_ids.size(1)`` as ``aten.sym_size`` and ``seq * 2`` or
``seq // 4`` as calls to Python's ``operator`` functions. Each becomes a
``SymbolicSize``: torch's symbol for it plus a 0-d int64 IR value that computes it, so
converters can build run-time shapes (``arange(seq)``, ``expand(batch, seq)``) from it.
Sizes that are plain ints stay ints and fold away.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from aot.frontend.torch.aten import ATEN, PYTHON_CALLS, aten
from aot.frontend.torch.context import AtenContext, SymbolicSize

SYMBOLIC_PREFIX = "sym."


@aten("sym_size")
def _sym_size(ctx: AtenContext) -> int | SymbolicSize:
    x = ctx["self"]
    axis = ctx["dim"] % x.type.rank
    d = x.type.shape[axis]
    return d if isinstance(d, int) else SymbolicSize(d, ctx.dim(x, axis))


def _symbol(ctx: AtenContext) -> str:
    return str(ctx.node.meta.get("val", ctx.name))


def _arithmetic(op: str, python: Callable[[int, int], int]) -> Callable[[AtenContext], Any]:
    def convert(ctx: AtenContext) -> int | SymbolicSize:
        a, b = ctx["args"]
        if not isinstance(a, SymbolicSize) and not isinstance(b, SymbolicSize):
            return python(a, b)
        if not all(isinstance(v, (int, SymbolicSize)) for v in (a, b)):
            raise ctx.unsupported(f"arithmetic on sizes with {type(a).__name__} and {type(b).__name__}")
        x, y = ctx.size(a), ctx.size(b)
        if op == "floor_divide":
            value = ctx.floor_divide(x, y)
        elif op == "mod":
            value = ctx.emit("mod", x, y, fmod=0)
        else:
            value = ctx.emit(op, x, y)
        return SymbolicSize(_symbol(ctx), value)

    return convert


SIZE_ARITHMETIC = {
    operator.add: ("add", operator.add),
    operator.sub: ("subtract", operator.sub),
    operator.mul: ("multiply", operator.mul),
    operator.floordiv: ("floor_divide", operator.floordiv),
    operator.mod: ("mod", operator.mod),
}
for _fn, (_op, _python) in SIZE_ARITHMETIC.items():
    PYTHON_CALLS[_fn] = f"{SYMBOLIC_PREFIX}{_op}"
    ATEN[f"{SYMBOLIC_PREFIX}{_op}"] = _arithmetic(_op, _python)
