"""ONNX op -> canonical ops, one small function per ONNX op type.

Each converter receives a NodeContext and returns the IR values for the node's
outputs. Version differences (attributes that became inputs in later opsets)
are handled here, so everything past the frontend sees one canonical form.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from aot.frontend.onnx.context import NodeContext
from aot.ir.graph import Value
from aot.ir.shape_values import known_elements
from runtime_lite.kernels.geometry import same_pads

Converter = Callable[[NodeContext], list[Value]]
CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str):
    def register(fn: Converter) -> Converter:
        for op_type in op_types:
            CONVERTERS[op_type] = fn
        return fn

    return register


def single(fn: Callable[[NodeContext], Value]) -> Converter:
    """Adapt a converter returning one value to the list-returning protocol."""
    return lambda ctx: [fn(ctx)]


# -- elementwise ------------------------------------------------------------------------

UNARY = {
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Erf": "erf",
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Reciprocal": "reciprocal",
    "Neg": "negative",
    "Abs": "abs",
    "Floor": "floor",
    "Ceil": "ceil",
    "Round": "round",
    "Sign": "sign",
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "tan",
    "Acos": "acos",
    "Acosh": "acosh",
    "Asin": "asin",
    "Asinh": "asinh",
    "Atan": "atan",
    "Atanh": "atanh",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Not": "logical_not",
    "BitwiseNot": "bitwise_not",
    "IsNaN": "isnan",
    "HardSwish": "hard_swish",
    "Softplus": "softplus",
    "Softsign": "softsign",
}
BINARY = {
    "Add": "add",
    "Sub": "subtract",
    "Mul": "multiply",
    "Div": "divide",
    "Pow": "power",
    "Equal": "equal",
    "Less": "less",
    "LessOrEqual": "less_equal",
    "Greater": "greater",
    "GreaterOrEqual": "greater_equal",
    "And": "logical_and",
    "Or": "logical_or",
    "Xor": "logical_xor",
    "BitwiseAnd": "bitwise_and",
    "BitwiseOr": "bitwise_or",
    "BitwiseXor": "bitwise_xor",
}

for _onnx, _canonical in UNARY.items():
    converter(_onnx)(single(lambda ctx, op=_canonical: ctx.emit(op, ctx.inputs[0])))
for _onnx, _canonical in BINARY.items():
    converter(_onnx)(single(lambda ctx, op=_canonical: ctx.emit(op, ctx.inputs[0], ctx.inputs[1])))


@converter("Mod")
@single
def _mod(ctx):
    return ctx.emit("mod", ctx.inputs[0], ctx.inputs[1], fmod=ctx.attr("fmod", 0))


@converter("Where")
@single
def _where(ctx):
    return ctx.emit("where", *ctx.inputs[:3])


@converter("IsInf")
@single
def _isinf(ctx):
    return ctx.emit(
        "isinf",
        ctx.inputs[0],
        detect_positive=ctx.attr("detect_positive", 1),
        detect_negative=ctx.attr("detect_negative", 1),
    )


@converter("LeakyRelu")
@single
def _leaky_relu(ctx):
    return ctx.emit("leaky_relu", ctx.inputs[0], alpha=float(ctx.attr("alpha", 0.01)))


@converter("Elu")
@single
def _elu(ctx):
    return ctx.emit("elu", ctx.inputs[0], alpha=float(ctx.attr("alpha", 1.0)))


@converter("PRelu")
@single
def _prelu(ctx):
    x, slope = ctx.inputs[0], ctx.inputs[1]
    if ctx.opset < 7 and slope.type.rank == 1 and x.type.rank > 2 and slope.type.shape[0] == x.type.shape[1] != 1:
        # Opset 6 and older broadcast a 1-d slope along the channels (axis 1), as PyTorch's exporter relied on.
        slope = ctx.emit("reshape", slope, shape=[-1] + [1] * (x.type.rank - 2))
    return ctx.emit("prelu", x, slope)


@converter("Selu")
@single
def _selu(ctx):
    """gamma * elu(x, alpha): the definition, with the kernels already there."""
    x = ctx.inputs[0]
    elu = ctx.emit("elu", x, alpha=float(ctx.attr("alpha", 1.67326319217681884765625)))
    return ctx.emit("multiply", elu, ctx.constant(ctx.attr("gamma", 1.05070102214813232421875), x.type.dtype))


@converter("Shrink")
@single
def _shrink(ctx):
    """x + bias below -lambd, x - bias above lambd, 0 between."""
    x = ctx.inputs[0]
    lambd, bias = float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0))
    dtype = x.type.dtype
    above = ctx.emit(
        "where",
        ctx.emit("greater", x, ctx.constant(lambd, dtype)),
        ctx.emit("subtract", x, ctx.constant(bias, dtype)),
        ctx.constant(0, dtype),
    )
    below = ctx.emit("less", x, ctx.constant(-lambd, dtype))
    return ctx.emit("where", below, ctx.emit("add", x, ctx.constant(bias, dtype)), above)


@converter("HardSigmoid")
@single
def _hard_sigmoid(ctx):
    return ctx.emit(
        "hard_sigmoid", ctx.inputs[0], alpha=float(ctx.attr("alpha", 0.2)), beta=float(ctx.attr("beta", 0.5))
    )


@converter("Gelu")
@single
def _gelu(ctx):
    return ctx.emit("gelu", ctx.inputs[0], approximate=ctx.attr("approximate", "none"))


@converter("Clip")
@single
def _clip(ctx):
    x = ctx.inputs[0]
    if ctx.opset < 11:
        lo, hi = ctx.attr("min"), ctx.attr("max")
        lo = None if lo is None or lo <= -3.4e38 else float(lo)
        hi = None if hi is None or hi >= 3.4e38 else float(hi)
    else:
        bounds = []
        for i in (1, 2):
            v = ctx.input(i)
            if v is not None and not v.is_constant:  # run-time bounds: clip = min(max(x, lo), hi)
                return _clip_dynamic(ctx, x)
            bounds.append(None if v is None else v.data.item())
        lo, hi = bounds
    if lo == 0 and hi == 6:
        return ctx.emit("relu6", x)
    if lo == 0 and hi is None:
        return ctx.emit("relu", x)
    if lo is None and hi is None:
        return x
    cast = float if x.type.dtype.startswith("float") else int
    return ctx.emit("clip", x, min=None if lo is None else cast(lo), max=None if hi is None else cast(hi))


def _clip_dynamic(ctx, x):
    if ctx.input(1) is not None:
        x = ctx.emit("maximum", x, ctx.input(1))
    if ctx.input(2) is not None:
        x = ctx.emit("minimum", x, ctx.input(2))
    return x


def _variadic(op: str):
    def convert(ctx):
        acc = ctx.inputs[0]
        for v in ctx.inputs[1:]:
            acc = ctx.emit(op, acc, v)
        return acc

    return convert


converter("Sum")(single(_variadic("add")))
converter("Max")(single(_variadic("maximum")))
converter("Min")(single(_variadic("minimum")))


@converter("Mean")
@single
def _mean(ctx):
    total = _variadic("add")(ctx)
    return ctx.emit("divide", total, ctx.constant(len(ctx.inputs), total.type.dtype))


@converter("Softmax", "LogSoftmax")
@single
def _softmax(ctx):
    op = "softmax" if ctx.node.op_type == "Softmax" else "log_softmax"
    x = ctx.inputs[0]
    rank = x.type.rank
    axis = ctx.attr("axis", -1 if ctx.opset >= 13 else 1)
    axis = axis % rank if rank else 0
    if ctx.opset >= 13 or axis == rank - 1:
        return ctx.emit(op, x, axis=axis)
    # Before opset 13 the input is coerced to 2-d at `axis` and normalised over the tail.
    flat = ctx.emit("flatten", x, axis=axis)
    y = ctx.emit(op, flat, axis=1)
    return (
        ctx.emit("reshape", y, ctx.emit("shape", x))
        if not x.type.is_static
        else ctx.emit("reshape", y, shape=list(x.type.shape))
    )


@converter("Cast")
@single
def _cast(ctx):
    to = ctx.dtype_attr("to")
    x = ctx.inputs[0]
    return x if x.type.dtype == to else ctx.emit("cast", x, to=to)


@converter("CastLike")
@single
def _cast_like(ctx):
    x, like = ctx.inputs[:2]
    return x if x.type.dtype == like.type.dtype else ctx.emit("cast", x, to=like.type.dtype)


@converter("Identity", "Dropout")
def _identity(ctx):
    training = ctx.input(2)
    if training is not None and not (training.is_constant and not training.data.any()):
        raise ctx.unsupported("training_mode (random masks are training-only; inference Dropout is the identity)")
    x = ctx.inputs[0]
    if ctx.extra_outputs_used():  # inference keeps every element: the mask is all true
        if not x.type.is_static:
            raise ctx.unsupported("the mask output of Dropout over a shape known only at run time")
        return [x, ctx.constant(np.ones(x.type.shape, dtype=bool))]
    return [x]


@converter("BitShift")
@single
def _bit_shift(ctx):
    return ctx.emit("bit_shift", ctx.inputs[0], ctx.inputs[1], direction=ctx.attr("direction"))


@converter("Celu")
@single
def _celu(ctx):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)), which is elu(x / alpha) * alpha."""
    x = ctx.inputs[0]
    alpha = ctx.constant(float(ctx.attr("alpha", 1.0)), x.type.dtype)
    return ctx.emit("multiply", ctx.emit("elu", ctx.emit("divide", x, alpha), alpha=1.0), alpha)


@converter("ThresholdedRelu")
@single
def _thresholded_relu(ctx):
    x = ctx.inputs[0]
    above = ctx.emit("greater", x, ctx.constant(float(ctx.attr("alpha", 1.0)), x.type.dtype))
    return ctx.emit("where", above, x, ctx.constant(0, x.type.dtype))


@converter("Mish")
@single
def _mish(ctx):
    x = ctx.inputs[0]
    return ctx.emit("multiply", x, ctx.emit("tanh", ctx.emit("softplus", x)))


@converter("GridSample")
@single
def _grid_sample(ctx):
    x = ctx.inputs[0]
    mode = {"linear": "bilinear", "bilinear": "bilinear", "nearest": "nearest"}.get(ctx.attr("mode", "bilinear"))
    if mode is None:
        raise ctx.unsupported(f"mode {ctx.attr('mode')!r} (linear and nearest are supported)")
    if x.type.rank != 4:
        raise ctx.unsupported(f"a rank-{x.type.rank} input (4-d images are supported)")
    return ctx.emit("grid_sample", x, ctx.inputs[1], mode=mode, padding_mode=ctx.attr("padding_mode", "zeros"),
                    align_corners=int(ctx.attr("align_corners", 0)))  # fmt: skip


# -- convolution and pooling ------------------------------------------------------------


def _spatial_attrs(ctx: NodeContext, nd: int, kernel_shape, in_spatial=None, run_time_pads: bool = False) -> dict:
    """Strides, pads and dilations, auto_pad resolved. A SAME axis whose pads need a size known only at
    run time is left to the caller's ``_same_padded`` (``run_time_pads``), else refused."""
    strides = list(ctx.attr("strides", [1] * nd))
    dilations = list(ctx.attr("dilations", [1] * nd))
    pads = list(ctx.attr("pads", [0] * (2 * nd)))
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        in_spatial = in_spatial if in_spatial is not None else ctx.inputs[0].type.shape[2:]
        # A stride-1 axis pads (k - 1) * dilation whatever its size, so only a strided axis of
        # unknown size needs the size itself: those are padded at run time (_same_padded).
        sizes = [d if isinstance(d, int) else 1 for d in in_spatial]
        if not run_time_pads and _padded_at_run_time(ctx, nd, strides):
            raise ctx.unsupported(
                f"SAME padding with strides {strides} over spatial dims known only at run time "
                f"{list(in_spatial)} (fix them with --input)"
            )
        pads = same_pads(sizes, kernel_shape, strides, dilations, auto_pad == "SAME_LOWER")
    elif auto_pad == "VALID":
        pads = [0] * (2 * nd)
    elif auto_pad != "NOTSET":
        raise ctx.unsupported(f"auto_pad {auto_pad!r}")
    return {"strides": strides, "pads": pads, "dilations": dilations}


def _lowest(dtype: str) -> float:
    """What a max-pool pads with: nothing in the window is smaller."""
    return float("-inf") if np.dtype(dtype).kind == "f" else float(np.iinfo(dtype).min)


def _padded_at_run_time(ctx: NodeContext, nd: int, strides) -> bool:
    """SAME padding over an axis whose size is known only at run time and whose stride is above 1."""
    spatial = ctx.inputs[0].type.shape[2:]
    return ctx.attr("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER") and any(
        not isinstance(d, int) and s > 1 for d, s in zip(spatial, strides)
    )


def _same_padded(ctx: NodeContext, x: Value, kernel_shape, attrs: dict, value: float) -> tuple[Value, dict]:
    """``x`` padded by a ``same_pad`` computed per run, and the window op's attributes with no padding left."""
    padded = ctx.emit("same_pad", x, kernel_shape=list(kernel_shape), strides=attrs["strides"],
                      dilations=attrs["dilations"], lower=int(ctx.attr("auto_pad") == "SAME_LOWER"),
                      value=value)  # fmt: skip
    return padded, {**attrs, "pads": [0] * len(attrs["pads"])}


def _rank_op(ctx: NodeContext, base: str, nd: int) -> str:
    if nd not in (1, 2, 3):
        raise ctx.unsupported(f"{nd}-d {base} (1-d to 3-d are supported)")
    return f"{base}{nd}d"


@converter("Conv")
@single
def _conv(ctx):
    w = ctx.inputs[1]
    nd = w.type.rank - 2
    kernel_shape = ctx.attr("kernel_shape", list(w.type.shape[2:]))
    attrs = _spatial_attrs(ctx, nd, kernel_shape, run_time_pads=True)
    inputs = [v for v in ctx.inputs[:3] if v is not None]
    if _padded_at_run_time(ctx, nd, attrs["strides"]):
        inputs[0], attrs = _same_padded(ctx, inputs[0], kernel_shape, attrs, 0.0)
    return ctx.emit(_rank_op(ctx, "conv", nd), *inputs, groups=ctx.attr("group", 1), **attrs)


@converter("ConvTranspose")
@single
def _conv_transpose(ctx):
    x, w = ctx.inputs[:2]
    nd = w.type.rank - 2
    kernel = list(w.type.shape[2:])
    strides = list(ctx.attr("strides", [1] * nd))
    dilations = list(ctx.attr("dilations", [1] * nd))
    output_padding = list(ctx.attr("output_padding", [0] * nd))
    pads = list(ctx.attr("pads", [0] * (2 * nd)))
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    output_shape = ctx.attr("output_shape")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        in_spatial = ctx.static_dims()[2:]
        target = list(output_shape)[-nd:] if output_shape is not None else [d * s for d, s in zip(in_spatial, strides)]
        for i in range(nd):
            total = (
                strides[i] * (in_spatial[i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1 - target[i]
            )
            if total < 0:
                raise ctx.unsupported(f"output_shape {list(output_shape)} needs negative padding")
            half = total // 2
            pads[i], pads[i + nd] = (half, total - half) if auto_pad == "SAME_UPPER" else (total - half, half)
    elif auto_pad == "VALID":
        pads = [0] * (2 * nd)
    inputs = [v for v in ctx.inputs[:3] if v is not None]
    return ctx.emit(
        _rank_op(ctx, "conv_transpose", nd),
        *inputs,
        strides=strides,
        pads=pads,
        dilations=dilations,
        output_padding=output_padding,
        groups=ctx.attr("group", 1),
    )


def _pool(kind: str):
    def convert(ctx):
        if ctx.extra_outputs_used():
            raise ctx.unsupported("the Indices output of MaxPool is not supported")
        x = ctx.inputs[0]
        nd = x.type.rank - 2
        kernel_shape = list(ctx.attr("kernel_shape"))
        attrs = _spatial_attrs(ctx, nd, kernel_shape, run_time_pads=True)
        extra = {"count_include_pad": ctx.attr("count_include_pad", 0)} if kind == "avg" else {}
        if ctx.attr("storage_order", 0):
            raise ctx.unsupported("storage_order=1")
        if _padded_at_run_time(ctx, nd, attrs["strides"]):
            if kind == "avg" and not extra["count_include_pad"]:
                raise ctx.unsupported(
                    "SAME padding that excludes the pad from the average, with a stride above 1 over a size known "
                    "only at run time (fix the size with --input)"
                )
            x, attrs = _same_padded(ctx, x, kernel_shape, attrs, _lowest(x.type.dtype) if kind == "max" else 0.0)
            if ctx.attr("ceil_mode", 0):
                raise ctx.unsupported("ceil_mode with SAME padding over a size known only at run time")
        return ctx.emit(
            _rank_op(ctx, f"{kind}_pool", nd),
            x,
            kernel_shape=kernel_shape,
            ceil_mode=ctx.attr("ceil_mode", 0),
            **attrs,
            **extra,
        )

    return convert


converter("MaxPool")(single(_pool("max")))
converter("AveragePool")(single(_pool("avg")))


@converter("GlobalAveragePool", "GlobalMaxPool")
@single
def _global_pool(ctx):
    x = ctx.inputs[0]
    op = "reduce_mean" if ctx.node.op_type == "GlobalAveragePool" else "reduce_max"
    return ctx.emit(op, x, axes=list(range(2, x.type.rank)), keepdims=1)


@converter("LRN")
@single
def _lrn(ctx):
    return ctx.emit(
        "lrn",
        ctx.inputs[0],
        size=int(ctx.attr("size")),
        alpha=float(ctx.attr("alpha", 1e-4)),
        beta=float(ctx.attr("beta", 0.75)),
        bias=float(ctx.attr("bias", 1.0)),
    )


# -- normalisation ----------------------------------------------------------------------


@converter("BatchNormalization")
@single
def _batch_norm(ctx):
    if ctx.attr("training_mode", 0):
        raise ctx.unsupported("training_mode=1")
    if ctx.extra_outputs_used():
        raise ctx.unsupported("the training outputs (running mean/var) are not supported")
    return ctx.emit("batch_norm", *ctx.inputs[:5], epsilon=float(ctx.attr("epsilon", 1e-5)))


@converter("LayerNormalization")
def _layer_norm(ctx):
    inputs = [v for v in ctx.inputs[:3] if v is not None]
    axis, epsilon = ctx.attr("axis", -1), float(ctx.attr("epsilon", 1e-5))
    y = ctx.emit("layer_norm", *inputs, axis=axis, epsilon=epsilon)
    if not ctx.extra_outputs_used():
        return [y]
    # Mean and InvStdDev (kept for a backward pass, but asked for): the statistics over the normalised axes,
    # in the stash type (float32 unless stash_type says otherwise), with those axes kept as 1.
    x = inputs[0]
    stash = ctx.dtype_attr("stash_type", 1)
    if x.type.dtype != stash:
        x = ctx.emit("cast", x, to=stash)
    axes = list(range(axis % x.type.rank, x.type.rank))
    mean = ctx.emit("reduce_mean", x, axes=axes, keepdims=1)
    deviation = ctx.emit("subtract", x, mean)
    variance = ctx.emit("reduce_mean", ctx.emit("multiply", deviation, deviation), axes=axes, keepdims=1)
    inv_std = ctx.emit("reciprocal", ctx.emit("sqrt", ctx.emit("add", variance, ctx.constant(epsilon, stash))))
    return [y, mean, inv_std]


@converter("InstanceNormalization")
@single
def _instance_norm(ctx):
    return ctx.emit("instance_norm", *ctx.inputs[:3], epsilon=float(ctx.attr("epsilon", 1e-5)))


# -- linear algebra ---------------------------------------------------------------------


@converter("MatMul")
@single
def _matmul(ctx):
    return ctx.emit("matmul", ctx.inputs[0], ctx.inputs[1])


@converter("Gemm")
@single
def _gemm(ctx):
    a, b = ctx.inputs[:2]
    c = ctx.input(2)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if ctx.attr("transA", 0):
        a = ctx.emit("transpose", a, perm=[1, 0])
    w = b if ctx.attr("transB", 0) else ctx.emit("transpose", b, perm=[1, 0])  # dense wants (units, in)
    if alpha != 1.0:
        w = ctx.emit("multiply", w, ctx.constant(alpha, w.type.dtype))
    if c is None or beta == 0.0:
        return ctx.emit("dense", a, w)
    if beta != 1.0:
        c = ctx.emit("multiply", c, ctx.constant(beta, c.type.dtype))
    return ctx.emit("dense", a, w, c)


@converter("Einsum")
@single
def _einsum(ctx):
    """Einsum of one or two operands (MaxViT's attention: ``bghid,bghjd->bghij``) as transposes,
    sums and one batched matmul: letters shared and kept are batch dims, shared and dropped
    are contracted, the rest are the matmul's rows and columns."""
    terms, out = _einsum_terms(ctx)
    if len(terms) == 1:
        (term,), x = terms, ctx.inputs[0]
        x = _sum_letters(ctx, x, term, [c for c in term if c not in out])
        return _to_order(ctx, x, [c for c in term if c in out], out)
    if len(terms) != 2:
        raise ctx.unsupported(f"{len(terms)} operands (one or two are supported)")
    (ta, tb), (a, b) = terms, ctx.inputs[:2]
    a = _sum_letters(ctx, a, ta, [c for c in ta if c not in out and c not in tb])
    b = _sum_letters(ctx, b, tb, [c for c in tb if c not in out and c not in ta])
    ta, tb = [c for c in ta if c in out or c in tb], [c for c in tb if c in out or c in ta]
    batch = [c for c in out if c in ta and c in tb]
    left, right = [c for c in out if c in ta and c not in tb], [c for c in out if c in tb and c not in ta]
    summed = [c for c in ta if c in tb and c not in out]
    a, b = _to_order(ctx, a, ta, batch + left + summed), _to_order(ctx, b, tb, batch + summed + right)
    dims = {**dict(zip(batch + summed + right, b.type.shape)), **dict(zip(batch + left + summed, a.type.shape))}
    nb, single = len(batch), len(left) == len(summed) == len(right) == 1
    sizes = {name: _product([dims[c] for c in group]) for name, group in (("rows", left), ("inner", summed),
                                                                            ("cols", right))}  # fmt: skip
    if single:  # [batch..., i, k] @ [batch..., k, j] as they are, symbolic or not
        result = ctx.emit("matmul", a, b)
    elif None not in sizes.values():  # each group merged into one dim, and split again after
        a = ctx.emit("reshape", a, shape=[0] * nb + [sizes["rows"], sizes["inner"]])
        b = ctx.emit("reshape", b, shape=[0] * nb + [sizes["inner"], sizes["cols"]])
        result = ctx.emit("reshape", ctx.emit("matmul", a, b), shape=[0] * nb + [dims[c] for c in left + right])
    else:  # a symbolic dim in a group: broadcast multiply over (batch, left, right, summed), then sum
        b = ctx.emit("transpose", b, perm=_summed_last(nb, len(summed), len(right)))
        result = ctx.emit(
            "multiply", _unsqueezed(ctx, a, nb + len(left), len(right)), _unsqueezed(ctx, b, nb, len(left))
        )
        result = _sum_letters(ctx, result, batch + left + right + summed, summed)
    return _to_order(ctx, result, batch + left + right, out)


def _einsum_terms(ctx: NodeContext) -> tuple[list[list[str]], list[str]]:
    """The operands' letters and the output's, with ``...`` spelled out as letters of their own."""
    equation = ctx.attr("equation").replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ctx.inputs):
        raise ctx.error(f"equation {equation!r} has {len(terms)} operands, the node {len(ctx.inputs)} inputs")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in equation]
    widths = [x.type.rank - (len(t) - 3) if "..." in t else 0 for t, x in zip(terms, ctx.inputs)]
    ellipsis = spare[: max(widths, default=0)]
    letters = [
        list(t.split("...")[0]) + ellipsis[len(ellipsis) - w :] + list(t.split("...")[1]) if "..." in t else list(t)
        for t, w in zip(terms, widths)
    ]  # fmt: skip
    for t, x in zip(letters, ctx.inputs):
        if len(t) != x.type.rank:
            raise ctx.error(f"equation {equation!r}: term {''.join(t)!r} for a rank-{x.type.rank} input")
        if len(set(t)) != len(t):
            raise ctx.unsupported(f"equation {equation!r}: a repeated index (a diagonal)")
    if not arrow:  # implicit output: the ellipsis, then the letters seen once, in order
        once = sorted(c for c in set(sum(letters, [])) if sum(t.count(c) for t in letters) == 1 and c not in ellipsis)
        return letters, ellipsis + once
    return letters, list(out.replace("...", "".join(ellipsis)))


def _sum_letters(ctx: NodeContext, x: Value, term: list[str], letters: list[str]) -> Value:
    if not letters:
        return x
    return ctx.emit("reduce_sum", x, axes=[term.index(c) for c in letters], keepdims=0)


def _to_order(ctx: NodeContext, x: Value, have: list[str], want: list[str]) -> Value:
    perm = [have.index(c) for c in want]
    return x if perm == list(range(len(perm))) else ctx.emit("transpose", x, perm=perm)


def _product(dims: list) -> int | None:
    """The product of dims, None if any is symbolic."""
    return int(np.prod(dims, dtype=np.int64)) if all(isinstance(d, int) for d in dims) else None


def _summed_last(nb: int, ns: int, nr: int) -> list[int]:
    """b's (batch, summed, right) axes as (batch, right, summed)."""
    return list(range(nb)) + list(range(nb + ns, nb + ns + nr)) + list(range(nb, nb + ns))


def _unsqueezed(ctx: NodeContext, x: Value, at: int, count: int) -> Value:
    return ctx.emit("unsqueeze", x, axes=list(range(at, at + count))) if count else x


# -- reductions -------------------------------------------------------------------------

REDUCE = {
    "ReduceMean": "reduce_mean",
    "ReduceSum": "reduce_sum",
    "ReduceMax": "reduce_max",
    "ReduceMin": "reduce_min",
    "ReduceProd": "reduce_prod",
}
# The opset in which each reduction's axes moved from an attribute to an input.
AXES_BECAME_INPUT = {"ReduceSum": 13}


def _reduce_axes(ctx: NodeContext) -> list[int] | None | bool:
    """The axes to reduce (None: all), or False when empty axes with noop_with_empty_axes mean no reduction."""
    x = ctx.inputs[0]
    moved = AXES_BECAME_INPUT.get(ctx.node.op_type, 18)
    if ctx.opset >= moved:
        axes = ctx.ints(1, "axes") if ctx.input(1) is not None else []
    else:
        axes = list(ctx.attr("axes", []))
    if not axes:
        return False if ctx.attr("noop_with_empty_axes", 0) else None
    return [a % x.type.rank for a in axes]


@converter(*REDUCE)
@single
def _reduce(ctx):
    x = ctx.inputs[0]
    axes = _reduce_axes(ctx)
    if axes is False:
        return x
    return ctx.emit(REDUCE[ctx.node.op_type], x, axes=axes, keepdims=ctx.attr("keepdims", 1))


def _reduce_sum_of(ctx: NodeContext, x: Value) -> Value:
    axes = _reduce_axes(ctx)
    return x if axes is False else ctx.emit("reduce_sum", x, axes=axes, keepdims=ctx.attr("keepdims", 1))


@converter("ReduceL1")
@single
def _reduce_l1(ctx):
    return _reduce_sum_of(ctx, ctx.emit("abs", ctx.inputs[0]))


@converter("ReduceSumSquare")
@single
def _reduce_sum_square(ctx):
    x = ctx.inputs[0]
    return _reduce_sum_of(ctx, ctx.emit("multiply", x, x))


@converter("ReduceL2")
@single
def _reduce_l2(ctx):  # F.normalize in Swin V2's cosine attention
    x = ctx.inputs[0]
    return ctx.emit("sqrt", _reduce_sum_of(ctx, ctx.emit("multiply", x, x)))


@converter("ReduceLogSum")
@single
def _reduce_log_sum(ctx):
    return ctx.emit("log", _reduce_sum_of(ctx, ctx.inputs[0]))


@converter("ReduceLogSumExp")
@single
def _reduce_log_sum_exp(ctx):
    """log(sum(exp(x - max))) + max: exp never overflows, as in onnxruntime."""
    x, axes = ctx.inputs[0], _reduce_axes(ctx)
    if axes is False:
        return x
    peak = ctx.emit("reduce_max", x, axes=axes, keepdims=1)
    total = ctx.emit("reduce_sum", ctx.emit("exp", ctx.emit("subtract", x, peak)), axes=axes, keepdims=1)
    result = ctx.emit("add", ctx.emit("log", total), peak)
    if ctx.attr("keepdims", 1):
        return result
    return ctx.emit("squeeze", result, axes=list(range(x.type.rank)) if axes is None else axes)


@converter("ArgMax", "ArgMin")
@single
def _arg_reduce(ctx):
    x = ctx.inputs[0]
    return ctx.emit(
        ctx.node.op_type.lower(),
        x,
        axis=ctx.attr("axis", 0) % max(x.type.rank, 1),
        keepdims=ctx.attr("keepdims", 1),
        select_last_index=ctx.attr("select_last_index", 0),
    )


@converter("CumSum")
@single
def _cumsum(ctx):
    x = ctx.inputs[0]
    (axis,) = ctx.ints(1, "axis")
    return ctx.emit(
        "cumsum", x, axis=axis % max(x.type.rank, 1), exclusive=ctx.attr("exclusive", 0), reverse=ctx.attr("reverse", 0)
    )


@converter("TopK")
def _topk(ctx):
    x = ctx.inputs[0]
    (k,) = [int(ctx.attr("k"))] if ctx.opset < 10 else ctx.ints(1, "K")
    return ctx.emit_node(
        "topk",
        [x],
        k=k,
        axis=ctx.attr("axis", -1) % max(x.type.rank, 1),
        largest=ctx.attr("largest", 1),
        sorted=ctx.attr("sorted", 1),
    )


# -- shapes and data movement -----------------------------------------------------------


@converter("Reshape")
@single
def _reshape(ctx):
    x = ctx.inputs[0]
    allowzero = ctx.attr("allowzero", 0)
    target = ctx.const(1)
    if target is None:
        copying = _copying_target(x.type.shape, known_elements(ctx.inputs[1]))
        if copying is not None:
            return ctx.emit("reshape", x, shape=copying, allowzero=0)
        return ctx.emit("reshape", x, ctx.inputs[1], allowzero=allowzero)
    return ctx.emit("reshape", x, shape=[int(d) for d in target.reshape(-1)], allowzero=allowzero)


def _copying_target(dims: tuple, elements: list | None) -> list[int] | None:
    """A reshape target computed at run time as a static one, where what its producers tell allows.

    Exporters with dynamic axes write ``x.view(batch, seq, heads, -1)`` as
    ``Concat(Shape(x)[:2], [4, -1])``: each element is a number, or the input's own dim at
    the same position, which ``0`` copies (``[0, 0, 4, 8]``); one element known to be
    neither becomes the ``-1``, which the element count fixes. A static target keeps the
    reshape inside a delegate's region (run-time targets are host computations, and split
    every attention layer of a dynamic-shape transformer into several regions). None
    where the target cannot be written so (a literal 0, two unknown elements).

    Next to a copied dim the ``-1`` must be a number known here: onnxruntime infers a -1
    from the other dims' product, which a copied 0 (an empty batch) makes 0, and refuses.
    """
    if elements is None:
        return None
    target = []
    for i, element in enumerate(elements):
        if isinstance(element, int) and (element > 0 or element == -1):
            target.append(element)
        elif isinstance(element, str) and i < len(dims) and dims[i] == element:
            target.append(0)
        elif isinstance(element, int):
            return None  # a literal 0 (allowzero) or a negative size: the run-time reshape says what it means
        else:
            target.append(-1)  # unknown, or a symbol of another position
    if target.count(-1) > 1:
        return None
    if -1 in target and 0 in target:
        inferred = _static_quotient(dims, [dims[i] if t == 0 else t for i, t in enumerate(target) if t != -1])
        if inferred is None:
            return None
        target[target.index(-1)] = inferred
    return target


def _static_quotient(numerator: Sequence, denominator: Sequence) -> int | None:
    """prod(numerator) / prod(denominator) where the symbols cancel and the numbers divide, else None."""
    top, bottom = list(numerator), list(denominator)
    for d in list(bottom):
        if isinstance(d, str) and d in top:
            top.remove(d)
            bottom.remove(d)
    if not all(isinstance(d, int) for d in top + bottom):
        return None
    n, m = math.prod(top), math.prod(bottom)
    return n // m if m and n % m == 0 and n // m > 0 else None


@converter("Flatten")
@single
def _flatten(ctx):
    return ctx.emit("flatten", ctx.inputs[0], axis=ctx.attr("axis", 1))


@converter("Transpose")
@single
def _transpose(ctx):
    perm = ctx.attr("perm")
    return ctx.emit("transpose", ctx.inputs[0], perm=None if perm is None else list(perm))


def _axes_attr_or_input(ctx: NodeContext, moved_in: int) -> list[int] | None:
    if ctx.opset >= moved_in:
        return ctx.ints(1, "axes") if ctx.input(1) is not None else None
    axes = ctx.attr("axes")
    return None if axes is None else list(axes)


@converter("Squeeze")
@single
def _squeeze(ctx):
    x = ctx.inputs[0]
    axes = _axes_attr_or_input(ctx, 13)
    if axes is None:
        axes = [i for i, d in enumerate(ctx.static_dims()) if d == 1]
    return ctx.emit("squeeze", x, axes=[a % x.type.rank for a in axes])


@converter("Unsqueeze")
@single
def _unsqueeze(ctx):
    x = ctx.inputs[0]
    axes = _axes_attr_or_input(ctx, 13)
    if axes is None:
        raise ctx.error("axes are required")
    rank = x.type.rank + len(axes)
    return ctx.emit("unsqueeze", x, axes=sorted(a % rank for a in axes))


@converter("Expand")
@single
def _expand(ctx):
    x = ctx.inputs[0]
    target = ctx.const(1)
    if target is None:
        return ctx.emit("expand", x, ctx.inputs[1])
    return ctx.emit("expand", x, shape=[int(d) for d in target.reshape(-1)])


@converter("Tile")
@single
def _tile(ctx):
    return ctx.emit("tile", ctx.inputs[0], repeats=ctx.ints(1, "repeats"))


@converter("Concat")
@single
def _concat(ctx):
    inputs = [v for v in ctx.inputs if v is not None]
    rank = inputs[0].type.rank
    return ctx.emit("concat", *inputs, axis=ctx.attr("axis") % rank)


@converter("Split")
def _split(ctx):
    x = ctx.inputs[0]
    axis = ctx.attr("axis", 0) % x.type.rank
    outputs = len(ctx.node.output)
    if ctx.opset >= 13 and ctx.input(1) is not None:
        sizes = ctx.ints(1, "split")
    elif ctx.opset < 13 and ctx.attr("split") is not None:
        sizes = list(ctx.attr("split"))
    else:
        dim = x.type.shape[axis]
        if not isinstance(dim, int):
            raise ctx.unsupported(f"splitting symbolic dim {dim!r} without explicit sizes")
        parts = ctx.attr("num_outputs", outputs)
        chunk = -(-dim // parts)
        sizes = [chunk] * (dim // chunk) + ([dim % chunk] if dim % chunk else [])
    if len(sizes) != outputs:
        raise ctx.error(f"split sizes {sizes} do not match {outputs} outputs")
    return ctx.emit_node("split", [x], axis=axis, sizes=sizes)


@converter("Slice")
@single
def _slice(ctx):
    x = ctx.inputs[0]
    if ctx.opset < 10:
        starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
        axes = list(ctx.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        count = ctx.inputs[1].type.shape[0]
        axes = ctx.ints(3, "axes") if ctx.input(3) is not None else list(range(count if isinstance(count, int) else 0))
        steps = ctx.ints(4, "steps") if ctx.input(4) is not None else [1] * len(axes)
        if ctx.const(1) is None or ctx.const(2) is None:  # bounds from run-time sizes, e.g. x[:, :seq]
            axes = [a % x.type.rank for a in axes]
            return ctx.emit("dynamic_slice", x, ctx.inputs[1], ctx.inputs[2], axes=axes, steps=steps)
        starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
    clamp = lambda v: max(min(v, 2**62), -(2**62))  # noqa: E731 - INT64_MAX sentinels stay ints msgpack can hold
    return ctx.emit(
        "slice",
        x,
        starts=[clamp(s) for s in starts],
        ends=[clamp(e) for e in ends],
        axes=[a % x.type.rank for a in axes],
        steps=steps,
    )


@converter("Pad")
@single
def _pad(ctx):
    x = ctx.inputs[0]
    rank = x.type.rank
    mode = ctx.attr("mode", "constant")
    if ctx.opset < 11:
        pads, value = list(ctx.attr("pads")), float(ctx.attr("value", 0.0))
    else:
        pads = ctx.ints(1, "pads")
        value = ctx.const(2)
        if ctx.input(2) is not None and value is None:
            raise ctx.unsupported("a run-time constant_value")
        value = 0.0 if value is None else value.reshape(-1)[0].item()
        if ctx.input(3) is not None:  # opset 18: pads for the listed axes only
            axes = [a % rank for a in ctx.ints(3, "axes")]
            full = [0] * (2 * rank)
            for i, a in enumerate(axes):
                full[a], full[a + rank] = pads[i], pads[i + len(axes)]
            pads = full
    return ctx.emit("pad", x, pads=pads, mode=mode, value=value)


@converter("Gather")
@single
def _gather(ctx):
    data = ctx.inputs[0]
    return ctx.emit("gather", data, ctx.inputs[1], axis=ctx.attr("axis", 0) % data.type.rank)


@converter("GatherElements")
@single
def _gather_elements(ctx):
    data = ctx.inputs[0]
    return ctx.emit("gather_elements", data, ctx.inputs[1], axis=ctx.attr("axis", 0) % data.type.rank)


@converter("GatherND")
@single
def _gather_nd(ctx):
    return ctx.emit("gather_nd", ctx.inputs[0], ctx.inputs[1], batch_dims=ctx.attr("batch_dims", 0))


@converter("ScatterND")
@single
def _scatter_nd(ctx):
    return ctx.emit("scatter_nd", *ctx.inputs[:3], reduction=ctx.attr("reduction", "none"))


@converter("ScatterElements", "Scatter")
@single
def _scatter_elements(ctx):
    data = ctx.inputs[0]
    axis = ctx.attr("axis", 0) % max(data.type.rank, 1)
    return ctx.emit("scatter_elements", *ctx.inputs[:3], axis=axis, reduction=ctx.attr("reduction", "none"))


@converter("Trilu")
@single
def _trilu(ctx):
    (k,) = ctx.ints(1, "k") if ctx.input(1) is not None else [0]
    return ctx.emit("trilu", ctx.inputs[0], upper=ctx.attr("upper", 1), k=k)


@converter("Shape")
@single
def _shape(ctx):
    x = ctx.inputs[0]
    start, end = ctx.attr("start", 0), ctx.attr("end")
    dims = x.type.shape[slice(start, end)]
    if all(isinstance(d, int) for d in dims):
        return ctx.constant(np.array(dims, dtype=np.int64))
    return ctx.emit("shape", x, start=start, end=end)


@converter("Size")
@single
def _size(ctx):
    x = ctx.inputs[0]
    if x.type.is_static:
        return ctx.constant(np.array(x.type.numel, dtype=np.int64))
    return ctx.emit("reduce_prod", ctx.emit("shape", x), axes=None, keepdims=0)


@converter("Constant")
@single
def _constant(ctx):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if ctx.has_attr(key):
            value = ctx.attr(key)
            dtype = {
                "value_float": np.float32,
                "value_floats": np.float32,
                "value_int": np.int64,
                "value_ints": np.int64,
            }.get(key)
            return ctx.constant(np.asarray(value, dtype=dtype) if dtype else value)
    raise ctx.unsupported("only tensor, float(s) and int(s) constants are supported")


@converter("ConstantOfShape")
@single
def _constant_of_shape(ctx):
    value = ctx.attr("value")
    value = np.zeros(1, np.float32) if value is None else value
    return ctx.emit("constant_of_shape", ctx.inputs[0], value=value.reshape(-1)[0].item(), dtype=value.dtype.name)


@converter("Range")
@single
def _range(ctx):
    return ctx.emit("range", *ctx.inputs[:3])


# -- resize -----------------------------------------------------------------------------


@converter("Resize", "Upsample")
@single
def _resize(ctx):
    x = ctx.inputs[0]
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear", "cubic") or (mode == "cubic" and ctx.node.op_type == "Upsample"):
        raise ctx.unsupported(f"mode {mode!r} (nearest, linear and cubic are supported)")
    mode = "linear" if mode == "bilinear" else mode
    if ctx.node.op_type == "Upsample" or ctx.opset < 11:
        scales = ctx.attr("scales") if ctx.opset < 9 else ctx.require_const(1, "scales")
        return ctx.emit(
            "resize", x, mode=mode, scales=[float(s) for s in np.reshape(scales, -1)],
            coordinate_transformation_mode="asymmetric", nearest_mode="floor",
        )  # fmt: skip
    if ctx.attr("antialias", 0):
        raise ctx.unsupported("antialias=1")
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise ctx.unsupported(f"keep_aspect_ratio_policy {policy!r}")
    coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
    if coord == "tf_crop_and_resize":
        raise ctx.unsupported("coordinate_transformation_mode 'tf_crop_and_resize'")
    rank = x.type.rank
    axes = [a % rank for a in ctx.attr("axes", list(range(rank)))]
    scales = ctx.const(2)
    sizes = ctx.const(3)
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": coord,
        "nearest_mode": ctx.attr("nearest_mode", "round_prefer_floor"),
    }
    if sizes is None and ctx.input(3) is not None:  # computed at run time: often Concat(Shape(x)[:2], [h, w])
        elements = known_elements(ctx.inputs[3])  # each the input's own dim or a number, where exporters wrote so
        if elements is None or None in elements:
            return _run_time_resize(ctx, policy, axes, attrs, "scales or sizes must be constants")
        if policy != "stretch" and not all(isinstance(s, int) for s in elements):
            raise ctx.unsupported(f"keep_aspect_ratio_policy {policy!r} with sizes computed at run time")
        sizes = np.array(elements, dtype=object)
    for given, what in ((sizes, "sizes"), (scales, "scales")):
        if given is not None and given.size and given.size != len(axes):
            raise ctx.error(f"{what} has {given.size} entries for {len(axes)} axes")
    if sizes is not None and sizes.size:
        full = list(x.type.shape)
        if policy != "stretch":  # one scale for every axis, the largest that fits (or the smallest that covers)
            if not all(isinstance(x.type.shape[a], int) for a in axes):
                raise ctx.unsupported(f"keep_aspect_ratio_policy {policy!r} over symbolic dims")
            ratios = [float(s) / x.type.shape[a] for a, s in zip(axes, sizes.reshape(-1))]
            scale = min(ratios) if policy == "not_larger" else max(ratios)
            sizes = np.array([int(np.floor(scale * x.type.shape[a] + 0.5)) for a in axes])
            _check_aspect_ratio_coordinates(ctx, [x.type.shape[a] for a in axes], sizes, scale, coord)
        for a, s in zip(axes, sizes.reshape(-1)):
            full[a] = s if isinstance(s, str) else int(s)
        if mode == "cubic":
            ratios = [
                o / d if isinstance(o, int) and isinstance(d, int) and d else 1.0 for o, d in zip(full, x.type.shape)
            ]
            return _cubic_resize(ctx, x, full, ratios)
        if all(isinstance(d, int) for d in full):
            return ctx.emit("resize", x, sizes=full, **attrs)
        static, why = _scales_for_sizes(x.type.shape, full, mode)
        if static is None:
            return _run_time_resize(ctx, policy, axes, attrs, why)
        return ctx.emit("resize", x, scales=static, **attrs)
    if scales is None or not scales.size:
        raise ctx.unsupported("scales or sizes must be constants")
    full_scales = [1.0] * rank
    for a, s in zip(axes, scales.reshape(-1)):
        full_scales[a] = float(s)
    if coord == "align_corners" and any(
        isinstance(d, int) and abs(d * s - round(d * s)) > 1e-4 for d, s in zip(x.type.shape, full_scales)
    ):  # onnx's reference maps over the unrounded length d * s - 1, onnxruntime over the output's: they disagree
        raise ctx.unsupported("align_corners with scales that do not give whole output lengths (ambiguous)")
    if mode == "cubic":
        sizes = [d if s == 1.0 else (int(np.floor(d * s)) if isinstance(d, int) else None)
                 for d, s in zip(x.type.shape, full_scales)]  # fmt: skip
        return _cubic_resize(ctx, x, sizes, full_scales)
    return ctx.emit("resize", x, scales=full_scales, **attrs)


def _cubic_taps(coord: str, out_size: int, in_size: int, scale: float, a: float, exclude_outside: bool):
    """Each output index's four input indices and weights along one axis, as onnx's reference computes them:
    the neighbours base - 1 .. base + 2 of the source coordinate (base + ratio, ratio in (0, 1]), Keys'
    cubic kernel with coefficient ``a``, edge pixels repeated outside the axis, or (``exclude_outside``) given
    weight 0 and the rest renormalised."""
    from runtime_lite.kernels.resize import source_coordinates

    x = source_coordinates(coord, out_size, in_size, scale)
    base = np.ceil(x) - 1
    r = x - base
    weights = np.stack([
        ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
        ((a + 2) * r - (a + 3)) * r * r + 1,
        ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
        ((a * (2 - r) - 5 * a) * (2 - r) + 8 * a) * (2 - r) - 4 * a,
    ], axis=1)  # fmt: skip
    index = base.astype(np.int64)[:, None] + np.arange(-1, 3)
    if exclude_outside:
        weights = np.where((index < 0) | (index >= in_size), 0.0, weights)
        weights /= weights.sum(axis=1, keepdims=True)
    return np.clip(index, 0, in_size - 1), weights


def _cubic_resize(ctx: NodeContext, x: Value, sizes: list, scales: list[float]) -> Value:
    """Resize mode 'cubic' (torchvision's bicubic interpolate), one axis at a time: a gather of the four
    neighbours, their weights (constants of the axis's sizes) and a sum over the four: the kernel is
    separable, so this is onnx's definition, with no host kernel of its own."""
    if x.type.dtype not in ("float16", "float32", "float64"):
        raise ctx.unsupported(f"cubic resize of {x.type.dtype} values (floats are supported)")
    coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
    a, exclude = float(ctx.attr("cubic_coeff_a", -0.75)), bool(ctx.attr("exclude_outside", 0))
    for axis, (d, out, scale) in enumerate(zip(x.type.shape, sizes, scales)):
        if out == d and scale == 1.0:
            continue
        if not (isinstance(d, int) and isinstance(out, int)):
            raise ctx.unsupported(f"cubic resize of axis {axis} ({d!r} to {out!r}): its sizes must be known when built")
        index, weights = _cubic_taps(coord, out, d, scale, a, exclude)
        taps = ctx.emit("gather", x, ctx.constant(index), axis=axis)  # [..., out, 4, ...]
        w = ctx.constant(weights.astype(x.type.dtype).reshape([out, 4] + [1] * (x.type.rank - axis - 1)))
        x = ctx.emit("reduce_sum", ctx.emit("multiply", taps, w), axes=[axis + 1], keepdims=0)
    return x


def _scales_for_sizes(dims: tuple, sizes: list, mode: str) -> tuple[list[float] | None, str]:
    """Per-axis scales that give ``sizes`` from ``dims`` where a symbolic dim keeps its size (scale 1),
    or (None, why not).

    Each resized axis must be static on both sides; its scale is the smallest float32 at or
    above ``out / in``, so that ``floor(in * scale)`` is ``out`` exactly in float32 (onnxruntime)
    and in float64 (ONNX shape inference, the host). Linear sampling points then move by at
    most one float32 ulp of the scale (a relative change below 1e-6). Nearest sampling rounds
    points that often fall exactly on a pixel edge, where one ulp picks the other pixel: it
    takes only scales that are exactly ``out / in`` (2x, 0.5x, ...).
    """
    scales = []
    for d, out in zip(dims, sizes):
        if d == out:
            scales.append(1.0)
            continue
        if not (isinstance(d, int) and isinstance(out, int)) or d <= 0 or out <= 0:
            return None, f"resize of a dim {d!r} to {out!r} (a symbolic dim may only keep its size)"
        scale = np.float32(out / d)
        while float(scale) * d < out:  # exact in float64: a float32 times an int below 2**29
            scale = np.nextafter(scale, np.float32(np.inf))
        if mode == "nearest" and float(scale) * d != out:
            return None, f"nearest resize of {d} to {out} (no float32 scale gives onnxruntime's sampling points)"
        scales.append(float(scale))
    return scales, ""


def _run_time_resize(ctx, policy: str, axes: list[int], attrs: dict, why: str):
    """``dynamic_resize`` to the sizes tensor as computed at run time, where no static form states the resize.

    The host runs it (no delegate lowers it); it needs sizes for every axis and the
    default aspect-ratio policy, else the resize is refused with ``why``.
    """
    x, sizes = ctx.inputs[0], ctx.input(3)
    if attrs["mode"] == "cubic":
        raise ctx.unsupported(f"{why} (for a cubic resize); fix input shapes with --input NAME:SHAPE")
    if sizes is None or sizes.is_constant or policy != "stretch" or axes != list(range(x.type.rank)):
        raise ctx.unsupported(f"{why}; fix input shapes with --input NAME:SHAPE")
    return ctx.emit("dynamic_resize", x, sizes, **attrs)


def _check_aspect_ratio_coordinates(ctx, dims, sizes, scale: float, coord: str) -> None:
    """ONNX maps coordinates with the one kept scale, the kernel with out / in per axis: refuse where they differ."""
    from runtime_lite.kernels.resize import source_coordinates

    for d, out in zip(dims, sizes):
        ours = source_coordinates(coord, int(out), d, int(out) / d)
        theirs = source_coordinates(coord, int(out), d, scale)
        if not np.allclose(ours, theirs, rtol=0, atol=1e-6):
            raise ctx.unsupported("keep_aspect_ratio_policy where rounding the sizes moves the sampling points")


# -- quantisation -----------------------------------------------------------------------


@converter("QuantizeLinear")
@single
def _quantize(ctx):
    x, scale = ctx.inputs[:2]
    zero_point = ctx.input(2)
    if ctx.attr("block_size", 0):
        raise ctx.unsupported("blocked quantisation (block_size)")
    if zero_point is not None:
        dtype = zero_point.type.dtype
    elif ctx.attr("output_dtype", 0):
        dtype = ctx.dtype_attr("output_dtype")
    else:
        dtype = "uint8"
    if dtype not in ("int8", "uint8", "int16", "uint16"):
        raise ctx.unsupported(f"quantisation to {dtype}")
    inputs = [x, scale] + ([zero_point] if zero_point is not None else [])
    return ctx.emit("quantize", *inputs, axis=ctx.attr("axis", 1) % max(x.type.rank, 1), dtype=dtype)


@converter("DequantizeLinear")
@single
def _dequantize(ctx):
    x, scale = ctx.inputs[:2]
    if ctx.attr("block_size", 0):
        raise ctx.unsupported("blocked quantisation (block_size)")
    inputs = [v for v in ctx.inputs[:3] if v is not None]
    return ctx.emit("dequantize", *inputs, axis=ctx.attr("axis", 1) % max(x.type.rank, 1))


# Compositions of the ops above (windows, Hardmax, OneHot, LpPool, ...) register themselves into CONVERTERS.
from aot.frontend.onnx import contrib_converters, ml_converters, more_converters  # noqa: E402,F401

SUPPORTED_OP_TYPES = frozenset(CONVERTERS)
