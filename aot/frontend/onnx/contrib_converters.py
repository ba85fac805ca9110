"""Microsoft contrib ops onnxruntime ships: some carried as the file wrote them, some computed.

Each allow-listed (aot/ir/contrib.py) ``com.microsoft`` node becomes one ``onnxruntime_contrib`` op: its
attributes as plain values (ints, floats, strings and their lists, kept as JSON text), its inputs with the slots they fill (ONNX marks a skipped
optional input with an empty name; the recipe writes it back the same way).
onnxruntime's QOperator quantized ops (QLinearAdd, QGemm, ...) are instead written with canonical
ops (below), so they run on the host and on every target.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from onnx import AttributeProto, helper

from aot.frontend.onnx.context import NodeContext
from aot.frontend.onnx.converters import _rank_op, _spatial_attrs, converter, single
from aot.frontend.onnx.more_converters import _single, dequantized, dequantized_bias, requantized
from aot.ir.contrib import CONTRIB_OPS, DOMAIN, OP, encode_attributes
from aot.ir.graph import Value

#: Attribute kinds a recipe can write back as they were (tensors and graphs are not carried).
PLAIN_KINDS = frozenset(
    {AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING, AttributeProto.INTS, AttributeProto.FLOATS}
)


@converter(*(f"{DOMAIN}.{name}" for name in CONTRIB_OPS))
def _contrib(ctx: NodeContext) -> list[Value]:
    attributes = {}
    for proto in ctx.node.attribute:
        if proto.type not in PLAIN_KINDS:
            raise ctx.unsupported(f"attribute {proto.name!r} of type {AttributeProto.AttributeType.Name(proto.type)}")
        value = helper.get_attribute_value(proto)
        attributes[proto.name] = value.decode() if proto.type == AttributeProto.STRING else value
    slots = [i for i, v in enumerate(ctx.inputs) if v is not None]
    results = ctx.emit_node(
        OP, [ctx.inputs[i] for i in slots], op_type=ctx.node.op_type, domain=DOMAIN,
        attributes=encode_attributes(attributes), slots=slots,
    )  # fmt: skip
    return results[: len(ctx.node.output)]


# -- onnxruntime's QOperator format: com.microsoft quantized ops, computed on the host ------------------
#
# ``quantize_static(..., quant_format=QuantFormat.QOperator)`` (and the model zoo's *-int8 models) write
# these beside ONNX's QLinearConv / QLinearMatMul. Each is defined as: dequantize the inputs, run the
# float op, quantize the result (rounded half to even, saturated), so each becomes exactly that chain of
# canonical ops, which every target runs. onnxruntime's kernels compute the same in float32 (some with a
# 256-entry table); a result that lands on a rounding tie can differ by one quantization step.


def _dequantized(ctx: NodeContext, x: Value, scale: Value, zero: Value | None) -> Value:
    """(x - zero) * scale in the scale's float type; a missing zero point is 0."""
    return ctx.emit("dequantize", *[v for v in (x, scale, zero) if v is not None], axis=1)


def _quantized(ctx: NodeContext, y: Value, scale: Value, zero: Value | None, dtype: str) -> Value:
    """round_half_even(y / scale) + zero, saturated to ``dtype`` (the quantized input's type)."""
    for v in (scale, zero):
        if v is not None and v.type.rank and math.prod(v.type.shape) != 1:
            raise ctx.unsupported(f"a per-channel output scale or zero point {v.type} (one per tensor is)")
    return ctx.emit("quantize", *[v for v in (y, scale, zero) if v is not None], axis=0, dtype=dtype)


def _unary(ctx: NodeContext, fn: Callable[[Value], Value]) -> Value:
    """The X, X_scale, X_zero_point, Y_scale, Y_zero_point form shared by the pooling and activation ops."""
    x = ctx.inputs[0]
    y = fn(_dequantized(ctx, x, ctx.inputs[1], ctx.input(2)))
    return _quantized(ctx, y, ctx.inputs[3], ctx.input(4), x.type.dtype)


def _binary(ctx: NodeContext, op: str) -> Value:
    """A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point, broadcast as numpy does."""
    a, b = ctx.inputs[0], ctx.inputs[3]
    y = ctx.emit(
        op, _dequantized(ctx, a, ctx.inputs[1], ctx.input(2)), _dequantized(ctx, b, ctx.inputs[4], ctx.input(5))
    )
    return _quantized(ctx, y, ctx.inputs[6], ctx.input(7), a.type.dtype)


converter(f"{DOMAIN}.QLinearAdd")(single(lambda ctx: _binary(ctx, "add")))
converter(f"{DOMAIN}.QLinearMul")(single(lambda ctx: _binary(ctx, "multiply")))
converter(f"{DOMAIN}.QLinearSigmoid")(single(lambda ctx: _unary(ctx, lambda x: ctx.emit("sigmoid", x))))


@converter(f"{DOMAIN}.QLinearLeakyRelu")
@single
def _qlinear_leaky_relu(ctx: NodeContext) -> Value:
    """LeakyRelu between dequantize and quantize (alpha 0.01 by default, as ONNX's)."""
    alpha = float(ctx.attr("alpha", 0.01))
    return _unary(ctx, lambda x: ctx.emit("leaky_relu", x, alpha=alpha))


def _channels_first(ctx: NodeContext, x: Value) -> tuple[Value, list[int] | None]:
    """x as NCHW, and the permutation back, where the node says ``channels_last`` (NHWC)."""
    if not ctx.attr("channels_last", 0):
        return x, None
    rank = x.type.rank
    back = [0, *range(2, rank), 1]
    return ctx.emit("transpose", x, perm=[0, rank - 1, *range(1, rank - 1)]), back


@converter(f"{DOMAIN}.QLinearGlobalAveragePool")
@single
def _qlinear_global_average_pool(ctx: NodeContext) -> Value:
    """The mean over the spatial axes (NCHW, or NHWC with channels_last), kept as size-1 axes."""
    x = ctx.inputs[0]
    rank = x.type.rank
    axes = list(range(1, rank - 1)) if ctx.attr("channels_last", 0) else list(range(2, rank))
    return _unary(ctx, lambda v: ctx.emit("reduce_mean", v, axes=axes, keepdims=1))


def _padded_past_the_end(ctx: NodeContext, x: Value, kernel_shape: list[int], attrs: dict) -> tuple[Value, dict]:
    """x padded with zeros explicitly, the pads and as far as ceil_mode's last window reaches, and the pooling
    attributes without pads: onnxruntime's QLinearAveragePool with count_include_pad divides a last window
    that overhangs the padding by the whole kernel (ONNX's AveragePool, since opset 19, by the part inside)."""
    nd = len(kernel_shape)
    spatial = x.type.shape[2:]
    if not all(isinstance(d, int) for d in spatial):
        raise ctx.unsupported(
            f"ceil_mode with count_include_pad over spatial dims known only at run time {list(spatial)}"
        )
    strides, pads, dilations = attrs["strides"], list(attrs["pads"]), attrs["dilations"]
    for i, size in enumerate(spatial):
        reach = dilations[i] * (kernel_shape[i] - 1) + 1
        out = -(-(size + pads[i] + pads[i + nd] - reach) // strides[i]) + 1
        pads[i + nd] = max(pads[i + nd], (out - 1) * strides[i] + reach - size - pads[i])
    padded = ctx.emit("pad", x, pads=[0, 0, *pads[:nd], 0, 0, *pads[nd:]], mode="constant", value=0.0)
    return padded, {**attrs, "pads": [0] * (2 * nd)}


@converter(f"{DOMAIN}.QLinearAveragePool")
@single
def _qlinear_average_pool(ctx: NodeContext) -> Value:
    """AveragePool on the dequantized values (padding is the real 0, x's zero point), NHWC by transposes."""
    x = ctx.inputs[0]
    nd = x.type.rank - 2
    kernel_shape = list(ctx.attr("kernel_shape"))

    def pool(v: Value) -> Value:
        v, back = _channels_first(ctx, v)
        attrs = _spatial_attrs(ctx, nd, kernel_shape, in_spatial=v.type.shape[2:])
        ceil_mode, count_pad = ctx.attr("ceil_mode", 0), ctx.attr("count_include_pad", 0)
        if ceil_mode and count_pad:
            v, attrs = _padded_past_the_end(ctx, v, kernel_shape, attrs)
            ceil_mode, count_pad = 0, 0
        y = ctx.emit(_rank_op(ctx, "avg_pool", nd), v, kernel_shape=kernel_shape, ceil_mode=ceil_mode,
                     count_include_pad=count_pad, **attrs)  # fmt: skip
        return y if back is None else ctx.emit("transpose", y, perm=back)

    return _unary(ctx, pool)


@converter(f"{DOMAIN}.QLinearConcat")
@single
def _qlinear_concat(ctx: NodeContext) -> Value:
    """Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input: each dequantized, concatenated,
    quantized once to Y's parameters."""
    if (len(ctx.inputs) - 2) % 3 or len(ctx.inputs) < 5:
        raise ctx.error(f"{len(ctx.inputs)} inputs: expected Y_scale, Y_zero_point and triples (X, scale, zero point)")
    triples = [ctx.inputs[i : i + 3] for i in range(2, len(ctx.inputs), 3)]
    parts = [_dequantized(ctx, x, scale, zero) for x, scale, zero in triples]
    axis = ctx.attr("axis")
    if axis is None:
        raise ctx.error("the axis attribute is missing")
    y = ctx.emit("concat", *parts, axis=axis % triples[0][0].type.rank)
    return _quantized(ctx, y, ctx.inputs[0], ctx.input(1), triples[0][0].type.dtype)


@converter(f"{DOMAIN}.QGemm")
@single
def _qgemm(ctx: NodeContext) -> Value:
    """onnxruntime's quantized Gemm (what QOperator quantization writes for a Gemm) as the QDQ form of the same
    function: ``dense(dequantize(a), dequantize(b) (per column where its scale is), dequantize(c))``, c's scale
    being ``alpha * a_scale * b_scale``, then quantized to y's parameters or, without y_scale, the float32 result.
    A constant b is transposed as stored (int8), so a dense reads it without a transpose at run time; the
    integer weight and bias stay in the bundle and onnxruntime regions fuse the chain back into its QGemm."""
    a, a_scale, a_zero, b, b_scale, b_zero = (ctx.input(i) for i in range(6))
    c, y_scale, y_zero = ctx.input(6), ctx.input(7), ctx.input(8)
    if a.type.rank != 2 or b.type.rank != 2:
        raise ctx.unsupported(f"operands {a.type} and {b.type} (QGemm takes matrices)")
    if y_scale is None and y_zero is not None:
        raise ctx.unsupported("y_zero_point without y_scale")
    if y_scale is not None and y_zero is None:
        raise ctx.unsupported("y_scale without y_zero_point (the output type is y_zero_point's)")
    if not _single(a_scale) or not _single(a_zero):
        raise ctx.unsupported(f"a per-row scale or zero point of A {a_scale.type} (one per tensor is)")
    if ctx.attr("transA", 0):
        a = ctx.emit("transpose", a, perm=[1, 0])
    if not ctx.attr("transB", 0):
        b = ctx.emit("transpose", b, perm=[1, 0])  # dense wants (units, in): folded where b is a constant
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha != 1.0:  # alpha * (a_scale * b_scale): the weight's scale carries it, and so the bias's
        b_scale = ctx.emit("multiply", b_scale, ctx.constant(np.float32(alpha)))
    inputs = [dequantized(ctx, a, a_scale, a_zero, 1), dequantized(ctx, b, b_scale, b_zero, 0)]
    step = ctx.emit("multiply", a_scale, b_scale)
    if c is not None and c.type.rank <= 1:
        inputs.append(dequantized_bias(ctx, c, step))
    y = ctx.emit("dense", *inputs)
    if c is not None and c.type.rank > 1:  # a (M, N) bias: added after, per column where the scales are
        c = ctx.emit("cast", c, to="int32") if c.type.dtype != "int32" else c
        zero = ctx.constant(np.zeros([d if isinstance(d, int) else 1 for d in step.type.shape], np.int32))
        y = ctx.emit("add", y, dequantized(ctx, c, step, zero, c.type.rank - 1))
    if y_scale is None:
        return y
    return requantized(ctx, y, y_scale, y_zero, y_zero.type.dtype)
