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


def _fix_symbolic_dims(pg: PartitionedGraph, backend: str) -> str:
    """How to give ``backend`` static shapes: each symbolic input dim fixed, in the example to the least size
    its bounds allow (1 where it has none): an example the build then refuses ("outside 11..") helps no one."""
    dims = pg.graph.dims

    def example(d) -> str:
        if isinstance(d, int):
            return str(d)
        low = getattr(dims.get(d), "min", None)
        return str(max(1, low)) if isinstance(low, int) else "1"

    fixes = [(v.name, [example(d) for d in v.type.shape]) for v in pg.inputs if not v.type.is_static]
    # The name may itself hold ':' (TF's 'serving_default_input_2:0'): the CLI splits NAME:SHAPE at the last one.
    flags = " ".join(f"--input {name}:{'x'.join(dims)}" for name, dims in fixes)
    api = ", ".join(f"{name!r}: ({', '.join(dims)}{',' if len(dims) == 1 else ''})" for name, dims in fixes)
    return (
        f"{backend} plans static shapes: fix the symbolic dims to sizes the model takes to offload, e.g. {flags} "
        f"(aot.build(..., input_shapes={{{api}}}))"
    )


__all__ = ["explain_host"]
