"""ATen ops to canonical IR ops, one small function per op family.

Keys are ATen overload packets (``aten.conv2d`` covers every overload); a converter
reads its arguments by their schema names. Ops that torch.export leaves at a higher
level (``linear``, ``layer_norm``, ``scaled_dot_product_attention``) are kept so the
IR sees them whole; anything else is first decomposed by torch into ops listed here.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from aot.frontend.torch.context import AtenContext, SymbolicSize, ntuple, numpy_dtype
from aot.ir.graph import Value

Converter = Callable[[AtenContext], "Value | list[Value]"]
ATEN: dict[str, Converter] = {}


def aten(*names: str):
    def register(fn: Converter) -> Converter:
        for name in names:
            ATEN[f"aten.{name}"] = fn
        return fn

    return register


# -- elementwise --------------------------------------------------------------------------

UNARY = {
    "relu": "relu",
    "relu6": "relu6",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "reciprocal": "reciprocal",
    "neg": "negative",
    "abs": "abs",
    "erf": "erf",
    "floor": "floor",
    "ceil": "ceil",
    "sin": "sin",
    "cos": "cos",
    "hardswish": "hard_swish",
    "logical_not": "logical_not",
}
for _aten, _op in UNARY.items():
    aten(_aten)(lambda ctx, op=_op: ctx.emit(op, ctx["self"]))

BINARY = {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "div": "divide",
    "pow": "power",
    "maximum": "maximum",
    "minimum": "minimum",
    "eq": "equal",
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
}


def _operands(ctx: AtenContext) -> tuple[Value, Value]:
    """The two operands as IR values, Python scalars taking the tensor's dtype (torch's promotion for scalars)."""
    a, b = ctx.args.get("self", ctx.args.get("input")), ctx.args.get("other", ctx.args.get("exponent"))
    if not isinstance(a, Value):
        a = ctx.constant(a, b.type.dtype)
    if isinstance(b, float) and not a.type.dtype.startswith("float"):
        a = ctx.emit("cast", a, to="float32")
    return a, ctx.tensor(b, a)


def _binary(op: str) -> Converter:
    def convert(ctx: AtenContext) -> Value:
        a, b = _operands(ctx)
        alpha = ctx.args.get("alpha", 1)
        if alpha != 1:
            b = ctx.emit("multiply", b, ctx.constant(alpha, b.type.dtype))
        if op == "divide":
            return _divide(ctx, a, b, ctx.args.get("rounding_mode"))
        return ctx.emit(op, a, b)

    return convert


for _aten, _op in BINARY.items():
    aten(_aten)(_binary(_op))


def _divide(ctx: AtenContext, a: Value, b: Value, mode: str | None) -> Value:
    """torch.div: true division (integers become floats), or rounded toward zero or down."""
    integers = not a.type.dtype.startswith("float")
    if mode is None:
        if integers:
            a, b = ctx.emit("cast", a, to="float32"), ctx.emit("cast", b, to="float32")
        return ctx.emit("divide", a, b)
    if mode == "trunc":  # the IR's integer divide truncates, as ONNX's does
        quotient = ctx.emit("divide", a, b)
        return quotient if integers else ctx.emit("cast", ctx.emit("cast", quotient, to="int64"), to=a.type.dtype)
    if mode == "floor":
        if integers:  # a - a mod b (the mod taking b's sign) is an exact multiple of b
            return ctx.emit("divide", ctx.emit("subtract", a, ctx.emit("mod", a, b, fmod=0)), b)
        return ctx.emit("floor", ctx.emit("divide", a, b))
    raise ctx.unsupported(f"rounding_mode={mode!r}")


def _logical(op: str) -> Converter:
    """Bitwise ops on bool tensors are the logical ones (integer bit twiddling is not in the IR)."""

    def convert(ctx: AtenContext) -> Value:
        operands = [ctx["self"]] + ([ctx["other"]] if "other" in ctx.args else [])
        if any(not isinstance(v, Value) or v.type.dtype != "bool" for v in operands):
            raise ctx.unsupported("bitwise ops on non-boolean tensors")
        return ctx.emit(op, *operands)

    return convert


for _aten, _op in {"bitwise_and": "logical_and", "bitwise_or": "logical_or", "bitwise_xor": "logical_xor",
                   "bitwise_not": "logical_not", "logical_and": "logical_and", "logical_or": "logical_or",
                   "logical_xor": "logical_xor"}.items():  # fmt: skip
    aten(_aten)(_logical(_op))


# -- constants that decompositions create ---------------------------------------------------


def _dtype(ctx: AtenContext, value: Any, like: Value | None = None) -> str:
    if ctx.get("dtype") is not None:
        return numpy_dtype(ctx["dtype"])
    if like is not None:
        return like.type.dtype
    return "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else "float32"


@aten("scalar_tensor")
def _scalar_tensor(ctx):
    return ctx.constant(ctx["s"], _dtype(ctx, ctx["s"]))


@aten("full", "full_like", "zeros_like", "ones_like")
def _full(ctx):
    like = ctx.args.get("self")
    value = {"aten.zeros_like": 0, "aten.ones_like": 1}.get(
        str(ctx.node.target.overloadpacket), ctx.args.get("fill_value")
    )
    shape = like.type.shape if like is not None else tuple(ctx["size"])
    if not all(isinstance(d, int) for d in shape):
        raise ctx.unsupported(f"a filled tensor of symbolic shape {list(shape)}")
    return ctx.constant(np.full(shape, value), _dtype(ctx, value, like))


@aten("arange")
def _arange(ctx):
    start, end, step = ctx.get("start", 0), ctx["end"], ctx.get("step", 1)
    if any(isinstance(v, (Value, SymbolicSize)) for v in (start, end, step)):
        raise ctx.unsupported("arange with bounds known only at run time")
    return ctx.constant(np.arange(start, end, step), _dtype(ctx, start + end + step))


@aten("any")
def _any(ctx):
    x = ctx["self"]
    if x.type.dtype != "bool":
        x = ctx.emit("logical_not", ctx.emit("equal", x, ctx.constant(0, x.type.dtype)))
    dims = ctx.get("dim")
    axes = None if dims in (None, []) else [d % x.type.rank for d in ntuple(dims, 1)]
    return ctx.emit("reduce_max", x, axes=axes, keepdims=int(bool(ctx.get("keepdim", False))))


@aten("rsub")
def _rsub(ctx):
    a, b = _operands(ctx)
    return ctx.emit("subtract", b, ctx.emit("multiply", a, ctx.constant(ctx.get("alpha", 1), a.type.dtype)))


@aten("rsqrt")
def _rsqrt(ctx):
    return ctx.emit("reciprocal", ctx.emit("sqrt", ctx["self"]))


@aten("where")
def _where(ctx):
    x, other = ctx["self"], ctx["other"]
    if not isinstance(x, Value) and not isinstance(other, Value):  # two Python scalars: torch's default dtype
        x = ctx.constant(x, "float32")
    other = ctx.tensor(other, x) if isinstance(x, Value) else other
    return ctx.emit("where", ctx["condition"], ctx.tensor(x, other), other)


# -- activations --------------------------------------------------------------------------


@aten("gelu")
def _gelu(ctx):
    return ctx.emit("gelu", ctx["self"], approximate=ctx.get("approximate", "none"))


@aten("silu")
def _silu(ctx):
    x = ctx["self"]
    return ctx.emit("multiply", x, ctx.emit("sigmoid", x))


@aten("hardsigmoid")
def _hardsigmoid(ctx):
    return ctx.emit("hard_sigmoid", ctx["self"], alpha=1 / 6, beta=0.5)


@aten("leaky_relu")
def _leaky_relu(ctx):
    return ctx.emit("leaky_relu", ctx["self"], alpha=float(ctx.get("negative_slope", 0.01)))


@aten("elu")
def _elu(ctx):
    if ctx.get("scale", 1) != 1 or ctx.get("input_scale", 1) != 1:
        raise ctx.unsupported("elu with scale or input_scale other than 1")
    return ctx.emit("elu", ctx["self"], alpha=float(ctx.get("alpha", 1.0)))


@aten("clamp", "hardtanh", "clip")
def _clamp(ctx):
    x = ctx["self"]
    lo = ctx.args.get("min", ctx.args.get("min_val"))
    hi = ctx.args.get("max", ctx.args.get("max_val"))
    if isinstance(lo, Value) or isinstance(hi, Value):
        raise ctx.unsupported("tensor bounds")
    if lo == 0 and hi == 6:
        return ctx.emit("relu6", x)
    if lo == 0 and hi is None:
        return ctx.emit("relu", x)
    return ctx.emit("clip", x, min=None if lo is None else float(lo), max=None if hi is None else float(hi))


@aten("softmax", "_softmax", "log_softmax", "_log_softmax")
def _softmax(ctx):
    x = ctx["self"]
    op = "log_softmax" if "log" in ctx.op_name else "softmax"
    if ctx.get("dtype") is not None:
        x = ctx.emit("cast", x, to=numpy_dtype(ctx["dtype"]))
    return ctx.emit(op, x, axis=ctx["dim"] % x.type.rank)


# -- convolution, pooling, normalisation ------------------------------------------------


def _conv_pads(ctx, padding: Any, nd: int, kernel: tuple, dilation: list[int]) -> list[int]:
    if padding == "valid":
        return [0] * (2 * nd)
    if padding == "same":
        totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
        return [t // 2 for t in totals] + [t - t // 2 for t in totals]
    pads = ntuple(padding, nd)
    return pads + pads


@aten("conv1d", "conv2d", "conv3d", "convolution", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def _conv(ctx):
    x, w = ctx["input"], ctx["weight"]
    nd = w.type.rank - 2
    transposed = ctx.get("transposed", False) or "transpose" in ctx.op_name
    stride, dilation = ntuple(ctx.get("stride", 1), nd), ntuple(ctx.get("dilation", 1), nd)
    pads = _conv_pads(ctx, ctx.get("padding", 0), nd, w.type.shape[2:], dilation)
    inputs = [x, w] + ([ctx["bias"]] if ctx.get("bias") is not None else [])
    groups = int(ctx.get("groups", 1))
    if transposed:
        return ctx.emit(
            f"conv_transpose{nd}d", *inputs, strides=stride, pads=pads, dilations=dilation, groups=groups,
            output_padding=ntuple(ctx.get("output_padding", 0), nd),
        )  # fmt: skip
    return ctx.emit(f"conv{nd}d", *inputs, strides=stride, pads=pads, dilations=dilation, groups=groups)


@aten("max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices")
def _max_pool(ctx):
    x = ctx["self"]
    nd = x.type.rank - 2
    kernel = ntuple(ctx["kernel_size"], nd)
    stride = ntuple(ctx.get("stride") or kernel, nd)
    pads = ntuple(ctx.get("padding", 0), nd)
    y = ctx.emit(
        f"max_pool{nd}d", x, kernel_shape=kernel, strides=stride, pads=pads + pads,
        dilations=ntuple(ctx.get("dilation", 1), nd), ceil_mode=int(bool(ctx.get("ceil_mode", False))),
    )  # fmt: skip
    return [y] if "indices" in ctx.op_name else y


@aten("avg_pool1d", "avg_pool2d", "avg_pool3d")
def _avg_pool(ctx):
    x = ctx["self"]
    nd = x.type.rank - 2
    if ctx.get("divisor_override") is not None:
        raise ctx.unsupported("divisor_override")
    kernel = ntuple(ctx["kernel_size"], nd)
    pads = ntuple(ctx.get("padding", 0), nd)
    return ctx.emit(
        f"avg_pool{nd}d", x, kernel_shape=kernel, strides=ntuple(ctx.get("stride") or kernel, nd),
        pads=pads + pads, dilations=[1] * nd, ceil_mode=int(bool(ctx.get("ceil_mode", False))),
        count_include_pad=int(bool(ctx.get("count_include_pad", True))),
    )  # fmt: skip


@aten("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "_adaptive_avg_pool2d")
def _adaptive_avg_pool(ctx):
    x = ctx["self"]
    nd = x.type.rank - 2
    out = ntuple(ctx["output_size"], nd)
    spatial = x.type.shape[2:]
    if all(o == 1 for o in out):
        return ctx.emit("reduce_mean", x, axes=list(range(2, 2 + nd)), keepdims=1)
    if not all(isinstance(s, int) and s % o == 0 for s, o in zip(spatial, out)):
        raise ctx.unsupported(f"output size {out} does not divide the input's spatial dims {list(spatial)}")
    kernel = [s // o for s, o in zip(spatial, out)]
    return ctx.emit(
        f"avg_pool{nd}d", x, kernel_shape=kernel, strides=kernel, pads=[0] * (2 * nd), dilations=[1] * nd,
    )  # fmt: skip


def _ones_if_none(ctx, value, like: Value, n: int) -> Value:
    return value if value is not None else ctx.constant(np.ones(n), like.type.dtype)


@aten("batch_norm", "_native_batch_norm_legit_no_training", "native_batch_norm")
def _batch_norm(ctx):
    x = ctx["input"]
    if ctx.get("training", False):
        raise ctx.unsupported("batch norm in training mode (call model.eval() before torch.export)")
    channels = x.type.shape[1]
    scale = _ones_if_none(ctx, ctx.get("weight"), x, channels)
    bias = ctx.get("bias") if ctx.get("bias") is not None else ctx.constant(np.zeros(channels), x.type.dtype)
    y = ctx.emit("batch_norm", x, scale, bias, ctx["running_mean"], ctx["running_var"], epsilon=float(ctx["eps"]))
    return y if ctx.op_name.startswith("aten.batch_norm") else [y]


@aten("layer_norm", "native_layer_norm")
def _layer_norm(ctx):
    x = ctx["input"]
    normalized = list(ctx["normalized_shape"])
    scale = ctx.get("weight")
    if scale is None:
        scale = ctx.constant(np.ones(normalized), x.type.dtype)
    inputs = [x, scale] + ([ctx["bias"]] if ctx.get("bias") is not None else [])
    y = ctx.emit("layer_norm", *inputs, axis=x.type.rank - len(normalized), epsilon=float(ctx.get("eps", 1e-5)))
    return [y] if ctx.op_name.startswith("aten.native") else y


# -- linear algebra -------------------------------------------------------------------------


@aten("linear")
def _linear(ctx):
    inputs = [ctx["input"], ctx["weight"]] + ([ctx["bias"]] if ctx.get("bias") is not None else [])
    return ctx.emit("dense", *inputs)


@aten("matmul", "mm", "bmm")
def _matmul(ctx):
    return ctx.emit("matmul", ctx["self"], ctx["other"] if "other" in ctx.args else ctx["mat2"])


@aten("addmm")
def _addmm(ctx):
    if ctx.get("beta", 1) != 1 or ctx.get("alpha", 1) != 1:
        raise ctx.unsupported("addmm with alpha or beta other than 1")
    return ctx.emit("add", ctx.emit("matmul", ctx["mat1"], ctx["mat2"]), ctx["self"])


@aten("embedding")
def _embedding(ctx):
    return ctx.emit("gather", ctx["weight"], ctx["indices"], axis=0)


@aten("scaled_dot_product_attention")
def _attention(ctx):
    """softmax(q k^T * scale + mask) v, written out so every backend sees plain ops."""
    q, k, v = ctx["query"], ctx["key"], ctx["value"]
    if ctx.get("dropout_p", 0.0) != 0.0:
        raise ctx.unsupported("dropout_p other than 0 (export the model in eval mode)")
    if ctx.get("enable_gqa", False):
        raise ctx.unsupported("enable_gqa")
    rank = k.type.rank
    depth = q.type.shape[-1]
    if not isinstance(depth, int):
        raise ctx.unsupported("a symbolic head dimension")
    scale = ctx.get("scale") or 1.0 / math.sqrt(depth)
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    scores = ctx.emit("matmul", q, ctx.emit("transpose", k, perm=perm))
    scores = ctx.emit("multiply", scores, ctx.constant(scale, scores.type.dtype))
    mask = ctx.get("attn_mask")
    if ctx.get("is_causal", False):
        length, keys = scores.type.shape[-2], scores.type.shape[-1]
        if not (isinstance(length, int) and isinstance(keys, int)):
            raise ctx.unsupported("a causal mask over symbolic sequence lengths")
        mask = ctx.constant(np.tril(np.ones((length, keys), bool)), "bool")
    if mask is not None:
        if mask.type.dtype == "bool":
            mask = ctx.emit(
                "where", mask, ctx.constant(0.0, scores.type.dtype), ctx.constant(-np.inf, scores.type.dtype)
            )
        scores = ctx.emit("add", scores, mask)
    return ctx.emit("matmul", ctx.emit("softmax", scores, axis=rank - 1), v)


# -- reductions ----------------------------------------------------------------------------

REDUCE = {"mean": "reduce_mean", "sum": "reduce_sum", "amax": "reduce_max", "amin": "reduce_min"}


def _reduce(op: str) -> Converter:
    def convert(ctx: AtenContext) -> Value:
        x = ctx["self"]
        if ctx.get("dtype") is not None:
            x = ctx.emit("cast", x, to=numpy_dtype(ctx["dtype"]))
        dims = ctx.get("dim")
        axes = None if dims in (None, []) else [d % x.type.rank for d in ntuple(dims, 1)]
        return ctx.emit(op, x, axes=axes, keepdims=int(bool(ctx.get("keepdim", False))))

    return convert


for _aten, _op in REDUCE.items():
    aten(_aten)(_reduce(_op))


# -- shapes and data movement ------------------------------------------------------------


def _sizes(ctx, sizes: list[Any], x: Value) -> list[int]:
    """A target shape for reshape: run-time sizes become 0 (copy x's dim) where they are x's dim, else -1."""
    out = []
    for i, s in enumerate(sizes):
        if isinstance(s, SymbolicSize):
            same = i < x.type.rank and x.type.shape[i] == s.symbol
            out.append(0 if same else -1)
        else:
            out.append(int(s))
    if out.count(-1) > 1:
        raise ctx.unsupported(f"a reshape to {sizes} has more than one size known only at run time")
    return out


@aten("view", "reshape", "_unsafe_view")
def _view(ctx):
    x = ctx["self"]
    return ctx.emit("reshape", x, shape=_sizes(ctx, list(ctx.args.get("size", ctx.args.get("shape"))), x))


@aten("flatten")
def _flatten(ctx):
    x = ctx["self"]
    rank = max(x.type.rank, 1)
    start, end = ctx.get("start_dim", 0) % rank, ctx.get("end_dim", -1) % rank
    if start == end:
        return x
    tail = x.type.shape[end + 1 :]
    if not all(isinstance(d, int) for d in tail):
        raise ctx.unsupported("flattening before symbolic trailing dims")
    return ctx.emit("reshape", x, shape=[0] * start + [-1] + list(tail))


@aten("unflatten")
def _unflatten(ctx):
    x = ctx["self"]
    dim = ctx["dim"] % x.type.rank
    tail = x.type.shape[dim + 1 :]
    if not all(isinstance(d, int) for d in tail):
        raise ctx.unsupported("unflattening before symbolic trailing dims")
    return ctx.emit("reshape", x, shape=[0] * dim + [int(s) for s in ctx["sizes"]] + list(tail))


@aten("permute")
def _permute(ctx):
    x = ctx["self"]
    return ctx.emit("transpose", x, perm=[d % x.type.rank for d in ctx["dims"]])


@aten("transpose", "t")
def _transpose(ctx):
    x = ctx["self"]
    rank = x.type.rank
    if rank < 2:
        return x
    a, b = (ctx["dim0"] % rank, ctx["dim1"] % rank) if "dim0" in ctx.args else (0, 1)
    perm = list(range(rank))
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.emit("transpose", x, perm=perm)


@aten("unsqueeze")
def _unsqueeze(ctx):
    x = ctx["self"]
    return ctx.emit("unsqueeze", x, axes=[ctx["dim"] % (x.type.rank + 1)])


@aten("squeeze")
def _squeeze(ctx):
    x = ctx["self"]
    dims = ctx.get("dim")
    candidates = range(x.type.rank) if dims is None else [d % max(x.type.rank, 1) for d in ntuple(dims, 1)]
    axes = [d for d in candidates if x.type.shape[d] == 1]  # torch ignores dims that are not 1
    return ctx.emit("squeeze", x, axes=axes) if axes else x


@aten("expand")
def _expand(ctx):
    x = ctx["self"]
    sizes = [int(s) if not isinstance(s, SymbolicSize) else -1 for s in ctx["size"]]
    offset = len(sizes) - x.type.rank
    shape = [x.type.shape[i - offset] if s == -1 else s for i, s in enumerate(sizes)]
    if not all(isinstance(d, int) for d in shape):
        raise ctx.unsupported(f"expand to symbolic sizes {shape}")
    return ctx.emit("expand", x, shape=shape)


@aten("cat", "concat")
def _cat(ctx):
    tensors = [t for t in ctx["tensors"] if t.type.rank > 1 or t.type.shape != (0,)]
    return ctx.emit("concat", *tensors, axis=ctx.get("dim", 0) % tensors[0].type.rank)


def _split_sizes(ctx, x: Value, dim: int, size: int) -> list[int]:
    total = x.type.shape[dim]
    if not isinstance(total, int):
        raise ctx.unsupported("splitting a symbolic dim")
    return [min(size, total - start) for start in range(0, total, size)]


@aten("split", "split_with_sizes", "chunk", "unsafe_split")
def _split(ctx):
    x = ctx["self"]
    dim = ctx.get("dim", 0) % x.type.rank
    if "chunks" in ctx.args:
        sizes = _split_sizes(ctx, x, dim, -(-x.type.shape[dim] // ctx["chunks"]))
    elif isinstance(ctx["split_sizes" if "split_sizes" in ctx.args else "split_size"], int):
        sizes = _split_sizes(ctx, x, dim, ctx.args.get("split_size", ctx.args.get("split_sizes")))
    else:
        sizes = [int(s) for s in ctx.args.get("split_sizes", ctx.args.get("split_size"))]
    node = ctx.graph.add_node("split", [x], {"axis": dim, "sizes": sizes}, name=ctx.name)
    return node.outputs


@aten("slice")
def _slice(ctx):
    x = ctx["self"]
    dim = ctx.get("dim", 0) % x.type.rank
    start, end, step = ctx.get("start", 0), ctx.get("end", 2**63 - 1), ctx.get("step", 1)
    if any(isinstance(v, SymbolicSize) for v in (start, end)):
        raise ctx.unsupported("slice bounds known only at run time")
    if start == 0 and end >= 2**62 and step == 1:
        return x
    return ctx.emit("slice", x, starts=[int(start)], ends=[int(min(end, 2**63 - 1))], axes=[dim], steps=[int(step)])


@aten("select")
def _select(ctx):
    x = ctx["self"]
    return ctx.emit("gather", x, ctx.constant(ctx["index"], "int64"), axis=ctx["dim"] % x.type.rank)


@aten("contiguous", "clone", "dropout", "alias", "detach", "lift_fresh_copy", "_to_copy", "to")
def _identity(ctx):
    x = ctx["self"] if "self" in ctx.args else ctx["input"]
    dtype = ctx.get("dtype")
    if dtype is not None and numpy_dtype(dtype) != x.type.dtype:
        return ctx.emit("cast", x, to=numpy_dtype(dtype))
    if "dropout" in ctx.op_name and ctx.get("train", False):
        raise ctx.unsupported("dropout in training mode (call model.eval() before torch.export)")
    return x


#: Python-level calls torch.export leaves in the graph: tuple indexing and size queries.
PYTHON_CALLS: dict[Any, str] = {operator.getitem: "getitem"}
