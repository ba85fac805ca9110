"""What is known, element by element, about a 1-d integer tensor computed at run time.

Exporters with dynamic axes compute target shapes from ``Shape`` and constants:
GPT-2's ``x.view(x.size()[:-1] + (nf,))`` becomes Shape -> Slice -> Concat(.., [96])
-> Reshape. Folding cannot make that a constant, but each element is still known:
a symbol of the input (``batch``), or a number. Reading them back through the
producers lets ``reshape`` and ``expand`` keep those dims instead of inventing fresh
ones, so a later Split over the 96 channels still sees 96.
"""

from __future__ import annotations

from aot.ir.graph import Value
from aot.ir.types import Dim

#: Element i is a known dim (an int or a symbol), or None where nothing is known.
Elements = list[Dim | None]
_MAX_ELEMENTS = 64  # shape tensors are short; anything longer is data, not a shape


def known_elements(value: Value) -> Elements | None:
    """The elements of a 0-d or 1-d integer ``value``, or None when even its length is unknown."""
    t = value.type
    if t.rank > 1 or t.dtype not in ("int64", "int32"):
        return None
    if value.is_constant:
        flat = value.data.reshape(-1)
        return [int(v) for v in flat] if flat.size <= _MAX_ELEMENTS else None
    node = value.producer
    reader = _READERS.get(node.op) if node is not None else None
    result = reader(node) if reader is not None else None
    if result is None and t.rank == 1 and isinstance(t.shape[0], int) and t.shape[0] <= _MAX_ELEMENTS:
        return [None] * t.shape[0]
    return result


def _shape(node) -> Elements:
    dims = list(node.inputs[0].type.shape)
    return dims[slice(node.attrs["start"], node.attrs["end"])]


def _concat(node) -> Elements | None:
    parts = [known_elements(v) for v in node.inputs]
    return None if any(p is None for p in parts) else [e for p in parts for e in p]


def _same(node) -> Elements | None:  # cast, squeeze, unsqueeze, reshape, copy of a short int vector
    return known_elements(node.inputs[0])


def _gather(node) -> Elements | None:
    data, indices = node.inputs
    elements = known_elements(data)
    if elements is None or not indices.is_constant or data.type.rank != 1:
        return None
    try:
        return [elements[int(i)] for i in indices.data.reshape(-1)]
    except IndexError:
        return None


def _slice(node) -> Elements | None:
    elements = known_elements(node.inputs[0])
    if elements is None or node.inputs[0].type.rank != 1:
        return None
    from runtime_lite.kernels.shape import onnx_slice

    (start,), (end,), (step,) = node.attrs["starts"], node.attrs["ends"], node.attrs["steps"]
    return elements[onnx_slice(len(elements), start, end, step)]


_READERS = {
    "shape": _shape,
    "concat": _concat,
    "cast": _same,
    "squeeze": _same,
    "unsqueeze": _same,
    "reshape": _same,
    "copy": _same,
    "gather": _gather,
    "slice": _slice,
}
