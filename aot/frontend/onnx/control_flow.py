"""ONNX control flow, as far as a static dataflow graph can hold it, and inputs bound at build time.

aot compiles one static dataflow graph, so a branch taken at run time has no place in a
bundle. An ``If`` whose condition is a constant when the importer reaches it (folded from
constants, from shapes that ``--input`` fixed, or from an input bound with ``--bind``) is no
run-time branch, though: the branch it takes is converted in its place and the other is
dropped. An ``If`` whose condition is known only at run time becomes a select where that is
safe: both branches are converted and each output is ``where(condition, then, else)``, the usual
lowering of a cheap conditional; safe means a one-element condition, outputs of one dtype and
shape in both branches, and branches made only of ops that cannot fail or have side effects
whatever the values (``SELECT_SAFE``), since the branch not taken is computed too, on values it
was not meant for. ``Loop`` and ``Scan`` stay refused by design.
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Callable, Iterable

import numpy as np
import onnx

from aot.errors import ModelError, ShapeError, UnsupportedOpsError
from aot.frontend.onnx.context import NodeContext
from aot.frontend.onnx.dtypes import onnx_dtype_name
from aot.ir.graph import Graph, Node, Value
from aot.ir.types import TensorType

#: the most values one --bind takes: it binds scalars and short lists (aot.build(input_values=) takes arrays)
MAX_BOUND_VALUES = 4096

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

#: canonical ops that cannot fail or have side effects whatever their operands' values, once shapes are
#: known: what a select may compute on values the branch was not meant for (inf and NaN propagate, as in
#: ONNX). A few more pass with a condition (``_unsafe``): divide, mod, reciprocal and power on floats only
#: (an integer division by zero, a negative integer exponent), reshape and expand to a shape known at build
#: time, gather with constant indices in range.
SELECT_SAFE = frozenset(
    """
    abs acos acosh asin asinh atan atanh ceil cos cosh erf exp expm1 floor log log10 log1p log2 negative round
    sigmoid sign sin sinh sqrt tan tanh trunc softplus softsign relu relu6 leaky_relu elu hard_sigmoid hard_swish
    gelu prelu clip isnan isinf logical_not bitwise_not
    add subtract multiply maximum minimum atan2 equal greater greater_equal less less_equal
    logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor where cast copy
    matmul dense conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d
    avg_pool1d avg_pool2d avg_pool3d max_pool1d max_pool2d max_pool3d batch_norm layer_norm instance_norm lrn
    reduce_max reduce_min reduce_mean reduce_sum reduce_prod argmax argmin cumsum softmax log_softmax
    flatten transpose concat squeeze unsqueeze slice split pad same_pad tile trilu shape
    quantize dequantize dynamic_quantize recurrent
    divide mod reciprocal power reshape expand gather
    """.split()
)


def inline_if(ctx: NodeContext, env: ChainMap, convert_branch: Branch) -> list[Value]:
    """The outputs of the branch a constant condition takes, converted in place of the ``If``; for a condition
    known only at run time, both branches and a select (``select_if``)."""
    cond = ctx.input(0)
    if cond is None:
        raise ModelError(f"If node '{ctx.name}' has no condition input")
    if not cond.is_constant:
        return select_if(ctx, cond, env, convert_branch)
    if cond.data.size != 1:
        raise ctx.error(f"the condition holds {cond.data.size} elements (shape {list(cond.data.shape)}), not one")
    taken = bool(cond.data.reshape(-1)[0])
    return _converted(ctx, "then_branch" if taken else "else_branch", env, convert_branch)


def _converted(ctx: NodeContext, key: str, env: ChainMap, convert_branch: Branch) -> list[Value]:
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


def select_if(ctx: NodeContext, cond: Value, env: ChainMap, convert_branch: Branch) -> list[Value]:
    """An If on a run-time condition as both branches and, per output, ``where(condition, then, else)``.

    Both branches run on every call, the one not taken on values it was not meant for, so each must be made
    only of ops in ``SELECT_SAFE`` (checked on the canonical nodes the branch adds: what folded at build time
    runs nothing); anything else is refused in one line (``run_time_condition``) naming the op and branch.
    """
    numel = cond.type.numel
    if numel != 1:
        shape = "[" + ",".join(str(d) for d in cond.type.shape) + "]"
        count = "a number of elements known only at run time" if numel is None else f"{numel} elements"
        raise UnsupportedOpsError(run_time_condition(ctx, cond, f"its condition {shape} has {count}, not one"))
    outputs = {}
    for key in ("then_branch", "else_branch"):
        first = len(ctx.graph.nodes)
        try:
            outputs[key] = _converted(ctx, key, env, convert_branch)
        except (UnsupportedOpsError, ShapeError) as e:
            raise UnsupportedOpsError(run_time_condition(ctx, cond, f"its {key} cannot be converted ({e})")) from None
        for node in ctx.graph.nodes[first:]:
            why = _unsafe(node)
            if why:
                op, label = _source_node(ctx.attr(key), node)
                raise UnsupportedOpsError(
                    run_time_condition(
                        ctx,
                        cond,
                        f"its {key} holds {op} node '{label}', which can fail on values it was not meant for ({why})",
                    )
                )
    for i, (then, other) in enumerate(zip(outputs["then_branch"], outputs["else_branch"])):
        if then.type != other.type:
            raise UnsupportedOpsError(
                run_time_condition(
                    ctx,
                    cond,
                    f"its output {i} is {_typed(then)} from the then_branch but {_typed(other)} from the "
                    "else_branch, and a select needs one type",
                )
            )
    if cond.type.rank:
        cond = ctx.emit("reshape", cond, shape=[])
    if cond.type.dtype != "bool":
        cond = ctx.emit("cast", cond, to="bool")
    return [ctx.emit("where", cond, then, other) for then, other in zip(outputs["then_branch"], outputs["else_branch"])]


_WHY_UNSAFE = {
    **dict.fromkeys(
        ("gather_elements", "gather_nd", "scatter_elements", "scatter_nd", "roi_align"), "an index out of range"
    ),
    "range": "a length computed from run-time values",
    "constant_of_shape": "a shape computed from run-time values",
    "dynamic_slice": "bounds computed from run-time values",
    "dynamic_resize": "sizes computed from run-time values",
}


def _unsafe(node: Node) -> str | None:
    """Why ``node`` could fail (or do more than compute) on operand values it was not meant for; None if it cannot."""
    op = node.op
    if op not in SELECT_SAFE:
        return _WHY_UNSAFE.get(op, "not among the ops known to be safe on any values")
    kind = node.inputs[0].type.dtype
    if op in ("divide", "mod", "reciprocal") and np.dtype(kind).kind in "iub":
        return "an integer division by zero"
    if op == "power" and np.dtype(kind).kind in "iub":
        return "a negative integer exponent"
    if op in ("reshape", "expand") and len(node.inputs) > 1 and not node.inputs[1].is_constant:
        return "a shape computed from run-time values"
    if op == "gather":
        data, indices = node.inputs
        size = data.type.shape[node.attrs["axis"]]
        inside = indices.is_constant and isinstance(size, int)
        if inside and indices.data.size:
            inside = -size <= int(indices.data.min()) and int(indices.data.max()) < size
        if not inside:
            return "an index out of range"
    return None


def _source_node(branch: onnx.GraphProto, node: Node) -> tuple[str, str]:
    """The ONNX op type and node name a canonical node came from (its name is the ONNX node's, made unique)."""
    labels: dict[str, tuple[str, str]] = {}

    def collect(graph: onnx.GraphProto) -> None:
        for n in graph.node:
            label = n.name or (n.output[0] if n.output else n.op_type)
            labels.setdefault(re.sub(r"[^A-Za-z0-9_./:-]", "_", label) or "v", (n.op_type, label))
            for g in _subgraphs(n):
                collect(g)

    collect(branch)
    matches = [k for k in labels if node.name == k or re.fullmatch(re.escape(k) + r"_\d+", node.name)]
    return labels[max(matches, key=len)] if matches else (node.op, node.name)


def _typed(value: Value) -> str:
    return value.type.dtype + "[" + ",".join(str(d) for d in value.type.shape) + "]"


def _bindable(value: Value) -> bool:
    """Whether ``--bind`` can give this input a value: a scalar, or a 1-D input no longer than --bind takes."""
    shape = value.type.shape
    return len(shape) == 0 or (len(shape) == 1 and (not isinstance(shape[0], int) or shape[0] <= MAX_BOUND_VALUES))


def run_time_condition(ctx: NodeContext, cond: Value, why_not_select: str) -> str:
    """Why an If on a run-time condition is refused, and what would make its condition a constant, in one line."""
    values, shapes, other = _sources(ctx.graph, cond)
    shapes = [name for name in shapes if name not in values]
    where = [f"the value of input {_names(values)}"] if values else []
    where += [f"the shape of input {_names(shapes)}"] if shapes else []
    if not where:
        where = [f"node '{other}', which cannot be computed at build time" if other else "a run-time value"]
    inputs = {v.name: v for v in ctx.graph.inputs}
    bindable = [n for n in values if _bindable(inputs[n])]
    data = [n for n in values if n not in bindable]
    advice = []
    if bindable:
        example = " ".join(f"--bind {n}=VALUE" for n in bindable)
        advice.append(f"bind {'it' if len(bindable) == 1 else 'them'} ({example}; input_values= in aot.build)")
    if shapes:
        example = " ".join(f"--input {n}:SHAPE" for n in shapes)
        advice.append(f"fix {'its' if len(shapes) == 1 else 'their'} shape ({example})")
    if advice and not data:
        fix = " or ".join(advice) + " so that the condition folds to a constant"
    elif advice:
        fix = " or ".join(advice) + f", though the value of {_described(data, inputs)} stays run-time data"
    elif data:
        fix = f"the value of {_described(data, inputs)} is run-time data, so no build option makes it a constant"
    else:
        fix = "it must fold to a constant"
    return (
        f"If node '{ctx.name}': its condition is computed at run time from {' and '.join(where)}; aot compiles one "
        f"static dataflow graph, so such an If is inlined only as a select of both branches (each output = "
        f"Where(condition, then, else)), and {why_not_select}, so it cannot be computed as one: {fix}"
    )


def _described(names: list[str], inputs: dict[str, Value]) -> str:
    return "input " + ", ".join(f"{n!r} ({_typed(inputs[n])})" for n in names)


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
