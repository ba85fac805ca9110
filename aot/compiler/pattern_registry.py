"""The fusion-pattern registry: what each backend can take, in priority order.

As in TVM's ``pattern_registry``: a backend registers ``FusionPattern``s named
``"<backend>.<what>"``; a later registration has higher priority, and
``get_patterns_with_prefix`` returns them highest first, the order the
partitioner tries them in. A check sees the whole match (nodes, annotated values,
who else reads each intermediate) and may veto it; that is where dtype, shape and
memory limits live. A veto says why: ``return reject("dilation 2 not supported")``
(a plain ``False`` still works, reported as "its check refused"), and
``aot-build --print-graph`` shows the reason beside each op that stayed on the host.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aot.compiler.pattern import Match, Pattern
from aot.ir.graph import Node, Value


@dataclass
class PatternCheckContext:
    """What a check may look at: the match, its annotated values and their readers."""

    match: Match
    annotated: dict[str, Value]
    #: Every reader of every value produced inside the match, inside or outside it.
    consumers: Mapping[Value, list[Node]]
    #: Ids of the graph's output values (an intermediate that is a graph output leaks too).
    graph_outputs: frozenset[int]
    #: Each value's shape at the bounds' minimum and maximum, by id, where every symbolic input dim is bounded
    #: (``Graph.shape_bounds``): a backend that needs ranges (TensorRT's profiles) may take its symbolic dims.
    shape_bounds: Mapping[int, tuple] = field(default_factory=dict)

    @property
    def nodes(self) -> list[Node]:
        return self.match.nodes

    @property
    def root(self) -> Value:
        return self.match.root

    def intermediate_used_outside(self) -> bool:
        """True when a value computed inside the match (other than its root) is read outside it.

        Fusing such a match would either recompute the value or need a second
        output; the standard check rejects it, as TVM's do.
        """
        from aot.compiler.pattern import intermediate_used_outside

        return intermediate_used_outside(self.match, self.consumers, self.graph_outputs)

    def values(self) -> list[Value]:
        """Every value the matched nodes read or write."""
        seen: dict[int, Value] = {}
        for node in self.nodes:
            for v in (*node.inputs, *node.outputs):
                seen.setdefault(id(v), v)
        return list(seen.values())


class Rejected:
    """A check's "no", with the reason; falsy, so ``if check(ctx):`` reads it as a refusal."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Rejected({self.reason!r})"


def reject(reason: str) -> Rejected:
    """What a check returns to refuse a match and say why (``"dilation 2 not supported by npu"``)."""
    return Rejected(reason)


#: True (or any truthy value) accepts; False or ``reject(reason)`` refuses.
Check = Callable[[PatternCheckContext], "bool | Rejected"]


def all_of(*checks: Check) -> Check:
    """One check made of several, in order: the first refusal (with its reason) is the verdict."""

    def check(ctx: PatternCheckContext) -> bool | Rejected:
        for one in checks:
            verdict = one(ctx)
            if not verdict:
                return verdict
        return True

    return check


@dataclass(frozen=True)
class FusionPattern:
    """A named pattern a backend can execute; ``annotations`` name sub-patterns for the check."""

    name: str
    pattern: Pattern
    annotations: dict[str, Pattern] = field(default_factory=dict)
    check: Check | None = None
    #: Higher runs first; among equals, the later registration runs first (TVM's order).
    priority: int = 0

    def __post_init__(self) -> None:
        if "." not in self.name or not self.name.split(".", 1)[0]:
            raise ValueError(f"pattern name {self.name!r} must look like '<backend>.<op>'")

    @property
    def backend(self) -> str:
        return self.name.split(".", 1)[0]

    def accepts(self, match: Match, consumers: Mapping[Value, list[Node]], graph_outputs: frozenset[int]) -> bool:
        return self.refusal(match, consumers, graph_outputs) is None

    def refusal(
        self,
        match: Match,
        consumers: Mapping[Value, list[Node]],
        graph_outputs: frozenset[int],
        shape_bounds: Mapping[int, tuple] | None = None,
    ) -> str | None:
        """None when the check accepts the match, else why it refused."""
        if self.check is None:
            return None
        context = PatternCheckContext(
            match, match.annotated(self.annotations), consumers, graph_outputs, shape_bounds or {}
        )
        verdict = self.check(context)
        if verdict:
            return None
        return verdict.reason if isinstance(verdict, Rejected) else "its check refused"


_PATTERNS: list[FusionPattern] = []


def register_patterns(patterns: list[FusionPattern | tuple[Any, ...]]) -> None:
    """Append patterns, later ones with higher priority; re-registering a name moves it to the top."""
    for entry in patterns:
        pattern = entry if isinstance(entry, FusionPattern) else FusionPattern(*entry)
        _PATTERNS[:] = [p for p in _PATTERNS if p.name != pattern.name]
        _PATTERNS.append(pattern)


def get_patterns_with_prefix(prefix: str) -> list[FusionPattern]:
    """Patterns whose name starts with ``prefix``, highest priority first (then latest registered).

    A bare backend name (``"npu"``) selects that backend's patterns only, not ``"npu2.*"``. A built-in
    backend registers its patterns when it is imported; naming it here imports it, so the answer never
    depends on what the process happened to import before (TVM's ``get_pattern_table`` does the same).
    """
    _import_builtin(prefix.split(".", 1)[0])
    start = prefix if "." in prefix else prefix + "."
    latest_first = [p for p in reversed(_PATTERNS) if p.name.startswith(start)]
    return sorted(latest_first, key=lambda p: -p.priority)  # stable: equal priorities keep registration order


def get_pattern(name: str) -> FusionPattern | None:
    _import_builtin(name.split(".", 1)[0])
    return next((p for p in _PATTERNS if p.name == name), None)


def _import_builtin(backend: str) -> None:
    """Import a built-in compiler backend (``aot/compiler/backends``) by name, which registers its patterns."""
    from aot.compiler.backends import BUILTIN_BACKENDS  # here: the backends import this module

    if backend in BUILTIN_BACKENDS:
        importlib.import_module(f"aot.compiler.backends.{backend}")


__all__ = [
    "FusionPattern",
    "PatternCheckContext",
    "Rejected",
    "reject",
    "get_pattern",
    "get_patterns_with_prefix",
    "register_patterns",
]
