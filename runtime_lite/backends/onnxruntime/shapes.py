"""Static shapes through a checked recipe, so that no convolution or pool reaches onnxruntime with bad geometry.

onnxruntime 1.32 aborts the whole process (SIGABRT, a libstdc++ assertion) in its
static shape inference when a convolution's dilated kernel is wider than its
padded input: a recipe that is valid protobuf, with allow-listed ops, can kill
the service before onnxruntime's own error handling runs (found by the
hostile-bundle campaign, docs/RELIABILITY.md). So the recipe check follows the
shapes onnxruntime will infer, op by op, from the graph inputs and initializers:

* every Conv, ConvTranspose, MaxPool and AveragePool is checked against its input
  (kernel, strides, dilations, pads, output size at least 1), dims onnxruntime
  cannot know either (a symbolic batch) left out: bad geometry refuses the bundle;
* where this walk cannot follow a shape (an op it does not model, an operand it
  cannot read), a geometry op downstream is *unverified*: the region runs its host
  plan instead (fail closed), and the load says why.

A shape is a tuple of dims, each an int or None (unknown to onnxruntime too); a
value this walk lost is absent from the table.

Shapes computed in the recipe (a symbolic model's ``Shape -> Gather -> Concat ->
Reshape``) are followed as values: the small integer tensors those ops make are
computed here too, each element an int or None where it comes from a dim the walk
does not know, as onnxruntime's own shape inference propagates them. At run time
every dim is known, so the footprint (footprint.py) sizes such a reshape exactly.

The same holds for the float arithmetic a detector's anchor grid does on its feature map's size (YOLOv8's
``Shape -> Gather -> Cast(float) -> Range``, a stride's ``Div``/``Floor``): those values are followed as
float32 computes them (:func:`_float32`, each step rounded as onnxruntime rounds it), a Cast back to an integer
truncated, so a Range or ConstantOfShape over a size derived from the input's dims has an unknown length at
load (a symbolic dim) and its exact length before each run, which the footprint checks against ``max_memory``
before onnxruntime allocates. A value the walk cannot compute exactly (a non-finite float, an integer past
int64) is lost, and what depends on it cannot be sized: fail closed as above.
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime_lite.kernels.pool import pooled_extent

Shape = tuple  # of int | None

#: Ops whose output has the shape of their first input.
SAME_SHAPE = frozenset(
    {
        *("Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Abs", "Neg", "Floor", "Ceil"),
        *("Sin", "Cos", "Tan", "Softplus", "Softsign", "HardSwish", "HardSigmoid", "LeakyRelu", "Elu", "Clip"),
        *("Sign", "Round", "Not", "IsNaN", "IsInf", "Cast", "Softmax", "LogSoftmax", "LRN", "BatchNormalization"),
        *("InstanceNormalization", "LayerNormalization", "CumSum", "Trilu", "QuantizeLinear", "DequantizeLinear"),
        *("com.microsoft.Gelu", "com.microsoft.FastGelu", "com.microsoft.QuickGelu"),
    }
)
BROADCAST = frozenset(
    {
        *("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu", "Mod", "Where"),
        *("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor", "com.microsoft.BiasGelu"),
    }
)
GEOMETRY = frozenset({"Conv", "ConvTranspose", "MaxPool", "AveragePool"})
#: The most elements of a shape computed in the recipe that the walk follows (a rank, a few dims).
MAX_VALUE_ELEMENTS = 64
#: Bounds a legitimate recipe stays far inside.
MAX_KERNEL = 1 << 16
MAX_STRIDE = 1 << 16


class BadGeometry(Exception):
    """A geometry op whose attributes cannot fit its input: the bundle is refused."""


@dataclass
class Node:
    """One recipe node as the shape walk reads it (attributes already decoded)."""

    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    where: str = ""


def _broadcast(shapes: list[Shape]) -> Shape:
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        known = {d for d in dims if d is not None and d != 1}
        if len(known) > 1:
            raise BadGeometry(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(known.pop() if known else (None if None in dims else 1))
    return tuple(out)


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise BadGeometry(f"axis {axis} is outside rank {rank}")
    return axis % rank


def _window(node: Node, x: Shape, w: Shape | None) -> Shape:
    """Output shape of a Conv/ConvTranspose/pool; BadGeometry where its kernel cannot fit its input."""
    a = node.attrs
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET") or "output_shape" in a:
        raise LookupError("auto_pad or output_shape")  # not what a recipe writer writes: unverified
    spatial = len(x) - 2
    kernel = list(a.get("kernel_shape", ()))
    if spatial < 1 or len(kernel) != spatial:
        raise BadGeometry(f"{node.where}: kernel_shape {kernel} does not fit input {list(x)}")
    strides = list(a.get("strides", [1] * spatial))
    dilations = list(a.get("dilations", [1] * spatial))
    pads = list(a.get("pads", [0] * 2 * spatial))
    extra = list(a.get("output_padding", [0] * spatial))
    if len(strides) != spatial or len(dilations) != spatial or len(pads) != 2 * spatial or len(extra) != spatial:
        raise BadGeometry(f"{node.where}: strides, dilations, pads or output_padding of the wrong length")
    if node.op_type == "Conv":
        out = [x[0], w[0]]
    elif node.op_type == "ConvTranspose":
        out = [x[0], None if w[1] is None else w[1] * a.get("group", 1)]
    else:
        out = list(x[:2])
    for i in range(spatial):
        k, s, d, (p0, p1), e = kernel[i], strides[i], dilations[i], (pads[i], pads[i + spatial]), extra[i]
        if not (1 <= k <= MAX_KERNEL and 1 <= s <= MAX_STRIDE and 1 <= d <= MAX_KERNEL and p0 >= 0 and p1 >= 0):
            raise BadGeometry(f"{node.where}: kernel {k}, stride {s}, dilation {d}, pads {p0},{p1}")
        extent = (k - 1) * d + 1
        if max(p0, p1) >= extent and node.op_type != "Conv":
            raise BadGeometry(f"{node.where}: pads {p0},{p1} reach past the kernel's extent {extent}")
        size = x[2 + i]
        if node.op_type == "ConvTranspose":
            if not 0 <= e < max(s, d):
                raise BadGeometry(f"{node.where}: output_padding {e} with stride {s}, dilation {d}")
            dim = None if size is None else s * (size - 1) + e + extent - p0 - p1
        else:
            if size is not None and size + p0 + p1 < extent:
                raise BadGeometry(
                    f"{node.where}: kernel extent {extent} is wider than the padded input {size}+{p0}+{p1}"
                )
            ceil_mode = 1 if a.get("ceil_mode") and node.op_type != "Conv" else 0
            dim = None if size is None else pooled_extent(size, k, s, d, p0, p1, ceil_mode)
        if dim is not None and dim < 1:
            raise BadGeometry(f"{node.where}: output dim {dim}")
        out.append(dim)
    return tuple(out)


def _reshape(x: Shape, target: list[int], allowzero: int) -> Shape:
    out = [x[i] if t == 0 and not allowzero and i < len(x) else t for i, t in enumerate(target)]
    if out.count(-1) > 1:
        raise BadGeometry(f"Reshape to {target}: more than one -1")
    if -1 in out:
        known = [d for d in out if d != -1]
        total = math.prod(x) if None not in x else None
        rest = math.prod(known) if None not in known else None
        out[out.index(-1)] = total // rest if total is not None and rest else None
    return tuple(out)


def _matmul(a: Shape, b: Shape) -> Shape:
    if len(a) < 2 or len(b) < 2:  # 1-d operands: numpy's promotion, rare in recipes
        raise LookupError("1-d MatMul operand")
    return (*_broadcast([a[:-2], b[:-2]]), a[-2], b[-1])


def _resize(node: Node, x: Shape, scales: list | None, sizes: list | None) -> Shape:
    """Resize's output (opset 18): ``sizes`` or ``scales`` for the dims ``axes`` names (all by default), the
    others kept; with ``keep_aspect_ratio_policy`` not_larger / not_smaller one scale, the smallest / largest of
    ``sizes / x`` over those axes, applied to each of them and rounded (half away from zero, as onnxruntime)."""
    a = node.attrs
    axes = [_axis(v, len(x)) for v in a.get("axes", range(len(x)))]
    if len(set(axes)) != len(axes):
        raise BadGeometry(f"{node.where}: Resize axes {a.get('axes')} repeat an axis")
    policy = a.get("keep_aspect_ratio_policy", "stretch")
    out = list(x)
    if len(node.inputs) > 3 and node.inputs[3]:
        if sizes is None:
            raise LookupError("Resize sizes not read")
        if len(sizes) != len(axes) or any(v is not None and v < 0 for v in sizes):
            raise BadGeometry(f"{node.where}: Resize sizes {sizes} for axes {axes}")
        if policy == "stretch":  # a size computed from a symbolic dim stays unknown
            for axis, size in zip(axes, sizes):
                out[axis] = size
            return tuple(out)
        if policy not in ("not_larger", "not_smaller") or any(x[axis] is None for axis in axes) or None in sizes:
            raise LookupError(f"Resize keep_aspect_ratio_policy {policy!r}")
        ratios = [size / x[axis] for axis, size in zip(axes, sizes) if x[axis]]
        scale = (min if policy == "not_larger" else max)(ratios) if ratios else 1.0
        for axis in axes:
            out[axis] = math.floor(x[axis] * scale + 0.5)
        return tuple(out)
    if scales is None or len(scales) != len(axes):
        raise LookupError("Resize scales not read")
    for axis, factor in zip(axes, scales):
        if not math.isfinite(factor) or factor <= 0:
            raise BadGeometry(f"{node.where}: Resize scale {factor}")
        out[axis] = None if x[axis] is None else math.floor(x[axis] * float(factor))
    return tuple(out)


def _reduce(x: Shape, axes: list[int] | None, keepdims: int) -> Shape:
    axes_set = {_axis(a, len(x)) for a in axes} if axes else set(range(len(x)))
    if keepdims:
        return tuple(1 if i in axes_set else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in axes_set)


Rule = Callable[[Node, list, dict], list]

#: ONNX element types of the integer values the walk computes (int32, int64).
INTEGER_TYPES = (6, 7)
#: Element-wise integer arithmetic the walk computes on shape values; None (an unknown dim) stays None.
ARITHMETIC: dict[str, Callable[[int, int], int | None]] = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": lambda a, b: None if b == 0 else (abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1),  # C's truncation
    "Max": max,
    "Min": min,
}


#: Recurrent ops onnxruntime (1.32) aborts the whole process on ("terminate called without an active exception")
#: when their batch is 0: a run that would reach one is refused before onnxruntime sees it.
ENDS_THE_PROCESS_ON_AN_EMPTY_BATCH = frozenset({"LSTM", "GRU", "com.microsoft.DynamicQuantizeLSTM"})
#: ONNX's float32 element type: shape values cast to it are followed as float32 computes them.
FLOAT_TYPE = 1
#: Float arithmetic on shape values, in float32 as onnxruntime computes it.
FLOAT_ARITHMETIC: dict[str, Callable[[np.float32, np.float32], np.float32]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Max": np.maximum, "Min": np.minimum,
}  # fmt: skip
INT64_RANGE = range(-(1 << 63), 1 << 63)


def _float32(value: float | int) -> float | None:
    """``value`` rounded to float32 as a Python float; None where it is not finite there (the walk loses it)."""
    with np.errstate(all="ignore"):
        rounded = float(np.float32(value))
    return rounded if math.isfinite(rounded) else None


def _number(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _to_integer(v: int | float | None) -> int | None:
    """A Cast to an integer type: a float truncated toward zero (C's conversion), None where it cannot fit."""
    if v is None or isinstance(v, int):
        return v
    if not math.isfinite(v) or int(v) not in INT64_RANGE:
        return None
    return int(v)


def _float_op(op: str, p: int | float | None, q: int | float | None) -> float | None:
    if p is None or q is None:
        return None
    with np.errstate(all="ignore"):
        return _float32(FLOAT_ARITHMETIC[op](np.float32(p), np.float32(q)))


def _shape_value(node: Node, ins: list, read: Callable[[int], list | None]) -> list | None:
    """The elements of ``node``'s output where it computes a shape (each an int, or a float where the recipe
    computes on float32 sizes, None where unknown), else None."""
    op, a = node.op_type, node.attrs
    if op == "Shape":
        return list(ins[0][slice(a.get("start", 0), a.get("end"))])
    x = read(0)
    if x is None or not all(_number(v) for v in x):
        return None
    floats = any(isinstance(v, float) for v in x)
    if op == "Cast":
        if a.get("to") in INTEGER_TYPES:
            return [_to_integer(v) for v in x]
        if a.get("to") == FLOAT_TYPE:
            return [None if v is None else _float32(v) for v in x]
        return None
    if op in ("Floor", "Ceil"):  # float ops only: ints here are not a recipe onnxruntime loads
        if not all(v is None or isinstance(v, float) for v in x):
            return None
        rounding = math.floor if op == "Floor" else math.ceil
        return [None if v is None else float(rounding(v)) for v in x]
    if op in ("Squeeze", "Unsqueeze", "Reshape", "Flatten"):  # the elements in the same order
        return x
    if op == "Gather" and len(ins[0]) == 1:
        indices = read(1)
        if indices is None or not all(isinstance(i, int) and -len(x) <= i < len(x) for i in indices):
            return None
        return [x[i] for i in indices]
    if op == "Slice" and len(ins[0]) == 1:
        bounds = [read(i) for i in range(1, len(node.inputs))]
        if len(bounds) < 2 or any(b is None or len(b) != 1 or None in b for b in bounds):
            return None
        start, end, step = bounds[0][0], bounds[1][0], bounds[3][0] if len(bounds) > 3 else 1
        return x[slice(start, end, step)] if step else None
    if op == "Concat":
        parts = [read(i) for i in range(len(node.inputs))]
        return None if any(p is None for p in parts) else [v for p in parts for v in p]
    if op in ARITHMETIC and len(node.inputs) == 2:
        y = read(1)
        if y is None or not all(_number(v) for v in y) or (len(x) != len(y) and 1 not in (len(x), len(y))):
            return None
        n = max(len(x), len(y))
        pairs = zip(x * n if len(x) == 1 else x, y * n if len(y) == 1 else y)
        if floats or any(isinstance(v, float) for v in y):
            return [_float_op(op, p, q) for p, q in pairs]
        out = [None if p is None or q is None else ARITHMETIC[op](p, q) for p, q in pairs]
        return [None if v is None or v not in INT64_RANGE else v for v in out]
    return None


def _infer(node: Node, ins: list, ints: Mapping[str, list]) -> list:
    """Output shapes of ``node`` from its input shapes (``ints``: the small operands this walk could read, and
    the shapes computed in the recipe, an element None where it is unknown)."""
    op, a = node.op_type, node.attrs
    x = ins[0] if ins else None

    def scalars(i: int) -> list | None:
        return ints.get(node.inputs[i]) if i < len(node.inputs) and node.inputs[i] else None

    def partial(i: int) -> list | None:
        """Input ``i`` as a shape operand: its integers (None where unknown); a float one is not a shape."""
        found = scalars(i)
        return None if found is None or any(isinstance(v, float) for v in found) else found

    def operand(i: int) -> list[int] | None:
        found = partial(i)
        return None if found is None or None in found else found

    if op in SAME_SHAPE:
        return [x]
    if op in BROADCAST:
        try:
            return [_broadcast(ins)]
        except BadGeometry as e:
            raise BadGeometry(f"{node.where} ({op}): {e}") from None
    if op in GEOMETRY:
        return [_window(node, x, ins[1] if len(ins) > 1 else None)]
    if op in ("MatMul", "MatMulInteger"):
        return [_matmul(ins[0], ins[1])]
    if op == "com.microsoft.FusedMatMul":
        if a.get("transBatchA") or a.get("transBatchB"):
            raise LookupError("FusedMatMul transBatchA/B")
        left, right = list(ins[0]), list(ins[1])
        for operand_shape, flag in ((left, "transA"), (right, "transB")):
            if a.get(flag) and len(operand_shape) >= 2:
                operand_shape[-2], operand_shape[-1] = operand_shape[-1], operand_shape[-2]
        return [_matmul(tuple(left), tuple(right))]
    if op in ("LSTM", "GRU", "RNN", "com.microsoft.DynamicQuantizeLSTM"):  # X [seq, batch, input] -> Y, Y_h (Y_c)
        hidden, dirs = a["hidden_size"], 2 if a.get("direction") == "bidirectional" else 1
        if len(x) != 3 or not isinstance(hidden, int) or not 1 <= hidden <= MAX_KERNEL or a.get("layout", 0):
            raise BadGeometry(f"{node.where}: {op} over {list(x)} with hidden_size {hidden}")
        if x[1] == 0 and op in ENDS_THE_PROCESS_ON_AN_EMPTY_BATCH:
            raise BadGeometry(f"{node.where}: onnxruntime ends the process on {op} over an empty batch (X {list(x)})")
        state = (dirs, x[1], hidden)
        return [(x[0], dirs, x[1], hidden), state, state][: 3 if op.endswith("LSTM") else 2]

    if op == "DynamicQuantizeLinear":  # y, and its scale and zero point (scalars)
        return [x, (), ()]
    if op == "Gemm":
        m = x[1] if a.get("transA") else x[0]
        n = ins[1][0] if a.get("transB") else ins[1][1]
        return [(m, n)]
    if op == "Flatten":
        axis = a.get("axis", 1)
        axis = axis + len(x) if axis < 0 else axis
        if not 0 <= axis <= len(x):
            raise BadGeometry(f"{node.where}: Flatten axis {a.get('axis')} of rank {len(x)}")
        head, tail = x[:axis], x[axis:]
        return [(math.prod(head) if None not in head else None, math.prod(tail) if None not in tail else None)]
    if op == "Transpose":
        perm = a.get("perm", list(reversed(range(len(x)))))
        return [tuple(x[p] for p in perm)]
    if op == "Shape":
        return [(len(range(len(x))[slice(a.get("start", 0), a.get("end"))]),)]
    if op == "Reshape" and partial(1) is not None:
        return [_reshape(x, partial(1), a.get("allowzero", 0))]
    if op == "Concat":
        axis = _axis(a["axis"], len(x))
        dims = [s[axis] for s in ins]
        return [(*x[:axis], sum(dims) if None not in dims else None, *x[axis + 1 :])]
    if op == "Unsqueeze" and operand(1) is not None:
        out = list(x)
        for axis in sorted(_axis(v, len(x) + len(operand(1))) for v in operand(1)):
            out.insert(axis, 1)
        return [tuple(out)]
    if op == "Squeeze":
        axes = operand(1) if len(node.inputs) > 1 else [i for i, d in enumerate(x) if d == 1]
        if axes is not None:
            drop = {_axis(v, len(x)) for v in axes}
            return [tuple(d for i, d in enumerate(x) if i not in drop)]
    if op.startswith("Reduce") and "noop_with_empty_axes" not in a:
        axes = operand(1) if len(node.inputs) > 1 else a.get("axes")
        if len(node.inputs) < 2 or axes is not None:
            return [_reduce(x, axes, a.get("keepdims", 1))]
    if op in ("ArgMax", "ArgMin"):
        return [_reduce(x, [a.get("axis", 0)], a.get("keepdims", 1))]
    if op == "Gather":
        axis = _axis(a.get("axis", 0), len(x))
        return [(*x[:axis], *ins[1], *x[axis + 1 :])]
    if op == "GatherElements":
        return [ins[1]]
    if op == "GatherND" and ins[1] and ins[1][-1] is not None:  # rows of the indices' last axis address data
        data, indices, batch = ins[0], ins[1], a.get("batch_dims", 0)
        if not 0 <= batch < len(indices) or batch + indices[-1] > len(data):
            raise BadGeometry(f"{node.where}: GatherND indices {list(indices)} (batch_dims {batch}) on {list(data)}")
        return [(*indices[:-1], *data[batch + indices[-1] :])]
    if op == "Pad" and partial(1) is not None and len(node.inputs) < 4:  # pads computed from a symbolic size: unknown
        pads, rank = partial(1), len(x)
        return [
            tuple(
                None if None in (d, pads[i], pads[i + rank]) else d + pads[i] + pads[i + rank] for i, d in enumerate(x)
            )
        ]
    if op == "Expand" and partial(1) is not None:
        return [_broadcast([x, tuple(partial(1))])]
    if op == "Tile" and operand(1) is not None:
        return [tuple(None if d is None else d * r for d, r in zip(x, operand(1)))]
    if op == "Slice" and all(operand(i) is not None for i in range(1, len(node.inputs))):
        starts, ends = operand(1), operand(2)
        axes = operand(3) if len(node.inputs) > 3 else list(range(len(starts)))
        steps = operand(4) if len(node.inputs) > 4 else [1] * len(starts)
        out = list(x)
        for start, end, axis, step in zip(starts, ends, axes, steps):
            axis = _axis(axis, len(x))
            if out[axis] is not None:
                out[axis] = len(range(*slice(start, end, step).indices(out[axis])))
        return [tuple(out)]
    if op == "Resize":
        scales = scalars(2)
        return [_resize(node, x, None if scales is None or None in scales else scales, partial(3))]
    if op == "Range" and all(scalars(i) is not None and len(scalars(i)) == 1 for i in range(3)):
        return [(_range_length(node, *(scalars(i)[0] for i in range(3))),)]
    if op == "ConstantOfShape" and partial(0) is not None:  # a shape computed at run time: sized before each run
        dims = partial(0)
        if any(d is not None and d < 0 for d in dims):
            raise BadGeometry(f"{node.where}: ConstantOfShape of shape {dims}")
        return [tuple(dims)]
    if op == "Split" and operand(1) is not None:
        axis = _axis(a.get("axis", 0), len(x))
        return [(*x[:axis], size, *x[axis + 1 :]) for size in operand(1)]
    raise LookupError(op)  # not modelled: what depends on it is unverified


def _range_length(node: Node, start: Any, limit: Any, delta: Any) -> int | None:
    """How many elements Range makes (None where a bound is a dim the walk does not know yet); a zero step never
    ends, so the bundle is refused."""
    if None in (start, limit, delta):
        return None
    if delta == 0:
        raise BadGeometry(f"{node.where}: Range with a step of 0")
    if any(isinstance(v, float) for v in (start, limit, delta)):  # onnxruntime: ceil((1.0 * (limit - start)) / delta)
        span = _float_op("Sub", limit, start)
        count = span / float(delta) if span is not None and math.isfinite(delta) else math.inf
        if not math.isfinite(count):
            raise BadGeometry(f"{node.where}: Range from {start} to {limit} by {delta} does not end")
        count = math.ceil(count)
    else:
        count = -(-(limit - start) // delta)
    return max(0, count)


def check_geometry(graph_inputs: dict[str, Shape], initializers: dict[str, Shape], ints: dict, nodes: list[Node]):
    """Walk the nodes in order; BadGeometry for a geometry op that cannot fit, else why one is unverified, or None."""
    return walk(graph_inputs, initializers, ints, nodes)[1]


def walk(
    graph_inputs: dict[str, Shape], initializers: dict[str, Shape], ints: dict, nodes: list[Node]
) -> tuple[dict[str, Shape], str | None]:
    """(every value's shape the walk followed, why a geometry op is unverified or None); BadGeometry as above."""
    shapes: dict[str, Shape] = {**initializers, **graph_inputs}
    values: dict[str, list] = {}  # shapes computed in the recipe
    known = ChainMap(values, ints)
    unverified = None
    for node in nodes:
        ins = [shapes.get(name) if name else () for name in node.inputs]
        if any(s is None for s in ins) or not ins:
            if node.op_type in GEOMETRY and unverified is None:
                unverified = f"the input shape of {node.op_type} {node.where} could not be followed"
            continue
        try:
            outs = _infer(node, ins, known)
            _follow_value(node, ins, outs, known, values)
        except LookupError:
            if node.op_type in GEOMETRY and unverified is None:
                unverified = f"{node.op_type} {node.where} has attributes the check does not model"
            continue
        except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError) as e:  # attributes of the wrong form
            raise BadGeometry(f"{node.where} ({node.op_type}): {type(e).__name__}") from None
        for name, shape in zip(node.outputs, outs):
            if name:
                shapes[name] = shape
    return shapes, unverified


def _follow_value(node: Node, ins: list, outs: list, known: Mapping[str, list], values: dict[str, list]) -> None:
    """Record in ``values`` the shape ``node`` computes (one small integer output), if it computes one."""
    if len(outs) != 1 or not node.outputs or not node.outputs[0] or None in outs[0]:
        return
    size = math.prod(outs[0])
    if size > MAX_VALUE_ELEMENTS:
        return

    def read(i: int) -> list | None:
        return known.get(node.inputs[i]) if i < len(node.inputs) and node.inputs[i] else None

    value = _shape_value(node, ins, read)
    if value is not None and len(value) == size:
        values[node.outputs[0]] = value
