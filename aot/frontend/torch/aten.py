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
    "tan": "tan",
    "acos": "acos",
    "acosh": "acosh",
    "asin": "asin",
    "asinh": "asinh",
    "atan": "atan",
    "atanh": "atanh",
    "sinh": "sinh",
    "cosh": "cosh",
    "log1p": "log1p",
    "expm1": "expm1",
    "log2": "log2",
    "log10": "log10",
}


def _as_result_dtype(ctx: AtenContext, x: Value) -> Value:
    """``x`` cast to the dtype torch computes the op in, where they differ: ``torch.sin`` of int64 ids is float32."""
    meta = ctx.node.meta.get("val")
    if hasattr(meta, "dtype") and isinstance(x, Value):
        dtype = numpy_dtype(meta.dtype)
        if dtype != x.type.dtype and dtype.startswith("float"):
            return ctx.emit("cast", x, to=dtype)
    return x


for _aten, _op in UNARY.items():
    aten(_aten)(lambda ctx, op=_op: ctx.emit(op, _as_result_dtype(ctx, ctx["self"])))

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
        a = ctx.tensor(a, b)
    if isinstance(b, float) and not a.type.dtype.startswith("float"):
        a = ctx.emit("cast", a, to="float32")
    b = ctx.tensor(b, a)
    if a.type.dtype != b.type.dtype:  # int64 ids + float32, a bool mask * float: torch's promotion
        dtype = _promoted(ctx, a, b)
        a, b = (v if v.type.dtype == dtype else ctx.emit("cast", v, to=dtype) for v in (a, b))
    return a, b


def _promoted(ctx: AtenContext, a: Value, b: Value) -> str:
    """The dtype torch computes ``a op b`` in: its own result dtype, or for comparisons the wider operand's."""
    meta = ctx.node.meta.get("val")
    if hasattr(meta, "dtype") and str(meta.dtype) != "torch.bool":
        return numpy_dtype(meta.dtype)
    kinds = [v.type.dtype.startswith("float") * 2 + (v.type.dtype != "bool") for v in (a, b)]
    if kinds[0] != kinds[1]:
        return (a if kinds[0] > kinds[1] else b).type.dtype
    return str(np.promote_types(a.type.dtype, b.type.dtype))


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


def _bitwise(name: str) -> Converter:
    """Bitwise ops: the logical ones on bool masks, bit twiddling on integers."""

    def convert(ctx: AtenContext) -> Value:
        a = ctx["self"]
        operands = [a] + ([ctx.tensor(ctx["other"], a)] if "other" in ctx.args else [])
        if all(v.type.dtype == "bool" for v in operands):
            return ctx.emit(f"logical_{name}", *operands)
        if not all(v.type.dtype.startswith(("int", "uint")) for v in operands):
            raise ctx.unsupported(f"bitwise_{name} on {', '.join(v.type.dtype for v in operands)} tensors")
        return ctx.emit(f"bitwise_{name}", *operands)

    return convert


for _name in ("and", "or", "xor", "not"):
    names = [f"bitwise_{_name}"] + ([f"__{_name}__"] if _name != "not" else [])  # x & y is aten.__and__
    aten(*names)(_bitwise(_name))
for _name in ("and", "or", "xor"):
    aten(f"logical_{_name}")(
        lambda ctx, op=f"logical_{_name}": ctx.emit(op, *[_as_bool(ctx, v) for v in _operands(ctx)])
    )


def _as_bool(ctx: AtenContext, x: Value) -> Value:
    return x if x.type.dtype == "bool" else ctx.emit("logical_not", ctx.emit("equal", x, ctx.constant(0, x.type.dtype)))


@aten("logical_not")
def _logical_not(ctx):
    x = ctx["self"]
    return ctx.emit("logical_not", x) if x.type.dtype == "bool" else ctx.emit("equal", x, ctx.constant(0, x.type.dtype))


@aten("ne")
def _ne(ctx):
    return ctx.emit("logical_not", ctx.emit("equal", *_operands(ctx)))


@aten("remainder")
def _remainder(ctx):
    return ctx.emit("mod", *_operands(ctx), fmod=0)  # the result takes the divisor's sign, as in Python


@aten("fmod")
def _fmod(ctx):
    return ctx.emit("mod", *_operands(ctx), fmod=1)  # the result takes the dividend's sign, as in C


@aten("floor_divide")
def _floor_divide(ctx):
    return _divide(ctx, *_operands(ctx), "floor")


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


FILL_VALUES = {"zeros": 0, "zeros_like": 0, "new_zeros": 0, "ones": 1, "ones_like": 1, "new_ones": 1}


def _filled(ctx: AtenContext, sizes: list[Any] | Value, value: Any, dtype: str) -> Value:
    """A tensor of one value: a constant when the shape is static, else built at run time."""
    if isinstance(value, Value):  # fill.Tensor: a 0-d tensor's value
        return ctx.emit("add", ctx.emit("cast", value, to=dtype), _filled(ctx, sizes, 0, dtype))
    if isinstance(sizes, Value):  # a tensor whose shape to copy
        if sizes.type.is_static:
            return ctx.constant(np.full(sizes.type.shape, value), dtype)
        shape = ctx.emit("shape", sizes)
    elif not any(isinstance(s, SymbolicSize) for s in sizes):
        return ctx.constant(np.full([int(s) for s in sizes], value), dtype)
    else:
        shape = ctx.shape_tensor(sizes)
    return ctx.emit("constant_of_shape", shape, value=float(value), dtype=dtype)


@aten("full", "full_like", "zeros", "zeros_like", "ones", "ones_like", "empty", "empty_like", "empty_permuted",
      "new_zeros", "new_ones", "new_full", "new_empty", "fill")  # fmt: skip
def _full(ctx):
    """Filled tensors; ``empty`` ones are zeros (their contents are never read before being written)."""
    like = ctx.args.get("self", ctx.args.get("input"))
    name = ctx.op_name.split(".")[1]
    value = FILL_VALUES.get(name, ctx.args.get("fill_value", ctx.args.get("value", 0)))
    sizes = ctx.args.get("size")
    if name.startswith("new_"):  # new_* take the dtype of self, the shape of size
        like_dtype = like.type.dtype
        like = None
    else:
        like_dtype = like.type.dtype if like is not None else None
    default = _dtype(ctx, value) if name in ("full", "fill") else "float32"  # torch.zeros(3) is float
    dtype = numpy_dtype(ctx["dtype"]) if ctx.get("dtype") is not None else like_dtype or default
    return _filled(ctx, like if like is not None else list(sizes), value, dtype)


@aten("arange")
def _arange(ctx):
    start, end, step = ctx.get("start", 0), ctx["end"], ctx.get("step", 1)
    if isinstance(start, Value) or isinstance(end, Value) or isinstance(step, Value):
        raise ctx.unsupported("arange with tensor bounds")
    if not any(isinstance(v, SymbolicSize) for v in (start, end, step)):
        return ctx.constant(np.arange(start, end, step), _dtype(ctx, start + end + step))
    dtype = _dtype(ctx, 0)  # sizes are integers: int64 unless a dtype is given
    numbers = ctx.emit("range", ctx.scalar(start), ctx.scalar(end), ctx.scalar(step))
    return numbers if dtype == "int64" else ctx.emit("cast", numbers, to=dtype)


@aten("any")
def _any(ctx):
    x = ctx["self"]
    if x.type.dtype != "bool":
        x = ctx.emit("logical_not", ctx.emit("equal", x, ctx.constant(0, x.type.dtype)))
    dims = ctx.get("dim")
    if x.type.rank == 0:
        return ctx.emit("copy", x)
    axes = None if dims in (None, []) else [d % x.type.rank for d in ntuple(dims, 1)]
    return ctx.emit("reduce_max", x, axes=axes, keepdims=int(bool(ctx.get("keepdim", False))))


@aten("rsub")
def _rsub(ctx):
    a, b = _operands(ctx)
    return ctx.emit("subtract", b, ctx.emit("multiply", a, ctx.constant(ctx.get("alpha", 1), a.type.dtype)))


@aten("rsqrt")
def _rsqrt(ctx):
    return ctx.emit("reciprocal", ctx.emit("sqrt", _as_result_dtype(ctx, ctx["self"])))


@aten("where")
def _where(ctx):
    """Both branches in the dtype torch's promotion gives the result (the node's own): ``where(m, int_ids, 0.5)``
    is float32, and so is ``where(m, int_ids, float_tensor)``; a Python scalar takes that dtype."""
    x, other = ctx["self"], ctx["other"]
    meta = ctx.node.meta.get("val")
    if hasattr(meta, "dtype"):
        dtype = numpy_dtype(meta.dtype)
    elif isinstance(x, Value) or isinstance(other, Value):
        dtype = (x if isinstance(x, Value) else other).type.dtype
    else:  # two Python scalars: torch's default dtype
        dtype = "float32"
    x, other = (
        ctx.constant(v, dtype)
        if not isinstance(v, Value)
        else v
        if v.type.dtype == dtype
        else ctx.emit("cast", v, to=dtype)
        for v in (x, other)
    )
    return ctx.emit("where", ctx["condition"], x, other)


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


@aten("clamp", "clamp_min", "clamp_max", "hardtanh", "clip")
def _clamp(ctx):
    x = ctx["self"]
    lo = ctx.args.get("min", ctx.args.get("min_val"))
    hi = ctx.args.get("max", ctx.args.get("max_val"))
    # tensor bounds, or a run-time size (linear interpolation's index clamp to L - 1): min(max(x, lo), hi), broadcast
    if any(isinstance(bound, (Value, SymbolicSize)) for bound in (lo, hi)):
        meta = ctx.node.meta.get("val")
        dtype = numpy_dtype(meta.dtype) if hasattr(meta, "dtype") else x.type.dtype
        x = x if x.type.dtype == dtype else ctx.emit("cast", x, to=dtype)
        for bound, op in ((lo, "maximum"), (hi, "minimum")):
            if bound is not None:
                bound = ctx.tensor(bound, x)
                x = ctx.emit(op, x, bound if bound.type.dtype == dtype else ctx.emit("cast", bound, to=dtype))
        return x
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
    if not x.type.dtype.startswith("float"):
        raise ctx.unsupported(f"average pooling of {x.type.dtype} (torch rounds integer averages its own way)")
    if ctx.get("divisor_override") is not None:
        raise ctx.unsupported("divisor_override")
    kernel = ntuple(ctx["kernel_size"], nd)
    pads = ntuple(ctx.get("padding", 0), nd)
    return ctx.emit(
        f"avg_pool{nd}d", x, kernel_shape=kernel, strides=ntuple(ctx.get("stride") or kernel, nd),
        pads=pads + pads, dilations=[1] * nd, ceil_mode=int(bool(ctx.get("ceil_mode", False))),
        count_include_pad=int(bool(ctx.get("count_include_pad", True))),
    )  # fmt: skip


@aten(
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d"
)
def _adaptive_avg_pool(ctx):
    x = ctx["self"]
    nd = int(ctx.op_name.split("_pool")[1][0])  # adaptive_avg_pool2d, _adaptive_avg_pool3d, ...
    if x.type.rank == nd + 1:  # an unbatched (C, spatial...) input: pool it as a batch of one
        ctx.args["self"] = ctx.emit("unsqueeze", x, axes=[0])
        return ctx.emit("squeeze", _adaptive_avg_pool(ctx), axes=[0])
    out = ntuple(ctx["output_size"], nd)
    spatial = x.type.shape[2:]
    if all(o == 1 for o in out):
        return ctx.emit("reduce_mean", x, axes=list(range(2, 2 + nd)), keepdims=1)
    if not all(isinstance(s, int) for s in spatial):
        raise ctx.unsupported(f"output size {out} over symbolic spatial dims {list(spatial)}")
    if all(s % o == 0 for s, o in zip(spatial, out)):
        kernel = [s // o for s, o in zip(spatial, out)]
        return ctx.emit(
            f"avg_pool{nd}d", x, kernel_shape=kernel, strides=kernel, pads=[0] * (2 * nd), dilations=[1] * nd,
        )  # fmt: skip
    for axis, (size, bins) in enumerate(zip(spatial, out), start=2):  # bins that overlap, or more bins than inputs
        if size != bins:
            x = _average_bins(ctx, x, axis, size, bins)
    return x


def _average_bins(ctx: AtenContext, x: Value, axis: int, size: int, bins: int) -> Value:
    """Adaptive average pooling along one axis as a matmul: bin i averages [floor(i*n/b), ceil((i+1)*n/b)).

    A box's mean is the mean over each of its axes in turn, so pooling is one such product per axis.
    """
    weights = np.zeros((size, bins), np.float64)
    for i in range(bins):
        start, end = (i * size) // bins, -(-(i + 1) * size // bins)
        weights[start:end, i] = 1 / (end - start)
    last = x.type.rank - 1
    perm = list(range(x.type.rank))
    perm[axis], perm[last] = last, axis
    moved = x if axis == last else ctx.emit("transpose", x, perm=perm)
    pooled = ctx.emit("matmul", moved, ctx.constant(weights, x.type.dtype))
    return pooled if axis == last else ctx.emit("transpose", pooled, perm=perm)


PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@aten("pad", "constant_pad_nd")
def _pad(ctx):
    """``F.pad``: torch lists (begin, end) pairs from the last dim backwards; negative pads crop."""
    x = ctx["self"]
    mode = ctx.get("mode", "constant")
    if mode not in PAD_MODES:
        raise ctx.unsupported(f"mode {mode!r} (supported: {', '.join(PAD_MODES)})")
    pad = list(ctx["pad"])
    if any(isinstance(p, SymbolicSize) for p in pad):
        raise ctx.unsupported("pads known only at run time (fix the input's shape with input_shapes)")
    if len(pad) % 2 or len(pad) > 2 * x.type.rank:
        raise ctx.unsupported(f"{len(pad)} pads for a rank-{x.type.rank} tensor")
    begins, ends = [0] * x.type.rank, [0] * x.type.rank
    for i in range(len(pad) // 2):
        begins[-1 - i], ends[-1 - i] = int(pad[2 * i]), int(pad[2 * i + 1])
    if not any(begins + ends):
        return x
    value = ctx.get("value", 0.0)
    if isinstance(value, Value):
        raise ctx.unsupported("a tensor pad value")
    return ctx.emit("pad", x, pads=begins + ends, mode=PAD_MODES[mode], value=float(value))


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


@aten("_native_batch_norm_legit")
def _batch_norm_batch_statistics(ctx):
    """Batch norm over the batch's own statistics (``.no_stats``: no running ones; how torch.export writes
    ``F.instance_norm``, on x reshaped to [1, N*C, ...]): (y, mean, 1 / std) per channel, as torch returns."""
    x = ctx["input"]
    if not ctx.get("training", True):
        return _batch_norm(ctx)  # running statistics: the inference form
    rank, dtype = x.type.rank, x.type.dtype
    axes, per_channel = [0, *range(2, rank)], [-1] + [1] * (rank - 2)  # channels: N*C at run time for an instance norm
    mean = ctx.emit("reduce_mean", x, axes=axes, keepdims=1)
    centered = ctx.emit("subtract", x, mean)
    variance = ctx.emit("reduce_mean", ctx.emit("multiply", centered, centered), axes=axes, keepdims=1)
    eps = ctx.constant(float(ctx["eps"]), dtype)
    inverse = ctx.emit("reciprocal", ctx.emit("sqrt", ctx.emit("add", variance, eps)))
    y = ctx.emit("multiply", centered, inverse)
    if ctx.get("weight") is not None:
        y = ctx.emit("multiply", y, ctx.emit("reshape", ctx["weight"], shape=per_channel))
    if ctx.get("bias") is not None:
        y = ctx.emit("add", y, ctx.emit("reshape", ctx["bias"], shape=per_channel))
    return [y, ctx.emit("reshape", mean, shape=[-1]), ctx.emit("reshape", inverse, shape=[-1])]


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
    """beta * self + alpha * (mat1 @ mat2); beta = 0 ignores self (NaNs in it included), as torch does."""
    product = ctx.emit("matmul", ctx["mat1"], ctx["mat2"])
    alpha, beta, bias = ctx.get("alpha", 1), ctx.get("beta", 1), ctx["self"]
    dtype = product.type.dtype
    if alpha != 1:
        product = ctx.emit("multiply", product, ctx.constant(alpha, dtype))
    if beta == 0:
        return product
    if beta != 1:
        bias = ctx.emit("multiply", bias, ctx.constant(beta, dtype))
    return ctx.emit("add", product, bias)


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
    given = mask is not None
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
    probs = ctx.emit("softmax", scores, axis=rank - 1)
    if given:  # a query row the mask hides whole (a padded one): 0, as torch's safe softmax gives, not NaN
        hidden = ctx.emit("equal", scores, ctx.constant(-np.inf, scores.type.dtype))
        probs = ctx.emit("where", hidden, ctx.constant(0.0, scores.type.dtype), probs)
    return ctx.emit("matmul", probs, v)


# -- reductions ----------------------------------------------------------------------------

REDUCE = {"mean": "reduce_mean", "sum": "reduce_sum", "amax": "reduce_max", "amin": "reduce_min", "prod": "reduce_prod"}


def _reduce(op: str) -> Converter:
    def convert(ctx: AtenContext) -> Value:
        x = ctx["self"]
        if ctx.get("dtype") is not None:
            x = ctx.emit("cast", x, to=numpy_dtype(ctx["dtype"]))
        meta = ctx.node.meta.get("val")
        if hasattr(meta, "dtype") and numpy_dtype(meta.dtype) != x.type.dtype:  # sum of bools or int32 is int64
            x = ctx.emit("cast", x, to=numpy_dtype(meta.dtype))
        dims = ctx.get("dim")
        axes = None if dims in (None, []) else [d % max(x.type.rank, 1) for d in ntuple(dims, 1)]
        if x.type.rank == 0:
            return ctx.emit("copy", x)
        return ctx.emit(op, x, axes=axes, keepdims=int(bool(ctx.get("keepdim", False))))

    return convert


for _aten, _op in REDUCE.items():
    aten(_aten)(_reduce(_op))


@aten("linalg_vector_norm")
def _vector_norm(ctx):
    """``torch.linalg.vector_norm`` (``F.normalize``, Swin V2's cosine attention): sum(|x|^p)^(1/p) over dims."""
    x = ctx["self"]
    if ctx.get("dtype") is not None:
        x = ctx.emit("cast", x, to=numpy_dtype(ctx["dtype"]))
    dims = ctx.get("dim")
    reduce = {"axes": None if dims in (None, []) else [d % max(x.type.rank, 1) for d in ntuple(dims, 1)],
              "keepdims": int(bool(ctx.get("keepdim", False)))}  # fmt: skip
    order = float(ctx.get("ord", 2))
    magnitude = ctx.emit("abs", x)
    if order in (math.inf, -math.inf):
        return ctx.emit("reduce_max" if order > 0 else "reduce_min", magnitude, **reduce)
    if order == 0:  # how many are not zero
        nonzero = ctx.emit("cast", ctx.emit("logical_not", ctx.emit("equal", x, ctx.constant(0, x.type.dtype))),
                           to=x.type.dtype)  # fmt: skip
        return ctx.emit("reduce_sum", nonzero, **reduce)
    if order == 1:
        return ctx.emit("reduce_sum", magnitude, **reduce)
    if order == 2:
        return ctx.emit("sqrt", ctx.emit("reduce_sum", ctx.emit("multiply", x, x), **reduce))
    powered = ctx.emit("power", magnitude, ctx.constant(order, x.type.dtype))
    return ctx.emit("power", ctx.emit("reduce_sum", powered, **reduce), ctx.constant(1 / order, x.type.dtype))


# -- shapes and data movement ------------------------------------------------------------


def _reshape_target(ctx, sizes: list[Any], x: Value) -> list[int] | None:
    """Reshape sizes as an attribute: run-time sizes become 0 (copy x's dim) where they are x's dim,
    else -1 if only one is left; None when the target must be computed at run time."""
    out = []
    for i, s in enumerate(sizes):
        if isinstance(s, SymbolicSize):
            same = i < x.type.rank and x.type.shape[i] == s.symbol
            out.append(0 if same else -1)
        else:
            out.append(int(s))
    return out if out.count(-1) <= 1 else None


@aten("view", "reshape", "_unsafe_view")
def _view(ctx):
    x = ctx["self"]
    sizes = list(ctx.args.get("size", ctx.args.get("shape")))
    target = _reshape_target(ctx, sizes, x)
    if target is not None:
        return ctx.emit("reshape", x, shape=target)
    return ctx.emit("reshape", x, ctx.shape_tensor(sizes))


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
    sizes = list(ctx["size"])
    offset = len(sizes) - x.type.rank
    for i, s in enumerate(sizes):  # a run-time size equal to x's own dim keeps that dim
        if isinstance(s, SymbolicSize) and i >= offset and x.type.shape[i - offset] == s.symbol:
            sizes[i] = -1
    sizes = [1 if s == -1 else s for s in sizes]  # expand broadcasts both ways: 1 keeps x's dim
    if any(isinstance(s, SymbolicSize) for s in sizes):
        return ctx.emit("expand", x, ctx.shape_tensor(sizes))
    return ctx.emit("expand", x, shape=[int(s) for s in sizes])


@aten("expand_as")
def _expand_as(ctx):
    x, other = ctx["self"], ctx["other"]
    if other.type.is_static:
        return ctx.emit("expand", x, shape=list(other.type.shape))
    return ctx.emit("expand", x, ctx.emit("shape", other))


@aten("copy")
def _copy(ctx):
    """``copy(self, src)``: src broadcast to self's shape in self's dtype (functionalized ``self.copy_(src)``)."""
    x, src = ctx["self"], ctx["src"]
    src = ctx.tensor(src, x)
    if src.type.dtype != x.type.dtype:
        src = ctx.emit("cast", src, to=x.type.dtype)
    if src.type.shape == x.type.shape:
        return src
    if x.type.is_static:
        return ctx.emit("expand", src, shape=list(x.type.shape))
    return ctx.emit("expand", src, ctx.emit("shape", x))


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
    if _split_at_run_time(ctx, x, dim):
        return _run_time_pieces(ctx, x, dim)
    if "chunks" in ctx.args:
        sizes = _split_sizes(ctx, x, dim, -(-x.type.shape[dim] // ctx["chunks"]))
    elif isinstance(ctx["split_sizes" if "split_sizes" in ctx.args else "split_size"], int):
        sizes = _split_sizes(ctx, x, dim, ctx.args.get("split_size", ctx.args.get("split_sizes")))
    else:
        sizes = [int(s) for s in ctx.args.get("split_sizes", ctx.args.get("split_size"))]
    node = ctx.graph.add_node("split", [x], {"axis": dim, "sizes": sizes}, name=ctx.name)
    return node.outputs


def _split_at_run_time(ctx, x: Value, dim: int) -> bool:
    """Whether the pieces' sizes are known only at run time: the split dim is symbolic, or a size is."""
    given = ctx.args.get("split_sizes", ctx.args.get("split_size"))
    sizes = given if isinstance(given, (list, tuple)) else [given]
    return not isinstance(x.type.shape[dim], int) or any(isinstance(size, SymbolicSize) for size in sizes)


def _run_time_pieces(ctx, x: Value, dim: int) -> list[Value]:
    """A split whose sizes follow a dynamic dim (``x.chunk(2, 1)``, ``split(x, [n, L - n])``): each piece a run-time
    slice from the running total. How many pieces there are, torch.export fixed (its guards): the node's outputs."""
    count = len(ctx.node.meta.get("val") or ())
    given = ctx.args.get("split_sizes", ctx.args.get("split_size"))
    if "chunks" in ctx.args:  # torch's chunk: pieces of ceil(L / chunks)
        chunks = int(ctx["chunks"])
        rounded = ctx.emit("add", ctx.dim(x, dim), ctx.constant([chunks - 1], "int64"))
        given = SymbolicSize("L/chunks", ctx.floor_divide(rounded, ctx.constant([chunks], "int64")))
    if isinstance(given, (list, tuple)):
        sizes = list(given)
    else:  # one size for every piece, the last one shorter
        sizes = [given] * count
    pieces, start = [], 0
    for size in sizes[:count]:
        end = SymbolicSize(f"{start}+{size}", ctx.emit("add", ctx.size(start), ctx.size(size)))
        pieces.append(_slice_at_run_time(ctx, x, dim, start, end, 1))
        start = end
    return pieces


@aten("slice")
def _slice(ctx):
    x = ctx["self"]
    dim = ctx.get("dim", 0) % x.type.rank
    start, end, step = ctx.get("start", 0), ctx.get("end", 2**63 - 1), ctx.get("step", 1)
    if isinstance(end, SymbolicSize) and end.symbol == x.type.shape[dim]:
        end = 2**63 - 1
    if isinstance(start, SymbolicSize) or isinstance(end, SymbolicSize):
        return _slice_at_run_time(ctx, x, dim, start, end, step)
    if start == 0 and end >= 2**62 and step == 1:
        return x
    return ctx.emit("slice", x, starts=[int(start)], ends=[int(min(end, 2**63 - 1))], axes=[dim], steps=[int(step)])


def _slice_at_run_time(ctx, x: Value, dim: int, start: Any, end: Any, step: int) -> Value:
    """``x[a:b]`` with a bound known only at run time: gather the indices range(a, min(b, len), step)."""
    if step <= 0 or (isinstance(start, int) and start < 0) or (isinstance(end, int) and end < 0):
        raise ctx.unsupported("a run-time slice with negative bounds or step")
    length = ctx.dim(x, dim)
    end = length if isinstance(end, int) and end >= 2**62 else ctx.emit("minimum", ctx.size(end), length)
    indices = ctx.emit("range", ctx.scalar(start), ctx.emit("reshape", end, shape=[]), ctx.scalar(step))
    return ctx.emit("gather", x, indices, axis=dim)


@aten("slice_scatter")
def _slice_scatter(ctx):
    """``out = self.clone(); out[..., start:end:step] = src`` along dim (functionalized slice assignment).

    A unit step is a concat of what stays before, src, and what stays after; other steps
    scatter src along dim at the indices range(start, end, step).
    """
    x, src = ctx["self"], ctx["src"]
    dim = ctx.get("dim", 0) % x.type.rank
    size = x.type.shape[dim]
    start, end, step = ctx.get("start", 0), ctx.get("end", 2**63 - 1), ctx.get("step", 1)
    if isinstance(end, SymbolicSize) and end.symbol == size:
        end = 2**63 - 1
    if isinstance(start, SymbolicSize) and start.symbol == size:
        start = 2**63 - 1
    if isinstance(start, SymbolicSize) or isinstance(end, SymbolicSize):
        raise ctx.unsupported("slice bounds known only at run time")
    if isinstance(size, int):
        start, end, step = slice(start, end, step).indices(size)
        end = max(end, start)
    elif start < 0 or end < 0:
        raise ctx.unsupported("negative slice bounds on a dim known only at run time")
    if step == 1:
        pieces = [src]
        if start > 0:
            pieces.insert(0, ctx.emit("slice", x, starts=[0], ends=[start], axes=[dim], steps=[1]))
        if not (isinstance(size, int) and end >= size) and end < 2**62:
            pieces.append(ctx.emit("slice", x, starts=[end], ends=[2**63 - 1], axes=[dim], steps=[1]))
        return pieces[0] if len(pieces) == 1 else ctx.emit("concat", *pieces, axis=dim)
    if not isinstance(size, int):
        raise ctx.unsupported("a strided slice_scatter over a dim known only at run time")
    positions = np.arange(start, end, step).reshape([-1 if a == dim else 1 for a in range(x.type.rank)])
    index = ctx.constant(positions, "int64")
    if src.type.is_static:
        index = ctx.emit("expand", index, shape=list(src.type.shape))
    else:
        index = ctx.emit("expand", index, ctx.emit("shape", src))
    return ctx.emit("scatter_elements", x, index, src, axis=dim, reduction="none")


@aten("flip")
def _flip(ctx):
    x = ctx["self"]
    axes = [d % x.type.rank for d in ctx["dims"]]
    n = len(axes)
    return ctx.emit("slice", x, starts=[-1] * n, ends=[-(2**63)] * n, axes=axes, steps=[-1] * n)


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


# -- indexing ------------------------------------------------------------------------------


def _axis(ctx: AtenContext, x: Value, name: str = "dim") -> int:
    return ctx[name] % max(x.type.rank, 1)


def _positive(ctx: AtenContext, index: Value, x: Value, axis: int) -> Value:
    """int64 indices with negative ones counted from the end, as in torch (gather_nd, gather_elements)."""
    index = ctx.emit("cast", index, to="int64") if index.type.dtype != "int64" else index
    if index.is_constant and (index.data >= 0).all():
        return index
    wrapped = ctx.emit("add", index, ctx.emit("reshape", ctx.dim(x, axis), shape=[]))
    return ctx.emit("where", ctx.emit("less", index, ctx.constant(0, "int64")), wrapped, index)


@aten("index_select")
def _index_select(ctx):
    x = ctx["self"]
    if x.type.rank == 0:  # a 0-d tensor indexed with [0] stays 0-d
        return ctx.emit("copy", x)
    return ctx.emit("gather", x, ctx["index"], axis=_axis(ctx, x))


@aten("gather")
def _gather_elements(ctx):
    x = ctx["self"]
    axis, index = _axis(ctx, x), ctx["index"]
    return ctx.emit("gather_elements", _crop(ctx, x, index, axis), index, axis=axis)


def _crop(ctx: AtenContext, x: Value, like: Value, keep: int | None = None) -> Value:
    """x cut down to like's static sizes (torch's gather and scatter allow a smaller index than data or src)."""
    axes = [
        a for a, (n, m) in enumerate(zip(x.type.shape, like.type.shape))
        if a != keep and isinstance(n, int) and isinstance(m, int) and n > m
    ]  # fmt: skip
    if not axes:
        return x
    ends = [like.type.shape[a] for a in axes]
    return ctx.emit("slice", x, starts=[0] * len(axes), ends=ends, axes=axes, steps=[1] * len(axes))


@aten("index")
def _index(ctx):
    """Advanced indexing ``x[i, :, j]``: index tensors broadcast together and address several axes.

    One index tensor is a gather. Several are moved to the front and stacked into the
    rows of a gather_nd; torch puts the broadcast index dims where the first indexed axis
    was when the indexed axes are adjacent, and in front otherwise.
    """
    x = ctx["self"]
    indices = list(ctx["indices"])
    axes = [i for i, v in enumerate(indices) if v is not None]
    if any(indices[a].type.dtype == "bool" for a in axes):
        raise ctx.unsupported("indexing with a boolean mask (its result's shape depends on the data)")
    if len(axes) == 1:
        return ctx.emit("gather", x, indices[axes[0]], axis=axes[0])
    rest = [a for a in range(x.type.rank) if a not in axes]
    front = ctx.emit("transpose", x, perm=axes + rest)
    positive = [_positive(ctx, indices[a], x, a) for a in axes]
    zeros = [ctx.emit("multiply", index, ctx.constant(0, "int64")) for index in positive]
    zero = zeros[0]
    for z in zeros[1:]:  # zeros of the shape all index tensors broadcast to
        zero = ctx.emit("add", zero, z)
    rows = [ctx.emit("unsqueeze", ctx.emit("add", index, zero), axes=[-1]) for index in positive]
    result = ctx.emit("gather_nd", front, ctx.emit("concat", *rows, axis=-1))
    adjacent = axes == list(range(axes[0], axes[0] + len(axes)))
    if not adjacent or axes[0] == 0:
        return result
    batch = result.type.rank - len(rest)  # the broadcast index dims, now in front
    before = list(range(batch, batch + axes[0]))
    return ctx.emit(
        "transpose", result, perm=before + list(range(batch)) + list(range(batch + axes[0], result.type.rank))
    )


@aten("masked_fill")
def _masked_fill(ctx):
    x = ctx["self"]
    return ctx.emit("where", ctx["mask"], ctx.emit("cast", ctx.tensor(ctx["value"], x), to=x.type.dtype), x)


@aten("scatter", "scatter_add", "scatter_reduce")
def _scatter(ctx):
    x = ctx["self"]
    axis = _axis(ctx, x)
    index = _positive(ctx, ctx["index"], x, axis)
    src = ctx.get("src")
    if src is None:  # scatter.value: one value everywhere the index points
        src = _filled(ctx, index, ctx["value"], x.type.dtype)
    src = _crop(ctx, src, index)
    reduction = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min", "add": "add", "multiply": "mul"}
    mode = "add" if "scatter_add" in ctx.op_name else ctx.get("reduce", "none")
    if mode != "none" and mode not in reduction:
        raise ctx.unsupported(f"reduce={mode!r}")
    if not ctx.get("include_self", True):
        raise ctx.unsupported("include_self=False")
    return ctx.emit("scatter_elements", x, index, src, axis=axis, reduction=reduction.get(mode, "none"))


@aten("cumsum")
def _cumsum(ctx):
    x = ctx["self"]
    if ctx.get("dtype") is not None:
        x = ctx.emit("cast", x, to=numpy_dtype(ctx["dtype"]))
    elif x.type.dtype in ("bool", "int8", "int16", "int32", "uint8"):
        x = ctx.emit("cast", x, to="int64")  # torch sums small integers as int64
    if x.type.rank == 0:
        return ctx.emit("copy", x)
    return ctx.emit("cumsum", x, axis=_axis(ctx, x))


@aten("triu", "tril")
def _trilu(ctx):
    return ctx.emit("trilu", ctx["self"], upper=int("triu" in ctx.op_name), k=int(ctx.get("diagonal", 0)))


@aten("argmax", "argmin")
def _argmax(ctx):
    x = ctx["self"]
    op = "argmax" if "argmax" in ctx.op_name else "argmin"
    keep = int(bool(ctx.get("keepdim", False)))
    if x.type.rank == 0:  # the one element of a scalar
        return ctx.constant(0, "int64")
    if ctx.get("dim") is None:  # over all elements, as if flattened
        flat = ctx.emit("reshape", x, shape=[-1])
        index = ctx.emit(op, flat, axis=0, keepdims=0)
        return ctx.emit("reshape", index, shape=[1] * x.type.rank) if keep else index
    return ctx.emit(op, x, axis=_axis(ctx, x), keepdims=keep)


@aten("topk")
def _topk(ctx):
    x = ctx["self"]
    if not isinstance(ctx["k"], int):
        raise ctx.unsupported("k known only at run time")
    return ctx.emit_all(
        "topk", x, k=ctx["k"], axis=_axis(ctx, x), largest=int(ctx.get("largest", True)),
        sorted=int(ctx.get("sorted", True)),
    )  # fmt: skip


@aten("repeat")
def _repeat(ctx):
    x = ctx["self"]
    if any(isinstance(r, SymbolicSize) for r in ctx["repeats"]):
        raise ctx.unsupported("repeats known only at run time (an affine instance norm over a dynamic batch: "
                              "fix the batch with input_shapes)")  # fmt: skip
    repeats = [int(r) for r in ctx["repeats"]]
    if len(repeats) > x.type.rank:
        x = ctx.emit("unsqueeze", x, axes=list(range(len(repeats) - x.type.rank)))
    return ctx.emit("tile", x, repeats=repeats)


# -- the rest of the core ATen opset (docs/coverage.md) ------------------------------------


@aten("trunc", "sign", "round")
def _integral(ctx):
    """Rounding of an integer is the integer (numpy's would make it float); ``sign`` of a bool is the bool."""
    x, op = ctx["self"], ctx.op_name.split(".")[1]
    if not x.type.dtype.startswith("float") and (op != "sign" or x.type.dtype == "bool"):
        return ctx.emit("copy", x)
    decimals = ctx.get("decimals", 0)
    if op != "round" or not decimals:
        return ctx.emit({"round": "round"}.get(op, op), x)
    scale = ctx.constant(10.0 ** abs(decimals), x.type.dtype)  # torch: nearbyint(x * 10^d) / 10^d
    if decimals > 0:
        return ctx.emit("divide", ctx.emit("round", ctx.emit("multiply", x, scale)), scale)
    return ctx.emit("multiply", ctx.emit("round", ctx.emit("divide", x, scale)), scale)


@aten("isnan", "isinf")
def _isnan(ctx):
    x = ctx["self"]
    if not x.type.dtype.startswith("float"):  # integers are never NaN nor infinite: x < x is False everywhere
        return ctx.emit("less", x, x)
    if "isnan" in ctx.op_name:
        return ctx.emit("isnan", x)
    return ctx.emit("isinf", x, detect_positive=1, detect_negative=1)


@aten("atan2")
def _atan2(ctx):
    a, b = (_as_result_dtype(ctx, v) for v in (ctx["self"], ctx["other"]))
    return ctx.emit("atan2", a, b)


@aten("max", "min")
def _max(ctx):
    """``max(x)`` over everything, or ``max(x, dim)`` as (values, indices); ``max(a, b)`` is ``maximum``."""
    x, largest = ctx["self"], "max" in ctx.op_name
    if isinstance(ctx.args.get("other"), Value):
        return ctx.emit("maximum" if largest else "minimum", *_operands(ctx))
    reduce, arg = ("reduce_max", "argmax") if largest else ("reduce_min", "argmin")
    if ctx.get("dim") is None:
        return ctx.emit(reduce, x, axes=None, keepdims=0)
    if x.type.rank == 0:
        return [ctx.emit("copy", x), ctx.constant(0, "int64")]
    axis, keep = _axis(ctx, x), int(bool(ctx.get("keepdim", False)))
    values = ctx.emit(reduce, x, axes=[axis], keepdims=keep)
    return [values, ctx.emit(arg, x, axis=axis, keepdims=keep, select_last_index=0)]


@aten("var")
def _var(ctx):
    """Sum of squared deviations over ``dim`` divided by N - correction (torch's unbiased default: 1)."""
    x = ctx["self"]
    dims = ctx.get("dim")
    axes = list(range(x.type.rank)) if dims in (None, []) else [d % max(x.type.rank, 1) for d in ntuple(dims, 1)]
    sizes = [x.type.shape[a] for a in axes]
    if not all(isinstance(d, int) for d in sizes):
        raise ctx.unsupported("variance over a dim known only at run time")
    correction = ctx.get("correction", 1 if ctx.get("unbiased", True) else 0)
    keep = int(bool(ctx.get("keepdim", False)))
    if x.type.rank == 0:
        axes, sizes = None, [1]
    mean = ctx.emit("reduce_mean", x, axes=axes, keepdims=1)
    deviation = ctx.emit("subtract", x, mean)
    squares = ctx.emit("reduce_sum", ctx.emit("multiply", deviation, deviation), axes=axes, keepdims=keep)
    with np.errstate(divide="ignore"):
        return ctx.emit("divide", squares, ctx.constant(float(math.prod(sizes)) - float(correction), x.type.dtype))


@aten("reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad2d", "replication_pad3d")
def _mode_pad(ctx):
    ctx.args["pad"] = ctx["padding"]
    ctx.args["mode"] = "reflect" if "reflection" in ctx.op_name else "replicate"
    return _pad(ctx)


def _upsampled_sizes(ctx: AtenContext, x: Value) -> tuple[list[int] | None, list[float | None]]:
    """The output's spatial sizes and the scale factors torch maps coordinates with (None: in / out).

    Over spatial dims known only at run time the sizes are None: the factors alone say it all
    (torch's output is floor(size * factor), as a resize by scales computes per run)."""
    spatial = x.type.shape[2:]
    factors = ctx.get("scale_factors")
    if factors is None:
        factors = [ctx.args.get(k) for k in ("scales_d", "scales_h", "scales_w") if k in ctx.args]
        factors = factors[-len(spatial) :] if factors else [None] * len(spatial)
    if not all(isinstance(d, int) for d in spatial):
        if not all(isinstance(f, (int, float)) and f > 0 for f in factors):
            raise ctx.unsupported("upsampling over spatial dims known only at run time needs scale factors or "
                                  "an output size (fix the dims with input_shapes)")  # fmt: skip
        return None, [float(f) for f in factors]
    sizes = ctx.get("output_size")
    if sizes is None:
        sizes = [int(math.floor(d * f)) for d, f in zip(spatial, factors)]
    if any(isinstance(s, SymbolicSize) for s in sizes):
        raise ctx.unsupported("an output size known only at run time")
    return [int(s) for s in sizes], [None if f is None or f <= 0 else float(f) for f in factors]


def _run_time_output_size(ctx: AtenContext, x: Value) -> list[int | SymbolicSize] | None:
    """The output size an upsampling to ``size=`` asks for where the input's spatial dims are known only at run time
    (``size=(7, 9)``, or another tensor's ``shape[-2:]``), or None where it gives scale factors instead."""
    sizes = ctx.get("output_size")
    if sizes is None or all(isinstance(d, int) for d in x.type.shape[2:]) or ctx.get("scale_factors") is not None:
        return None
    if any(isinstance(ctx.args.get(k), (int, float)) for k in ("scales_h", "scales_w")):
        return None  # torch maps coordinates by the scales: the factors' path
    if not all(isinstance(s, (int, SymbolicSize)) for s in sizes):
        raise ctx.unsupported(f"an output size of {[type(s).__name__ for s in sizes]}")
    return list(sizes)


def _nearest_index(ctx: AtenContext, x: Value, axis: int, size: int | SymbolicSize) -> Value:
    """torch's nearest source index along ``axis`` for an output of ``size`` over a run-time input length:
    min(floor(dst * float32(in / out)), in - 1), in float32 as torch computes it, so ties round as torch's do."""
    length = ctx.emit("cast", ctx.dim(x, axis), to="float32")
    if isinstance(size, SymbolicSize):
        positions = ctx.emit("cast", ctx.emit("range", ctx.scalar(0), ctx.scalar(size), ctx.scalar(1)), to="float32")
        scale = ctx.emit("divide", length, ctx.emit("cast", size.value, to="float32"))
    else:
        positions = ctx.constant(np.arange(size, dtype=np.float32), "float32")
        scale = ctx.emit("divide", length, ctx.constant([float(size)], "float32"))
    index = ctx.emit("cast", ctx.emit("floor", ctx.emit("multiply", positions, scale)), to="int64")
    last = ctx.emit("subtract", ctx.dim(x, axis), ctx.constant([1], "int64"))
    return ctx.emit("minimum", index, last)


def _nearest_to_size(ctx: AtenContext, x: Value, sizes: list[int | SymbolicSize]) -> Value:
    """Nearest upsampling of a run-time-sized input to ``sizes``: a gather per axis whose size changes."""
    for axis, size in enumerate(sizes, start=2):
        if isinstance(size, SymbolicSize) and size.symbol == x.type.shape[axis]:
            continue  # its own size: torch copies it
        x = ctx.emit("gather", x, _nearest_index(ctx, x, axis, size), axis=axis)
    return x


def _linear_to_size(ctx: AtenContext, x: Value, sizes: list[int | SymbolicSize], align_corners: bool) -> Value:
    """Bilinear upsampling of a run-time-sized input to ``sizes``: a resize to a size computed per run (batch and
    channels as they come), whose half-pixel or align-corners mapping is torch's for an output size."""
    target = ctx.emit("concat", ctx.dim(x, 0), ctx.dim(x, 1), *[ctx.size(s) for s in sizes], axis=0)
    mode = "align_corners" if align_corners else "half_pixel"
    return ctx.emit("dynamic_resize", x, target, mode="linear", coordinate_transformation_mode=mode,
                    nearest_mode="floor")  # fmt: skip


@aten("upsample_nearest2d")
def _upsample_nearest(ctx):
    """torch's nearest (not ONNX's): source index floor(dst * float32(in / out)), computed here as constants."""
    x = ctx.args.get("input", ctx.args.get("self"))
    run_time = _run_time_output_size(ctx, x)
    if run_time is not None:
        return _nearest_to_size(ctx, x, run_time)
    sizes, factors = _upsampled_sizes(ctx, x)
    if sizes is None:  # sizes known at run time: ONNX's asymmetric floor is torch's nearest for whole factors
        if not all(float(f).is_integer() for f in factors):
            raise ctx.unsupported(f"nearest upsampling by {factors} over spatial dims known only at run time "
                                  "(whole factors are supported)")  # fmt: skip
        return ctx.emit("resize", x, scales=[1.0, 1.0, *factors], mode="nearest",
                        coordinate_transformation_mode="asymmetric", nearest_mode="floor")  # fmt: skip
    for axis, (size_in, size_out, factor) in enumerate(zip(x.type.shape[2:], sizes, factors), start=2):
        if size_in == size_out:
            continue
        if size_out == 2 * size_in:
            index = np.arange(size_out) >> 1
        else:
            scale = np.float32(1.0 / factor) if factor else np.float32(size_in) / np.float32(size_out)
            index = np.minimum(np.floor(np.arange(size_out, dtype=np.float32) * scale), size_in - 1)
        x = ctx.emit("gather", x, ctx.constant(index.astype(np.int64), "int64"), axis=axis)
    return x


@aten("upsample_bilinear2d")
def _upsample_linear(ctx):
    x = ctx.args.get("input", ctx.args.get("self"))
    run_time = _run_time_output_size(ctx, x)
    if run_time is not None:
        return _linear_to_size(ctx, x, run_time, bool(ctx.get("align_corners", False)))
    sizes, factors = _upsampled_sizes(ctx, x)
    if sizes is None:
        mode = "align_corners" if ctx.get("align_corners", False) else "half_pixel"
        return ctx.emit("resize", x, scales=[1.0, 1.0, *factors], mode="linear",
                        coordinate_transformation_mode=mode, nearest_mode="floor")  # fmt: skip
    if ctx.get("align_corners", False):
        return ctx.emit("resize", x, sizes=[*x.type.shape[:2], *sizes], mode="linear",
                        coordinate_transformation_mode="align_corners", nearest_mode="floor")  # fmt: skip
    if all(factors) and all(s == math.floor(d * f) for d, s, f in zip(x.type.shape[2:], sizes, factors)):
        return ctx.emit("resize", x, scales=[1.0, 1.0, *factors], mode="linear",
                        coordinate_transformation_mode="half_pixel", nearest_mode="floor")  # fmt: skip
    return ctx.emit("resize", x, sizes=[*x.type.shape[:2], *sizes], mode="linear",
                    coordinate_transformation_mode="half_pixel", nearest_mode="floor")  # fmt: skip


@aten("native_group_norm")
def _group_norm(ctx):
    """Normalise each of ``group`` channel groups over its channels and positions, then scale and shift per channel.

    Returns (y, mean, rstd) as torch does; mean and rstd are [N, group].
    """
    x, groups, eps = ctx["input"], int(ctx["group"]), float(ctx["eps"])
    dtype = x.type.dtype
    grouped = ctx.emit("reshape", x, shape=[0, groups, -1])
    mean = ctx.emit("reduce_mean", grouped, axes=[2], keepdims=1)
    deviation = ctx.emit("subtract", grouped, mean)
    variance = ctx.emit("reduce_mean", ctx.emit("multiply", deviation, deviation), axes=[2], keepdims=1)
    rstd = ctx.emit("reciprocal", ctx.emit("sqrt", ctx.emit("add", variance, ctx.constant(eps, dtype))))
    y = ctx.emit("multiply", deviation, rstd)
    y = (
        ctx.emit("reshape", y, ctx.emit("shape", x))
        if not x.type.is_static
        else ctx.emit("reshape", y, shape=list(x.type.shape))
    )
    per_channel = [-1] + [1] * (x.type.rank - 2)
    if isinstance(ctx.args.get("weight"), Value):
        y = ctx.emit("multiply", y, ctx.emit("reshape", ctx["weight"], shape=per_channel))
    if isinstance(ctx.args.get("bias"), Value):
        y = ctx.emit("add", y, ctx.emit("reshape", ctx["bias"], shape=per_channel))
    return [y, ctx.emit("reshape", mean, shape=[0, groups]), ctx.emit("reshape", rstd, shape=[0, groups])]


GRID_MODES = {0: "bilinear", 1: "nearest"}  # torch's interpolation_mode enum; 2 (bicubic) is refused
GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


@aten("grid_sampler_2d")
def _grid_sampler(ctx):
    mode = GRID_MODES.get(int(ctx["interpolation_mode"]))
    if mode is None:
        raise ctx.unsupported("bicubic interpolation (bilinear and nearest are supported)")
    return ctx.emit("grid_sample", ctx["input"], ctx["grid"], mode=mode,
                    padding_mode=GRID_PADDING[int(ctx["padding_mode"])],
                    align_corners=int(bool(ctx["align_corners"])))  # fmt: skip


@aten("select_scatter")
def _select_scatter(ctx):
    """``out = self.clone(); out.select(dim, index) = src``: slice_scatter of src with the dim put back."""
    x = ctx["self"]
    dim = ctx["dim"] % x.type.rank
    index = ctx["index"]
    size = x.type.shape[dim]
    if isinstance(index, SymbolicSize) or (index < 0 and not isinstance(size, int)):
        raise ctx.unsupported("an index known only at run time")
    index = index % size if index < 0 else index
    ctx.args.update(src=ctx.emit("unsqueeze", ctx["src"], axes=[dim]), dim=dim, start=index, end=index + 1, step=1)
    return _slice_scatter(ctx)


@aten("diagonal")
def _diagonal(ctx):
    """The diagonal of dims (dim1, dim2) at ``offset``, moved to the last dim: a gather of flat positions."""
    x = ctx["self"]
    rank = x.type.rank
    dim1, dim2, offset = ctx.get("dim1", 0) % rank, ctx.get("dim2", 1) % rank, int(ctx.get("offset", 0))
    rows, cols = x.type.shape[dim1], x.type.shape[dim2]
    if not isinstance(rows, int) or not isinstance(cols, int):
        raise ctx.unsupported("a diagonal of dims known only at run time")
    rest = [a for a in range(rank) if a not in (dim1, dim2)]
    moved = ctx.emit("transpose", x, perm=rest + [dim1, dim2])
    start_row, start_col = max(-offset, 0), max(offset, 0)
    length = max(min(rows - start_row, cols - start_col), 0)
    positions = (np.arange(length) + start_row) * cols + np.arange(length) + start_col
    flat = ctx.emit("reshape", moved, shape=[0] * len(rest) + [rows * cols])
    return ctx.emit("gather", flat, ctx.constant(positions.astype(np.int64), "int64"), axis=len(rest))


@aten("masked_scatter")
def _masked_scatter(ctx):
    """Where the mask is true, the source's elements in order: the k-th true position takes source.flat[k]."""
    x, mask, source = ctx["self"], ctx["mask"], ctx["source"]
    if not x.type.is_static or not source.type.is_static or not mask.type.is_static:
        raise ctx.unsupported("masked_scatter over shapes known only at run time")
    shape = list(np.broadcast_shapes(tuple(x.type.shape), tuple(mask.type.shape)))  # self broadcasts to the mask
    x = ctx.emit("expand", x, shape=shape) if list(x.type.shape) != shape else x
    flat_mask = ctx.emit("reshape", ctx.emit("expand", mask, shape=shape), shape=[-1])
    order = ctx.emit("cumsum", ctx.emit("cast", flat_mask, to="int64"), axis=0)
    position = ctx.emit("maximum", ctx.emit("subtract", order, ctx.constant(1, "int64")), ctx.constant(0, "int64"))
    flat_source = ctx.emit("reshape", source, shape=[-1])
    if math.prod(source.type.shape) == 0:
        return ctx.emit("copy", x)
    position = ctx.emit("minimum", position, ctx.constant(math.prod(source.type.shape) - 1, "int64"))
    picked = ctx.emit("gather", flat_source, position, axis=0)
    return ctx.emit("reshape", ctx.emit("where", flat_mask, picked, ctx.emit("reshape", x, shape=[-1])), shape=shape)


@aten("index_put")
def _index_put(ctx):
    """``x[i, j] = v`` (``+=`` with accumulate): integer index tensors for the leading dims, a scatter_nd."""
    x, indices, values = ctx["self"], ctx["indices"], ctx["values"]
    if not indices or any(not isinstance(i, Value) for i in indices) or not x.type.is_static:
        raise ctx.unsupported("index_put with skipped dims (None) or over shapes known only at run time")
    if any(i.type.dtype == "bool" for i in indices):
        mask = indices[0]
        one_value = not isinstance(values, Value) or math.prod(values.type.shape) == 1
        if len(indices) == 1 and one_value and not ctx.get("accumulate", False):  # x[mask] = v is a where
            value = ctx.tensor(values, x)
            value = ctx.emit("reshape", value, shape=[]) if value.type.rank else value
            value = value if value.type.dtype == x.type.dtype else ctx.emit("cast", value, to=x.type.dtype)
            if mask.type.rank < x.type.rank:
                mask = ctx.emit("unsqueeze", mask, axes=list(range(mask.type.rank, x.type.rank)))
            return ctx.emit("where", mask, value, x)
        raise ctx.unsupported("index_put of several values through a boolean mask (positions depend on the values)")
    if not all(i.type.is_static for i in indices):
        raise ctx.unsupported("index_put with index tensors of run-time shapes")
    shape = list(np.broadcast_shapes(*[tuple(i.type.shape) for i in indices]))
    columns = [
        ctx.emit("unsqueeze", ctx.emit("expand", _positive(ctx, i, x, axis), shape=shape), axes=[len(shape)])
        for axis, i in enumerate(indices)
    ]
    index = columns[0] if len(columns) == 1 else ctx.emit("concat", *columns, axis=len(shape))
    updates = ctx.tensor(values, x)
    updates = updates if updates.type.dtype == x.type.dtype else ctx.emit("cast", updates, to=x.type.dtype)
    updates = ctx.emit("expand", updates, shape=shape + list(x.type.shape[len(indices) :]))
    reduction = "add" if ctx.get("accumulate", False) else "none"
    return ctx.emit("scatter_nd", x, index, updates, reduction=reduction)


def _p_distances(ctx: AtenContext, a: Value, b: Value, p: float) -> Value:
    """||a_i - b_j||_p for rows of a [.., P, M] and b [.., R, M]: [.., P, R], by broadcasting (P * R * M)."""
    difference = ctx.emit("abs", ctx.emit("subtract", ctx.emit("unsqueeze", a, axes=[a.type.rank - 1]),
                                          ctx.emit("unsqueeze", b, axes=[b.type.rank - 2])))  # fmt: skip
    last = difference.type.rank - 1
    dtype = difference.type.dtype
    if p == 0:
        nonzero = ctx.emit("cast", ctx.emit("greater", difference, ctx.constant(0, dtype)), to=dtype)
        return ctx.emit("reduce_sum", nonzero, axes=[last], keepdims=0)
    if math.isinf(p):
        return ctx.emit("reduce_max", difference, axes=[last], keepdims=0)
    if p == 1:
        return ctx.emit("reduce_sum", difference, axes=[last], keepdims=0)
    if p == 2:
        squares = ctx.emit("multiply", difference, difference)
        return ctx.emit("sqrt", ctx.emit("reduce_sum", squares, axes=[last], keepdims=0))
    powered = ctx.emit("power", difference, ctx.constant(p, dtype))
    return ctx.emit("power", ctx.emit("reduce_sum", powered, axes=[last], keepdims=0), ctx.constant(1.0 / p, dtype))


@aten("_cdist_forward")
def _cdist(ctx):
    return _p_distances(ctx, ctx["x1"], ctx["x2"], float(ctx["p"]))


@aten("_pdist_forward")
def _pdist(ctx):
    """The distances of each pair of rows i < j, in row-major order of (i, j)."""
    x = ctx["self"]
    rows = x.type.shape[0]
    if not isinstance(rows, int):
        raise ctx.unsupported("pdist over a number of rows known only at run time")
    full = ctx.emit("reshape", _p_distances(ctx, x, x, float(ctx.get("p", 2.0))), shape=[rows * rows])
    pairs = [i * rows + j for i in range(rows) for j in range(i + 1, rows)]
    return ctx.emit("gather", full, ctx.constant(np.array(pairs, dtype=np.int64), "int64"), axis=0)


@aten("sort")
def _sort(ctx):
    """A top-k of the whole dim; equal values may come in another order than torch's (its order of ties)."""
    x = ctx["self"]
    if x.type.rank == 0:
        return [ctx.emit("copy", x), ctx.constant(0, "int64")]
    axis = _axis(ctx, x)
    size = x.type.shape[axis]
    if not isinstance(size, int):
        raise ctx.unsupported("sorting a dim known only at run time")
    return ctx.emit_all("topk", x, k=size, axis=axis, largest=int(bool(ctx.get("descending", False))), sorted=1)


#: Python-level calls torch.export leaves in the graph: tuple indexing and size queries.
PYTHON_CALLS: dict[Any, str] = {operator.getitem: "getitem"}

# nn.LSTM / nn.GRU / nn.RNN, through the ONNX frontend's recurrent layer: registered here, so ATEN is whole
from aot.frontend.torch import recurrent  # noqa: E402,F401
