"""A small dataflow pattern language, in the spirit of TVM's ``tvm.relax.dpl``.

    conv = is_op("conv2d")(wildcard(), is_const(), ...)   # ... = any further inputs
    fused = is_op("relu")(conv) | is_op("relu6")(conv)     # alternatives
    maybe = conv.optional(lambda p: is_op("relu")(p))     # conv, or conv then relu
    depthwise = is_op("conv2d")(wildcard(), is_const(), ...).has_attr(groups=32)
    f32 = wildcard().has_dtype("float32", "float16")

A pattern is matched at a value (the root of the match) and walks up through the
producers of its inputs. One pattern object used twice must bind the same value
both times, which is how a diamond is expressed. Matching backtracks through
alternatives, so ``(a | b)(x)`` inside a larger pattern tries both.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aot.ir.graph import Node, Value

Bindings = dict[int, Value]  # id(pattern) -> the value it matched


class Pattern:
    """Base class: ``match(value)`` answers whether this pattern is rooted at ``value``."""

    def __or__(self, other: Pattern) -> Pattern:
        return AltPattern(self, other)

    def has_dtype(self, *dtypes: str) -> Pattern:
        return ConstrainedPattern(self, dtypes=frozenset(dtypes))

    def has_shape(self, shape: tuple) -> Pattern:
        return ConstrainedPattern(self, shape=tuple(shape))

    def optional(self, wrap: Callable[[Pattern], Pattern]) -> Pattern:
        """``self`` possibly wrapped by more ops: ``conv.optional(lambda p: is_op("relu")(p))``."""
        return AltPattern(wrap(self), self)

    def match(self, value: Value) -> Bindings | None:
        return next(self._match(value, {}), None)

    def _match(self, value: Value, bound: Bindings) -> Iterator[Bindings]:
        raise NotImplementedError

    def _bind(self, value: Value, bound: Bindings) -> Bindings | None:
        """Record ``self -> value``; a pattern already bound must see the same value again."""
        previous = bound.get(id(self))
        if previous is not None:
            return bound if previous is value else None
        extended = dict(bound)
        extended[id(self)] = value
        return extended


class WildcardPattern(Pattern):
    def _match(self, value, bound):
        result = self._bind(value, bound)
        if result is not None:
            yield result

    def __repr__(self) -> str:
        return "wildcard()"


class ConstantPattern(Pattern):
    def _match(self, value, bound):
        if value.is_constant:
            result = self._bind(value, bound)
            if result is not None:
                yield result

    def __repr__(self) -> str:
        return "is_const()"


def _same_attr(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(actual, (list, tuple))
            and len(actual) == len(wanted)
            and all(_same_attr(a, w) for a, w in zip(actual, wanted))
        )
    if isinstance(wanted, float) and isinstance(actual, (int, float)) and actual is not None:
        return math.isclose(actual, wanted, rel_tol=1e-6, abs_tol=1e-9)
    return actual == wanted


class OpPattern(Pattern):
    """``is_op("conv2d")``: not yet applied to arguments; call it to give them."""

    def __init__(
        self,
        ops: tuple[str, ...],
        args: tuple[Pattern, ...] | None = None,
        rest: bool = False,
        attrs: dict[str, Any] | None = None,
    ):
        self.ops = frozenset(ops)
        self.args = args
        self.rest = rest
        self.attrs = attrs or {}

    def __call__(self, *args: Pattern | type(Ellipsis)) -> OpPattern:
        rest = bool(args) and args[-1] is Ellipsis
        fixed = args[:-1] if rest else args
        if any(not isinstance(a, Pattern) for a in fixed):
            raise TypeError("pattern arguments must be patterns (wildcard(), is_const(), is_op(...)(...)) or ...")
        return OpPattern(tuple(self.ops), tuple(fixed), rest, self.attrs)

    def has_attr(self, **attrs: Any) -> OpPattern:
        return OpPattern(tuple(self.ops), self.args, self.rest, {**self.attrs, **attrs})

    def _match(self, value, bound):
        node = value.producer
        if node is None or node.op not in self.ops:
            return
        if any(not _same_attr(node.attrs.get(k), v) for k, v in self.attrs.items()):
            return
        args = self.args
        if args is not None:
            n = len(node.inputs)
            if n < len(args) or (n > len(args) and not self.rest):
                return
        result = self._bind(value, bound)
        if result is None:
            return
        if args is None:
            yield result
            return
        yield from self._match_args(node, 0, result)

    def _match_args(self, node: Node, i: int, bound: Bindings) -> Iterator[Bindings]:
        if i == len(self.args):
            yield bound
            return
        for extended in self.args[i]._match(node.inputs[i], bound):
            yield from self._match_args(node, i + 1, extended)

    def __repr__(self) -> str:
        ops = "|".join(sorted(self.ops))
        args = (
            "" if self.args is None else "(" + ", ".join([*map(repr, self.args), *(["..."] if self.rest else [])]) + ")"
        )
        attrs = "".join(f".has_attr({k}={v!r})" for k, v in self.attrs.items())
        return f"is_op({ops!r}){args}{attrs}"


class AltPattern(Pattern):
    def __init__(self, left: Pattern, right: Pattern):
        self.left, self.right = left, right

    def _match(self, value, bound):
        for side in (self.left, self.right):
            for result in side._match(value, bound):
                result = self._bind(value, result)
                if result is not None:
                    yield result

    def __repr__(self) -> str:
        return f"({self.left!r} | {self.right!r})"


class ConstrainedPattern(Pattern):
    def __init__(self, inner: Pattern, dtypes: frozenset[str] | None = None, shape: tuple | None = None):
        self.inner, self.dtypes, self.shape = inner, dtypes, shape

    def _match(self, value, bound):
        if self.dtypes is not None and value.type.dtype not in self.dtypes:
            return
        if self.shape is not None and tuple(value.type.shape) != self.shape:
            return
        for result in self.inner._match(value, bound):
            result = self._bind(value, result)
            if result is not None:
                yield result

    def __repr__(self) -> str:
        return f"{self.inner!r}.has_dtype{tuple(sorted(self.dtypes or ()))}"


def wildcard() -> Pattern:
    """Any value: a graph input, a constant or an op's output (it becomes an input of the match)."""
    return WildcardPattern()


def is_const() -> Pattern:
    """A constant (a weight): bound into the payload or passed by the host, per ``bind_constants``."""
    return ConstantPattern()


def is_op(*ops: str) -> OpPattern:
    """An op node, one of ``ops``; call the result with argument patterns to constrain its inputs."""
    if not ops:
        raise TypeError("is_op needs at least one op name")
    return OpPattern(ops)


@dataclass
class Match:
    """One match: the root value, the op nodes it covers and what each pattern bound."""

    root: Value
    nodes: list[Node]
    bindings: Bindings

    def value_of(self, pattern: Pattern) -> Value | None:
        return self.bindings.get(id(pattern))

    def annotated(self, annotations: dict[str, Pattern]) -> dict[str, Value]:
        """The value each named sub-pattern bound (names whose pattern took no part are left out)."""
        values = {key: self.value_of(p) for key, p in annotations.items()}
        return {key: v for key, v in values.items() if v is not None}


def intermediate_used_outside(
    m: Match, consumers: Mapping[Value, Sequence[Node]], graph_outputs: Collection[int]
) -> bool:
    """True when a value computed inside ``m`` (other than its root) is read outside it or is a graph output.

    Rewriting or fusing such a match would either recompute the value or need a
    second output. ``consumers`` maps each value to its readers (``Graph.consumers``);
    ``graph_outputs`` holds the ids of the graph's output values. The one test both
    fusion checks (``PatternCheckContext``) and idiom rewrites (``passes.idioms``) use.
    """
    inside = {id(n) for n in m.nodes}
    for node in m.nodes:
        for out in node.outputs:
            if out is m.root:
                continue
            if id(out) in graph_outputs:
                return True
            if any(id(user) not in inside for user in consumers.get(out, ())):
                return True
    return False


def match(pattern: Pattern, value: Value) -> Match | None:
    """Match ``pattern`` rooted at ``value``; the covered nodes are the ops the op patterns bound."""
    bindings = pattern.match(value)
    if bindings is None:
        return None
    nodes: dict[int, Node] = {}
    for key in _op_pattern_ids(pattern):
        bound_value = bindings.get(key)
        if bound_value is not None:
            nodes[id(bound_value.producer)] = bound_value.producer
    return Match(value, list(nodes.values()), bindings)


@functools.lru_cache(maxsize=1024)
def _op_pattern_ids(pattern: Pattern) -> frozenset[int]:
    """The op patterns inside ``pattern``: the values they bind are the ops a match covers."""
    return frozenset(id(p) for p in _op_patterns(pattern))


def _op_patterns(pattern: Pattern, seen: set[int] | None = None) -> Iterator[OpPattern]:
    seen = set() if seen is None else seen
    if id(pattern) in seen:
        return
    seen.add(id(pattern))
    if isinstance(pattern, OpPattern):
        yield pattern
        for arg in pattern.args or ():
            yield from _op_patterns(arg, seen)
    elif isinstance(pattern, AltPattern):
        yield from _op_patterns(pattern.left, seen)
        yield from _op_patterns(pattern.right, seen)
    elif isinstance(pattern, ConstrainedPattern):
        yield from _op_patterns(pattern.inner, seen)


def root_ops(pattern: Pattern) -> frozenset[str] | None:
    """The ops a match can be rooted at (None: any value), so the partitioner only tries those nodes."""
    if isinstance(pattern, OpPattern):
        return pattern.ops
    if isinstance(pattern, ConstrainedPattern):
        return root_ops(pattern.inner)
    if isinstance(pattern, AltPattern):
        left, right = root_ops(pattern.left), root_ops(pattern.right)
        return None if left is None or right is None else left | right
    return None


__all__ = ["Match", "Pattern", "is_const", "is_op", "match", "root_ops", "wildcard"]
