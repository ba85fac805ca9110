"""Why work stayed on the host: one summary line per target, for ``aot-build``.

A target can leave an op on the host for two reasons: it has no pattern that
could root a match at that op (it does not support it), or one of its patterns
matched and was refused (a check's ``reject`` reason, a cycle, a region under the
backend's minimum size). The partitioner records the refusals per node
(``PartitionedGraph.refusals``); ``--print-graph`` prints each under its op.
"""

from __future__ import annotations

import collections
import re

from aot.compiler.backends import CompilerBackend
from aot.compiler.partition import PartitionedGraph, Refusal
from aot.compiler.pattern import root_ops
from aot.compiler.worst_case import at_sizes
from aot.ir.graph import Graph, Value


def _counted(ops: list[str]) -> str:
    return ", ".join(f"{op} x{n}" if n > 1 else op for op, n in collections.Counter(ops).most_common())


def _kind(refusal: Refusal) -> str:
    """A reason with its value names and shapes blanked, so alike refusals count together."""
    return re.sub(r"\[[^\]]*\]", "[...]", re.sub(r"%\S+", "%...", refusal.reason))


def explain_host(pg: PartitionedGraph, backends: list[CompilerBackend]) -> list[str]:
    """Per target: the op types it left on the host, split into refused (with one reason) and unsupported."""
    offloaded = {id(n) for r in pg.regions for n in r.nodes}
    on_host = [n for n in pg.nodes if id(n) not in offloaded]
    lines = []
    for backend in backends:
        roots = [root_ops(p.pattern) for p in backend.patterns()]
        takes_any = any(ops is None for ops in roots)
        supported = set().union(*(ops for ops in roots if ops is not None))
        refused = [(n, r) for n in on_host for r in pg.refusals.get(id(n), ()) if r.backend == backend.name]
        refused_nodes = list({id(n): n for n, _ in refused}.values())
        unsupported = [n.op for n in on_host if not takes_any and n.op not in supported]
        if not refused_nodes and not unsupported:
            continue
        parts = []
        if refused_nodes:
            common = collections.Counter(_kind(r) for _, r in refused).most_common(1)[0][0]
            node, reason = next((n, r) for n, r in refused if _kind(r) == common)
            parts.append(f"refused {_counted([n.op for n in refused_nodes])} (e.g. {node.name}: {reason})")
        if unsupported:
            parts.append(f"no {backend.name} pattern for {_counted(unsupported)}")
        lines.append(f"{backend.name} left on the host: " + "; ".join(parts) + " (--print-graph shows each op)")
        if any("symbolic shape" in r.reason for _, r in refused):
            lines.append(_fix_symbolic_dims(pg, backend.name))
    return lines


def _hint_sizes() -> list[tuple[int, int]]:
    """Sizes tried for the hint's example, as the auto backend samples a region (``SAMPLE_SIZES``: the leading
    axis, the others): a batch of 1 and a working size first (an image's side, a sequence's length), then smaller
    and larger ones; then the leading axis at the others' size too (raw audio, its samples its only dim)."""
    from runtime_lite.backends.auto import SAMPLE_SIZES  # the engines' module: only when a hint is written

    return list(dict.fromkeys([*SAMPLE_SIZES, *((n, n) for n in (224, 4096, 16384))]))


def _example_sizes(graph: Graph, inputs: list[Value], lead: int, other: int) -> dict[str, int]:
    """Each symbolic input dim at ``lead`` (where it first appears as an input's leading axis) or ``other``, within
    its declared bounds; a dim the model derives from another (``2 * h``) computed from that one's size."""
    sizes: dict[str, int] = {}
    derived = []
    for v in inputs:
        for axis, d in enumerate(v.type.shape):
            if not isinstance(d, str) or d in sizes or d in derived:
                continue
            info = graph.dims.get(d)
            if getattr(info, "of", None) is not None:
                derived.append(d)
                continue
            size = lead if axis == 0 else other
            if getattr(info, "max", None) is not None:
                size = min(size, info.max)
            low = getattr(info, "min", None)
            sizes[d] = max(size, low if isinstance(low, int) else 1, 1)
    for d in derived:
        base, scale, offset = graph.dims[d].of
        sizes[d] = scale * sizes.get(base, other) + offset
    return sizes


def _infers_at(graph: Graph, sizes: dict[str, int]) -> bool:
    """Whether every node's shape infers with the inputs' symbolic dims at ``sizes`` (types are put back)."""
    if any(s < 1 for s in sizes.values()):
        return False
    try:
        return at_sizes(graph, sizes, lambda g: True) is not None
    except Exception:  # noqa: BLE001 - a size an op's inference cannot take at all: not a size to propose
        return False


def _fix_symbolic_dims(pg: PartitionedGraph, backend: str) -> str:
    """How to give ``backend`` static shapes: each symbolic input dim fixed to a size at which the whole graph's
    shapes infer (``_hint_sizes``, within the dims' bounds): the least size is no safe example, a 1x1 image
    cannot pass a detector's strides and concats, and a size outside the bounds the build refuses. Where no size
    tried infers, the dims stay named, for the user to fill in."""
    graph = pg.graph
    symbolic = [v for v in pg.inputs if not v.type.is_static]
    if not symbolic:
        return (
            f"{backend} plans static shapes: the symbolic shapes here come from ops whose output size depends on "
            "values, not from the inputs' dims"
        )
    intro = f"{backend} plans static shapes: fix the symbolic dims to sizes the model takes to offload"
    candidates = _hint_sizes()
    for lead, other in candidates:
        sizes = _example_sizes(graph, symbolic, lead, other)
        if _infers_at(graph, sizes):
            break
    else:
        names = list(dict.fromkeys(d for v in symbolic for d in v.type.shape if isinstance(d, str)))
        shapes = " ".join(f"--input {v.name}:{'x'.join(str(d) for d in v.type.shape)}" for v in symbolic)
        tried = ", ".join(str(other) for other in dict.fromkeys(o for _, o in candidates))
        return (
            f"{intro}: {shapes}, with {', '.join(names)} set to sizes the model accepts (its shapes infer at none of "
            f"the sizes tried: {tried}, a batch of 1, within the dims' bounds)"
        )
    fixes = [(v.name, [str(sizes.get(d, d)) for d in v.type.shape]) for v in symbolic]
    # The name may itself hold ':' (TF's 'serving_default_input_2:0'): the CLI splits NAME:SHAPE at the last one.
    flags = " ".join(f"--input {name}:{'x'.join(dims)}" for name, dims in fixes)
    api = ", ".join(f"{name!r}: ({', '.join(dims)}{',' if len(dims) == 1 else ''})" for name, dims in fixes)
    return f"{intro}, e.g. {flags} (aot.build(..., input_shapes={{{api}}}))"


__all__ = ["explain_host"]
