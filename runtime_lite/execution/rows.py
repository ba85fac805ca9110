"""Whether one row of a batch can change another row's answer: what a server must know before it merges requests.

A batching server concatenates requests along the batch dim on the assumption every
batching server makes: rows are independent, so a request's answer does not depend on
what it was batched with. An op that takes one statistic over the whole tensor at run
time breaks that. The one aot writes is ``dynamic_quantize`` (ONNX DynamicQuantizeLinear,
inserted before each matmul by ``int8_scheme=dynamic``, which ``auto`` picks for
transformers): one activation range for the whole batch, so a neighbour's wide range
coarsens every other row's rounding (PP-OCRv4's recognizer: up to 5.3e-2 relative L2, 1
reading in 60 changed, docs/quantization.md). The same holds for a model that arrives
already quantized that way (onnxruntime's ``quantize_dynamic``).

The ops are found where they run: the host plan, and each delegate region's host plan
(its ``fallback`` payload), which computes the same function as the region's engine.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: Ops whose result for one row depends on the other rows of the tensor, and why, for the server's note.
COUPLING_OPS = {
    "dynamic_quantize": "quantizes activations with one range over the whole batch, found at run time "
    "(dynamic int8), so a request's rows change its neighbours' rounding",
}


def row_coupling(plans: Iterable[tuple[str, Iterable[tuple[Any, Any]]]]) -> str | None:
    """Why rows of a batch are not independent, naming the op and where it runs; None where they are.

    ``plans``: (where, each instruction's (op, name)) for the host plan and each region's. A region's plan is
    read from its payload as the bundle wrote it (a backend that runs its engine may never bind it), so an op
    may be any msgpack value: only a string names an op.
    """
    for where, instructions in plans:
        for op, name in instructions:
            if type(op) is str and op in COUPLING_OPS:
                return f"{where} {COUPLING_OPS[op]} ({op} {name!r})"
    return None


__all__ = ["COUPLING_OPS", "row_coupling"]
