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

from aot.ir.dims import DimInfo, DimNamer, DimRange, as_given, is_raw_name
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


def _symbol_ranges(placeholders: list[Any]) -> dict[str, tuple[int, int]]:
    """Torch's symbol -> (min, max) where the program bounds it above (``Dim("h", min=32, max=1280)``)."""
    ranges = {}
    for node in placeholders:
        for d in getattr(node.meta.get("val"), "shape", ()):
            symbolic = getattr(d, "node", None)
            env = getattr(symbolic, "shape_env", None)
            expr = getattr(symbolic, "expr", None)
            value_range = getattr(env, "var_to_range", {}).get(expr)
            if value_range is None and expr is not None:  # a derived dim (2*h): the range torch bounds it by
                value_range = _derived_range(expr, getattr(env, "var_to_range", {}))
            if value_range is None:
                continue
            if str(value_range.upper) in ("int_oo", "oo"):  # bounded below only, as torch says of any dim
                continue
            low, high = int(value_range.lower), int(value_range.upper)
            # torch starts every range at 2 (it specializes sizes 0 and 1 while tracing); the program holds
            # for those too, so only a minimum above 2 is the user's own
            ranges[str(symbolic.expr)] = (low if low > 2 else 0, high)
    return ranges


def _derived_range(expr: Any, var_to_range: dict) -> Any:
    """The range of a derived dim's expression (``2*h`` with h in 2..32: 4..64) from its symbols' ranges, or None:
    without it a bundle would accept lengths torch's own guards refuse."""
    try:
        from torch.utils._sympy.value_ranges import bound_sympy

        return bound_sympy(expr, var_to_range)
    except Exception:  # noqa: BLE001 - an expression torch cannot bound: the dim stays unbounded, as before
        return None


def name_signature_dims(graph: Graph, placeholders: list[Any], given: dict[str, Any]) -> None:
    """Readable names for torch's raw symbols (``s77`` of a reloaded .pt2), each dim's origin, and its bounds
    (the program's ``Dim`` ranges, or ``input_shapes`` bounds), into ``graph.dims``."""
    ranges = _symbol_ranges(placeholders)
    user_names = set(user_dim_names(placeholders).values())
    namer = DimNamer({d for v in graph.inputs for d in v.type.shape if isinstance(d, str) and not is_raw_name(d)})
    renames: dict[str, str] = {}
    for value, node in zip(graph.inputs, placeholders):
        meta_shape = [str(d) for d in getattr(node.meta.get("val"), "shape", ())]
        overrides = [as_given(d) for d in given.get(value.name, ())]  # checked by the importer already
        for axis, d in enumerate(value.type.shape):
            if not isinstance(d, str):
                continue
            where = f"input '{value.name}' dim {axis}"
            symbol = meta_shape[axis] if axis < len(meta_shape) else d
            bounds = overrides[axis] if axis < len(overrides) and isinstance(overrides[axis], DimRange) else None
            if bounds is None and symbol in ranges:
                bounds = DimRange(*ranges[symbol])
            if d in user_names or not is_raw_name(d):
                origin = f"{where} (torch.export.Dim '{d}')" if d in user_names else f"{where} (given as '{d}')"
                name = d
            else:
                name = renames.get(d) or namer.declared(d, where, value.type.rank, axis, value.type.dtype)
                renames[d] = name
                origin = namer.dims[name].origin.replace("the model wrote", "torch's symbol")
            previous = graph.dims.get(name)
            if previous is None or (previous.min is None and bounds is not None):
                low, high = (bounds.min, bounds.max) if bounds is not None else (None, None)
                graph.dims[name] = DimInfo(previous.origin if previous else origin, low, high)
    rename_dims(graph, renames)
    graph.dims = {renames.get(k, k): v for k, v in graph.dims.items()}
