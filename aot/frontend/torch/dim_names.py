"""The names users give symbolic dims (``torch.export.Dim("batch")``), instead of torch's ``s77``.

torch.export keys every symbolic dim by a fresh sympy symbol; the name given to
``Dim`` survives only in the program's shape environment, as the debug name of each
input size that the symbol stands for. A bundle's signature should read
``images: float32[batch,3,224,224]``, as the user wrote it. A program reloaded from a
.pt2 file has lost those names: its symbols are kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Union

from aot.errors import ShapeError
from aot.ir.dims import DimInfo, DimNamer, DimRange, as_given, is_raw_name
from aot.ir.graph import Graph
from aot.ir.types import TensorType
from runtime_lite.format.signature import relation_text


def _debug_names(placeholders: list[Any]) -> dict[str, str]:
    """Torch's symbol -> every name the user gave it (a ``Dim``'s), as the program's shape environment records it."""
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
    return names


def user_dim_names(placeholders: list[Any]) -> dict[str, str]:
    """Torch's symbol -> the user's name for it, for each input dim whose name torch still knows."""
    names = _debug_names(placeholders)
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


#: A dim's range: (min, max), max None where torch bounds it below only.
Bounds = tuple[int, Union[int, None]]


def _symbolic_dims(placeholders: list[Any]) -> list[Any]:
    """Every symbolic input dim's expression (``s77``, or ``2*s94`` for a derived dim), with its shape env."""
    found = []
    for node in placeholders:
        for d in getattr(node.meta.get("val"), "shape", ()):
            symbolic = getattr(d, "node", None)
            if getattr(symbolic, "expr", None) is not None:
                found.append(symbolic)
    return found


def _value_range(symbolic: Any, range_constraints: Mapping[Any, Any]) -> Any:
    """The range the program is exported for: its ``range_constraints`` (the user's ``Dim(min=, max=)`` as written,
    kept in a .pt2 too), else the shape env's, else, for a derived dim (2*h), torch's bound of the expression."""
    expr = symbolic.expr
    value_range = range_constraints.get(expr)
    var_to_range = getattr(getattr(symbolic, "shape_env", None), "var_to_range", {})
    if value_range is None:
        value_range = var_to_range.get(expr)
    if value_range is None:  # a derived dim (2*h): the range torch bounds it by
        value_range = _derived_range(expr, var_to_range)
    return value_range


def symbol_bounds(placeholders: list[Any], range_constraints: Mapping[Any, Any]) -> dict[str, Bounds]:
    """Torch's symbol or expression -> (min, max) the program holds for, as far as it bounds the dim.

    torch starts every range it makes up itself at 2 (``Dim.AUTO``, ``Dim.DYNAMIC``: it specializes sizes 0 and 1
    while tracing, and its own guards do not refuse them): a minimum of exactly 2 counts only where the user wrote
    it, on a named ``Dim``. Without the name (``Dim.AUTO``, a reloaded .pt2) it is torch's default, and the dim
    starts at 0. Any other minimum is the user's (``Dim("batch", min=1)``, kept in a .pt2 as ``VR[1, ...]``; an
    unbounded named ``Dim`` is ``VR[0, ...]``), and is kept."""
    named = _debug_names(placeholders).keys()
    bounds: dict[str, Bounds] = {}
    for symbolic in _symbolic_dims(placeholders):
        value_range = _value_range(symbolic, range_constraints)
        if value_range is None:
            continue
        high = None if str(value_range.upper) in ("int_oo", "oo") else int(value_range.upper)
        low = max(int(value_range.lower), 0) if str(value_range.lower) not in ("-int_oo", "-oo") else 0
        key = str(symbolic.expr)
        if low == 2 and key.isidentifier() and key not in named:
            low = 0
        if low > 0 or high is not None:
            bounds[key] = (low, high)
    return bounds


def _derived_range(expr: Any, var_to_range: dict) -> Any:
    """The range of a derived dim's expression (``2*h`` with h in 2..32: 4..64) from its symbols' ranges, or None:
    without it a bundle would accept lengths torch's own guards refuse."""
    try:
        from torch.utils._sympy.value_ranges import bound_sympy

        return bound_sympy(expr, var_to_range)
    except Exception:  # noqa: BLE001 - an expression torch cannot bound: the dim stays unbounded, as before
        return None


def affine_relation(expr: Any) -> tuple[Any, int, int] | None:
    """A derived dim's expression as (symbol, scale, offset), ``2*s94 + 1`` -> (s94, 2, 1); None for a plain symbol
    or anything that is not whole-number affine in one symbol (torch's ``Dim`` arithmetic writes only these)."""
    symbols = getattr(expr, "free_symbols", set())
    if len(symbols) != 1 or getattr(expr, "is_Symbol", False):
        return None
    (symbol,) = symbols
    try:
        poly = expr.as_poly(symbol)
        coefficients = poly.all_coeffs() if poly is not None and poly.degree() == 1 else None
    except Exception:  # noqa: BLE001 - sympy refuses what is not a polynomial (a floor, a max): no relation
        return None
    if coefficients is None or not all(getattr(c, "is_Integer", False) for c in coefficients):
        return None
    scale, offset = (int(c) for c in coefficients)
    return (symbol, scale, offset) if scale >= 1 else None


def _base_names(graph: Graph, placeholders: list[Any], renames: dict[str, str]) -> dict[str, str]:
    """Torch's symbol -> its signature name, where some input has it as a plain dim."""
    names: dict[str, str] = {}
    for value, node in zip(graph.inputs, placeholders):
        for axis, d in enumerate(getattr(node.meta.get("val"), "shape", ())):
            own = value.type.shape[axis] if axis < value.type.rank else None
            if str(d).isidentifier() and isinstance(own, str):
                names.setdefault(str(d), renames.get(own, own))
    return names


def _constant_source_name(symbol: Any, placeholders: list[Any]) -> str | None:
    """The ``Dim``'s name of a symbol no input has as a plain dim (``h`` of ``x: [b, 2*h]`` alone): torch keeps it as
    the symbol's constant source."""
    for symbolic in _symbolic_dims(placeholders):
        for source in getattr(symbolic.shape_env, "var_to_sources", {}).get(symbol, ()):
            name = getattr(source, "source_name", None)
            if isinstance(name, str) and name.isidentifier():
                return name
    return None


def _relation(
    symbolic: Any, bases: dict[str, str], taken: set[str], placeholders: list[Any]
) -> tuple[str, int, int] | None:
    """A derived dim's (base name, scale, offset) in signature names: the base is the name an input gives it, else
    the ``Dim``'s own name (unless an input dim took that name), else torch's symbol."""
    relation = affine_relation(symbolic.expr) if symbolic is not None else None
    if relation is None:
        return None
    symbol, scale, offset = relation
    base = bases.get(str(symbol))
    if base is None:
        own = _constant_source_name(symbol, placeholders)
        base = own if own is not None and own not in taken else str(symbol)
    return base, scale, offset


def name_signature_dims(
    graph: Graph, placeholders: list[Any], given: dict[str, Any], range_constraints: Mapping[Any, Any] | None = None
) -> None:
    """Readable names for torch's raw symbols (``s77`` of a reloaded .pt2), each dim's origin, its bounds (the
    program's ``Dim`` ranges, or ``input_shapes`` bounds), and a derived dim's relation to its base, into
    ``graph.dims``."""
    ranges = symbol_bounds(placeholders, range_constraints or {})
    user_names = set(user_dim_names(placeholders).values())
    namer = DimNamer({d for v in graph.inputs for d in v.type.shape if isinstance(d, str) and not is_raw_name(d)})
    renames: dict[str, str] = {}
    derived: dict[str, tuple[str, Any]] = {}  # signature name -> (where, torch's symbolic dim)
    for value, node in zip(graph.inputs, placeholders):
        meta = list(getattr(node.meta.get("val"), "shape", ()))
        overrides = [as_given(d) for d in given.get(value.name, ())]  # checked by the importer already
        for axis, d in enumerate(value.type.shape):
            if not isinstance(d, str):
                continue
            where = f"input '{value.name}' dim {axis}"
            symbol = str(meta[axis]) if axis < len(meta) else d
            bounds: Bounds | None = None
            if axis < len(overrides) and isinstance(overrides[axis], DimRange):
                bounds = (overrides[axis].min, overrides[axis].max)
            elif symbol in ranges:
                bounds = ranges[symbol]
            if d in user_names or not is_raw_name(d):
                origin = f"{where} (torch.export.Dim '{d}')" if d in user_names else f"{where} (given as '{d}')"
                name = d
            else:
                name = renames.get(d) or namer.declared(d, where, value.type.rank, axis, value.type.dtype)
                renames[d] = name
                origin = namer.dims[name].origin.replace("the model wrote", "torch's symbol")
            if not symbol.isidentifier() and axis < len(meta):
                derived.setdefault(name, (where, getattr(meta[axis], "node", None)))
            previous = graph.dims.get(name)
            if previous is None or (previous.min is None and previous.max is None and bounds is not None):
                low, high = bounds if bounds is not None else (None, None)
                graph.dims[name] = DimInfo(previous.origin if previous else origin, low, high)
    rename_dims(graph, renames)
    graph.dims = {renames.get(k, k): v for k, v in graph.dims.items()}
    _link_derived(graph, placeholders, {renames.get(k, k): v for k, v in derived.items()})


def _link_derived(graph: Graph, placeholders: list[Any], derived: dict[str, tuple[str, Any]]) -> None:
    """Record each derived dim as ``scale * base + offset`` (``seq = 2*h``): the runtime then refuses, where it
    checks the inputs, a length the relation rules out (odd, or not twice the ``h`` another input sets), which
    would otherwise fail deep in an op or, with no op to notice, run on inputs the model never allowed."""
    bases = _base_names(graph, placeholders, {})
    for name, (where, symbolic) in derived.items():
        relation = _relation(symbolic, bases, set(graph.dims), placeholders)
        if relation is None or relation[0] == name:
            continue
        info = graph.dims[name]
        origin = f"{where} (torch.export.Dim expression {relation_text(relation)})"
        graph.dims[name] = DimInfo(origin, info.min, info.max, relation)


def check_given_within_ranges(
    placeholders: list[Any], given: Mapping[str, Any], range_constraints: Mapping[Any, Any]
) -> None:
    """``input_shapes`` (``--input``) may narrow what the program was exported for, never widen it: torch.export
    guarantees the program only inside its ``Dim`` ranges (and a derived dim only at its relation's values), so a
    size or bounds beyond them is refused in one line naming the input and the dim."""
    ranges = symbol_bounds(placeholders, range_constraints)
    names = _debug_names(placeholders)
    for node in placeholders:
        meta = list(getattr(node.meta.get("val"), "shape", ()))
        if len(given.get(node.name, meta)) != len(meta):
            continue  # a wrong rank: the importer names it
        for axis, (d, want) in enumerate(zip(meta, given.get(node.name, ()))):
            what = f"--input {node.name}: dim {axis}"
            symbol = str(d)
            if isinstance(want, int) and not isinstance(want, bool):
                _check_relation_holds(what, want, getattr(d, "node", None), placeholders)
            low, high = ranges.get(symbol, (0, None))
            asked = (
                (want, want) if isinstance(want, int) else (want.min, want.max) if isinstance(want, DimRange) else None
            )
            if asked is None or (asked[0] >= low and (high is None or asked[1] <= high)):
                continue
            label = f" ('{names[symbol]}')" if symbol in names else ""
            shown = f"is {want}, which is" if isinstance(want, int) else f"bounds {want.min}..{want.max} go"
            raise ShapeError(
                f"{what}{label} {shown} outside {low}..{'' if high is None else high}, the range the program was "
                "exported for (torch.export guarantees it only there): give sizes inside it, or export with a wider Dim"
            )


def _check_relation_holds(what: str, size: int, symbolic: Any, placeholders: list[Any]) -> None:
    """A size fixed for a derived dim must be one its relation gives (2*h: even)."""
    relation = affine_relation(symbolic.expr) if symbolic is not None else None
    if relation is None:
        return
    symbol, scale, offset = relation
    if size < offset or (size - offset) % scale:
        base = _debug_names(placeholders).get(str(symbol)) or _constant_source_name(symbol, placeholders)
        text = relation_text((base or str(symbol), scale, offset))
        raise ShapeError(f"{what} is {size}, not {text} for any whole {base or str(symbol)}: the program derives it so")
