"""ONNX control flow, as far as a static dataflow graph can hold it, and inputs bound at build time.

aot compiles one static dataflow graph, so a branch taken at run time has no place in a
bundle. An ``If`` whose condition is a constant when the importer reaches it (folded from
constants, from shapes that ``--input`` fixed, or from an input bound with ``--bind``) is no
run-time branch, though: the branch it takes is converted in its place and the other is
dropped. ``Loop`` and ``Scan`` stay refused by design.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Iterable

import numpy as np
import onnx

from aot.errors import ModelError, ShapeError, UnsupportedOpsError
from aot.frontend.onnx.context import NodeContext
from aot.frontend.onnx.dtypes import onnx_dtype_name
from aot.ir.graph import Graph, Value
from aot.ir.types import TensorType

#: op types the importer inlines itself (no converter: it needs the importer's conversion loop)
INLINED = frozenset({"If"})
#: control flow refused by design: a loop's trip count and state are run-time values
BY_DESIGN = frozenset({"Loop", "Scan"})

Branch = Callable[[NodeContext, onnx.GraphProto, ChainMap], list[Value]]


# -- names --------------------------------------------------------------------------------


def _subgraphs(node: onnx.NodeProto) -> Iterable[onnx.GraphProto]:
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.g
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            yield from attribute.graphs


def captured(graph: onnx.GraphProto) -> set[str]:
    """The outer-scope names a subgraph reads (its nested subgraphs' included): those it does not define."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {out for node in graph.node for out in node.output if out}
    read = {name for node in graph.node for name in reads(node) if name}
    read |= {v.name for v in graph.output}
    return read - defined


def reads(node: onnx.NodeProto) -> list[str]:
    """The names a node reads: its inputs, then what its subgraphs read from the scope around it.

    Ordering nodes by these puts an ``If`` after every value its branches read, named or not.
    """
    outer = set()
    for g in _subgraphs(node):
        outer |= captured(g)
    return list(node.input) + sorted(outer - set(node.input))


def names_read(graph: onnx.GraphProto) -> set[str]:
    """Every name any node reads, in any subgraph, and every graph's and subgraph's outputs."""
    names = {v.name for v in graph.output}
    for node in graph.node:
        names.update(node.input)
        for g in _subgraphs(node):
            names |= names_read(g)
    return names


# -- If ---------------------------------------------------------------------------------------


def inline_if(ctx: NodeContext, env: ChainMap, convert_branch: Branch) -> list[Value]:
    """The outputs of the branch a constant condition takes, converted in place of the ``If``."""
    cond = ctx.input(0)
    if cond is None:
        raise ModelError(f"If node '{ctx.name}' has no condition input")
    if not cond.is_constant:
        raise UnsupportedOpsError(run_time_condition(ctx, cond))
    if cond.data.size != 1:
        raise ctx.error(f"the condition holds {cond.data.size} elements (shape {list(cond.data.shape)}), not one")
    taken = bool(cond.data.reshape(-1)[0])
    key = "then_branch" if taken else "else_branch"
    branch = ctx.attr(key)
    if not isinstance(branch, onnx.GraphProto):
        raise ModelError(f"If node '{ctx.name}' has no {key} graph")
    if branch.input:
        raise ModelError(f"If node '{ctx.name}': its {key} declares inputs, which an If branch may not have")
    outputs = convert_branch(ctx, branch, env)
    wanted = len(ctx.node.output)
    if len(outputs) != wanted:
        raise ModelError(f"If node '{ctx.name}': its {key} has {len(outputs)} outputs, the If {wanted}")
    return outputs


def run_time_condition(ctx: NodeContext, cond: Value) -> str:
    """Why an If's condition is not a constant, and what would make it one, in one line."""
    values, shapes, other = _sources(ctx.graph, cond)
    shapes = [name for name in shapes if name not in values]
    where = [f"the value of input {_names(values)}"] if values else []
    where += [f"the shape of input {_names(shapes)}"] if shapes else []
    if not where:
        where = [f"node '{other}', which cannot be computed at build time" if other else "a run-time value"]
    advice = []
    if values:
        example = " ".join(f"--bind {n}=VALUE" for n in values)
        advice.append(f"bind {'it' if len(values) == 1 else 'them'} ({example}; input_values= in aot.build)")
    if shapes:
        example = " ".join(f"--input {n}:SHAPE" for n in shapes)
        advice.append(f"fix {'its' if len(shapes) == 1 else 'their'} shape ({example})")
    fix = (" or ".join(advice) + " so that it folds to a constant") if advice else "it must fold to a constant"
    return (
        f"If node '{ctx.name}': its condition is computed at run time from {' and '.join(where)}; aot compiles one "
        f"static dataflow graph, so only an If whose condition is known at build time is inlined: {fix}"
    )


def _names(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _sources(graph: Graph, cond: Value) -> tuple[list[str], list[str], str | None]:
    """The graph inputs a value depends on by value, those it depends on by shape only, and a node the
    dependency passes through that could not fold though its inputs are constants (an op with no host kernel)."""
    inputs = {id(v): v.name for v in graph.inputs}
    values: dict[str, None] = {}
    shapes: dict[str, None] = {}
    other = None
    stack, seen = [(cond, False)], set()
    while stack:
        v, by_shape = stack.pop()
        if (id(v), by_shape) in seen:
            continue
        seen.add((id(v), by_shape))
        if id(v) in inputs:
            (shapes if by_shape else values)[inputs[id(v)]] = None
            continue
        node = v.producer
        if node is None:
            continue
        if not by_shape and all(x.is_constant for x in node.inputs) and node.op != "shape":
            other = other or node.name
        reads_shape = by_shape or node.op == "shape"
        stack.extend((x, reads_shape) for x in reversed(node.inputs))
    return list(values), list(shapes), other


# -- bound inputs -----------------------------------------------------------------------------


def bound_input(info: onnx.ValueInfoProto, given: object) -> Value:
    """An input bound to a value at build time: a constant of the input's declared dtype and shape."""
    name = info.name
    tensor = info.type.tensor_type
    if not info.type.HasField("tensor_type"):
        raise ShapeError(f"--bind {name}: the input is not a tensor")
    try:
        dtype = np.dtype(onnx_dtype_name(tensor.elem_type))
    except ValueError as e:
        raise UnsupportedOpsError(f"--bind {name}: {e}") from None
    array = _as_dtype(name, given, dtype)
    if tensor.HasField("shape"):
        declared = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tensor.shape.dim]
        shown_decl = "[" + ",".join("?" if d is None else str(d) for d in declared) + "]"
        if array.ndim != len(declared) or any(d is not None and d != n for d, n in zip(declared, array.shape)):
            raise ShapeError(
                f"--bind {name}: the model declares {dtype.name}{shown_decl}, got a value of shape {list(array.shape)}"
            )
    array = np.array(array, order="C")  # ascontiguousarray would make a scalar 1-d
    return Value(name, TensorType(array.shape, dtype.name), data=array)


def _as_dtype(name: str, given: object, dtype: np.dtype) -> np.ndarray:
    """``given`` in ``dtype``, refused in one line when the dtype cannot hold it exactly (a float's rounding
    to a narrower float aside)."""
    try:
        array = np.asarray(given)
    except Exception as e:  # ragged lists and the like
        raise ShapeError(f"--bind {name}: {given!r} is not a number or a list of numbers ({e})") from None
    if array.dtype.kind not in "biuf":
        raise ShapeError(f"--bind {name}: {given!r} is not a number or a list of numbers")
    what = f"--bind {name}: {shown(array)} does not fit the input's dtype {dtype.name}"
    if dtype.kind == "b":
        if array.dtype.kind != "b" and not np.isin(array, (0, 1)).all():
            raise ShapeError(f"{what} (a bool is 0 or 1, true or false)")
        return array.astype(dtype)
    if dtype.kind in "iu":
        if array.dtype.kind == "f" and not (np.isfinite(array).all() and (array == np.round(array)).all()):
            raise ShapeError(f"{what} (not a whole number)")
        info = np.iinfo(dtype)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise ShapeError(f"{what} (its range is {info.min}..{info.max})")
        return array.astype(dtype)
    with np.errstate(all="ignore"):
        converted = array.astype(dtype)
    if array.dtype.kind == "f":
        if (np.isfinite(array) & ~np.isfinite(converted)).any():
            raise ShapeError(f"{what} (too large)")
    elif (converted.astype(np.float64) != array.astype(np.float64)).any() or not np.isfinite(converted).all():
        raise ShapeError(f"{what} (not exactly representable)")
    return converted


def shown(array: np.ndarray) -> str:
    """A bound value as the summary prints it: ``16000``, ``[1, 2, 3]``, the first few of a longer one."""
    flat = array.reshape(-1).tolist()
    if array.ndim == 0:
        return str(flat[0])
    text = ", ".join(str(x) for x in flat[:8]) + (f", ... ({array.size} values)" if array.size > 8 else "")
    return f"[{text}]"
