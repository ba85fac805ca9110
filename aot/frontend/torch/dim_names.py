"""The names users give symbolic dims (``torch.export.Dim("batch")``), instead of torch's ``s77``.

torch.export keys every symbolic dim by a fresh sympy symbol; the name given to
``Dim`` survives only in the program's shape environment, as the debug name of each
input size that the symbol stands for. A bundle's signature should read
``images: float32[batch,3,224,224]``, as the user wrote it. A program reloaded from a
.pt2 file has lost those names: its symbols are kept.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from aot.ir.graph import Graph
from aot.ir.types import TensorType


def user_dim_names(placeholders: list[Any]) -> dict[str, str]:
    """Torch's symbol -> the user's name for it, for each input dim whose name torch still knows."""
    names: dict[str, str] = {}
    for node in placeholders:
        for d in getattr(node.meta.get("val"), "shape", ()):
            symbolic = getattr(d, "node", None)
            env = getattr(symbolic, "shape_env", None)
            if env is None:
                continue
            symbol = symbolic.expr
            for source in getattr(env, "var_to_sources", {}).get(symbol, ()):
                name = getattr(env, "source_name_to_debug_name", {}).get(source.name)
                if isinstance(name, str) and name.isidentifier():
                    names.setdefault(str(symbol), name)
    uses = Counter(names.values())
    # Two symbols under one name, or a name that is another symbol's own: keep torch's symbols for those.
    return {s: n for s, n in names.items() if uses[n] == 1 and n not in names.keys() - {s}}


def rename_dims(graph: Graph, names: dict[str, str]) -> None:
    """Rewrite every symbolic dim with ``names``: value types, and the dim lists in attributes
    (a reshape's target shape names its symbols too, and the runtime binds them by name)."""
    if not names:
        return
    for node in graph.nodes:
        for key, attr in node.attrs.items():
            if isinstance(attr, (list, tuple)) and any(isinstance(d, str) and d in names for d in attr):
                node.attrs[key] = type(attr)(names.get(d, d) if isinstance(d, str) else d for d in attr)
    values = [*graph.inputs, *(v for node in graph.nodes for v in node.outputs), *graph.outputs]
    for value in values:
        shape = value.type.shape
        if any(isinstance(d, str) and d in names for d in shape):
            value.type = TensorType(
                tuple(names.get(d, d) if isinstance(d, str) else d for d in shape), value.type.dtype
            )
