"""What TensorRT takes: one pattern per op family, each with the check TensorRT's ONNX parser needs.

TensorRT fuses on its own when it builds the engine, so, as in TVM's
``partition_for_tensorrt``, the patterns are single ops and the work of the
partitioner is to grow the largest regions it can. The checks keep out what
the parser or the builder would reject: dtypes other than float32/float16 (int8
only through Q/DQ with a zero point of 0), shapes that are dynamic anywhere but
the batch dimension unless every symbolic dim is bounded (then each region's
inputs get an optimization profile from the bounds), dilated pooling, shapes computed at run time, and
attribute values the parser has no layer for.
"""

from __future__ import annotations

from collections.abc import Callable

from aot.compiler.backends.recipe import EXPORTS
from aot.compiler.pattern import is_const, is_op, wildcard
from aot.compiler.pattern_registry import (
    FusionPattern,
    PatternCheckContext,
    Rejected,
    all_of,
    register_patterns,
    reject,
)
from aot.compiler.quantize.insert import compute_op_reason
from aot.ir.graph import Node, Value
from aot.ir.ops import AVG_POOL_OPS, CONV_OPS, CONV_TRANSPOSE_OPS, MAX_POOL_OPS

FLOAT_DTYPES = frozenset({"float32", "float16"})
QUANTIZED_DTYPES = frozenset({"int8"})
MAX_RANK = 8

#: Ops with a pattern of their own below: weights fixed at build time, or attribute values checked.
OWN_PATTERN_OPS = frozenset(
    {
        *CONV_OPS,
        *CONV_TRANSPOSE_OPS,
        *MAX_POOL_OPS,
        *AVG_POOL_OPS,
        *("softmax", "log_softmax", "reshape", "pad", "batch_norm", "instance_norm", "resize"),
        *("quantize", "dequantize"),
    }
)
#: Every other op the recipe writer can lower: a single-op pattern with the plain check. TensorRT
#: admits exactly what ``recipe.EXPORTS`` writes, so the two cannot drift apart.
PLAIN_OPS = tuple(sorted(set(EXPORTS) - OWN_PATTERN_OPS))
RESIZE_MODES = frozenset({"nearest", "linear"})
PAD_MODES = frozenset({"constant", "reflect", "edge"})


def _static_but_batch(value: Value) -> bool:
    shape = value.type.shape
    return len(shape) <= MAX_RANK and all(isinstance(d, int) for d in shape[1:])


def _tensors(ctx: PatternCheckContext, dtypes: frozenset[str] = FLOAT_DTYPES) -> bool | Rejected:
    for v in ctx.values():
        if v.type.dtype not in dtypes:
            return reject(f"%{v.name} is {v.type.dtype}; tensorrt regions take {', '.join(sorted(dtypes))}")
        if len(v.type.shape) > MAX_RANK:
            return reject(f"%{v.name} has shape {v.type}: tensorrt takes rank <= {MAX_RANK}")
        if not _static_but_batch(v) and id(v) not in ctx.shape_bounds:  # bounded: its profile spans the bounds
            return reject(
                f"%{v.name} has shape {v.type}: only the batch dim may be symbolic unless every symbolic dim is "
                "bounded (--input x:1x3x32..1280x32..1280 gives each region an optimization profile)"
            )
    return True


def _attr(predicate: Callable[[dict], bool]) -> Callable[[PatternCheckContext], bool | Rejected]:
    def check(ctx: PatternCheckContext) -> bool | Rejected:
        node = ctx.root.producer
        if predicate(node.attrs):
            return True
        shown = ", ".join(f"{k}={v}" for k, v in node.attrs.items())
        return reject(f"{node.op} with {shown[:160]} is not supported by tensorrt's parser")

    return check


def _quantized(ctx: PatternCheckContext) -> bool | Rejected:
    """Symmetric int8: TensorRT's Q/DQ layers take a float scale and no (or a zero) zero point."""
    node = ctx.root.producer
    scale = node.inputs[1]
    zero_point = node.inputs[2] if len(node.inputs) > 2 else None
    if scale.type.dtype not in FLOAT_DTYPES:
        return reject(f"{node.op} scale is {scale.type.dtype}; tensorrt takes a float scale")
    if zero_point is not None and (zero_point.type.dtype != "int8" or zero_point.data.any()):
        return reject(f"{node.op} has a non-zero or non-int8 zero point; tensorrt quantizes symmetrically")
    return _tensors(ctx, FLOAT_DTYPES | QUANTIZED_DTYPES)


def int8_reason(node: Node) -> str | None:
    """Why TensorRT keeps ``node`` in float when quantizing, or None when it takes it in int8 (explicit Q/DQ).

    TensorRT fuses Q/DQ around convolutions and matrix products with constant
    weights into int8 kernels; the per-channel weight scales must be known at build.
    """
    return compute_op_reason(node, "tensorrt")


def _conv_weights(ctx: PatternCheckContext) -> bool | Rejected:
    """Float weights, or int8 weights through a symmetric dequantize (explicit quantization)."""
    dequantize = [n for n in ctx.nodes if n.op == "dequantize"]
    if not dequantize:
        return _tensors(ctx)
    zero_point = dequantize[0].inputs[2] if len(dequantize[0].inputs) > 2 else None
    if zero_point is not None and (zero_point.type.dtype != "int8" or zero_point.data.any()):
        return reject("quantized weights with a non-zero or non-int8 zero point; tensorrt quantizes symmetrically")
    return _tensors(ctx, FLOAT_DTYPES | QUANTIZED_DTYPES)


def _pattern(name: str, pattern, check=_tensors) -> FusionPattern:
    return FusionPattern(f"tensorrt.{name}", pattern, {"root": pattern}, check)


def tensorrt_patterns() -> list[FusionPattern]:
    """TensorRT's patterns (single ops: their order does not matter)."""
    patterns = []
    for conv in (*CONV_OPS, *CONV_TRANSPOSE_OPS):
        # TensorRT wants weights and bias fixed at build time: they go into the engine. Quantized
        # weights (int8 constants through a dequantize, per output channel) are fixed too.
        weights = is_const() | is_op("dequantize")(is_const(), is_const(), ...)
        patterns.append(
            _pattern(
                conv, is_op(conv)(wildcard(), weights) | is_op(conv)(wildcard(), weights, is_const()), _conv_weights
            )
        )
    for pool in (*MAX_POOL_OPS, *AVG_POOL_OPS):
        patterns.append(_pattern(pool, is_op(pool), all_of(_tensors, _attr(lambda a: set(a["dilations"]) == {1}))))
    patterns += [
        *(_pattern(op, is_op(op)) for op in PLAIN_OPS),
        _pattern("softmax", is_op("softmax", "log_softmax")),
        # A target shape known only at run time needs shape tensors TensorRT's profile cannot bound.
        _pattern("reshape", is_op("reshape")(wildcard())),
        _pattern("pad", is_op("pad"), all_of(_tensors, _attr(lambda a: a["mode"] in PAD_MODES))),
        _pattern("batch_norm", is_op("batch_norm")(wildcard(), is_const(), is_const(), is_const(), is_const())),
        _pattern("instance_norm", is_op("instance_norm")(wildcard(), is_const(), is_const())),
        _pattern("resize", is_op("resize"), all_of(_tensors, _attr(lambda a: a["mode"] in RESIZE_MODES))),
        _pattern("quantize", is_op("quantize")(wildcard(), is_const(), ...), _quantized),
        _pattern("dequantize", is_op("dequantize")(wildcard(), is_const(), ...), _quantized),
    ]
    return patterns


def register() -> None:
    register_patterns(list(reversed(tensorrt_patterns())))
