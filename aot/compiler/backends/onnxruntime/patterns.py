"""What onnxruntime takes: every op the recipe writer can lower, each with the check that keeps it honest.

onnxruntime fuses on its own when it builds the session, so, as for TensorRT, the
patterns are single ops and the partitioner grows the largest regions it can;
for most models one region holds the whole graph. The checks keep on the host
what the recipe cannot say or onnxruntime's CPU provider would not run as the
host does, and say why (``aot-build --print-graph``): dtypes outside
:data:`DTYPES`, convolution weights known only at run time, attribute values the
ONNX lowering has no form for. Symbolic dims and shapes computed at run time
(``Shape`` -> ``Gather`` -> ``Concat`` -> ``Reshape``) travel in the recipe as they are.
"""

from __future__ import annotations

from collections.abc import Callable

from aot.compiler.backends.onnxruntime.lowerings import ONNXRUNTIME_EXPORTS
from aot.compiler.pattern import is_const, is_op, wildcard
from aot.compiler.pattern_registry import (
    FusionPattern,
    PatternCheckContext,
    Rejected,
    all_of,
    register_patterns,
    reject,
)
from aot.ir.ops import AVG_POOL_OPS, CONV_OPS, CONV_TRANSPOSE_OPS

#: Tensor dtypes a recipe region exchanges and computes in (float16/float64 stay on the host:
#: onnxruntime's CPU provider lacks many of their kernels and would insert casts).
DTYPES = frozenset({"float32", "int64", "int32", "int8", "uint8", "bool"})
PAD_MODES = frozenset({"constant", "reflect", "edge"})

#: Ops with a pattern of their own below; every other key of ONNXRUNTIME_EXPORTS gets the plain check.
OWN_PATTERN_OPS = frozenset(
    {*CONV_OPS, *CONV_TRANSPOSE_OPS, *AVG_POOL_OPS, "pad", "quantize", "dequantize", "mod", "range"}
)
PLAIN_OPS = tuple(sorted(set(ONNXRUNTIME_EXPORTS) - OWN_PATTERN_OPS))


def _tensors(ctx: PatternCheckContext) -> bool | Rejected:
    for v in ctx.values():
        if v.type.dtype not in DTYPES:
            return reject(f"%{v.name} is {v.type.dtype}; onnxruntime regions take {', '.join(sorted(DTYPES))}")
    return True


def _attr(predicate: Callable[[dict], bool], why: str) -> Callable[[PatternCheckContext], bool | Rejected]:
    def check(ctx: PatternCheckContext) -> bool | Rejected:
        node = ctx.root.producer
        return True if predicate(node.attrs) else reject(f"{node.op}: {why}")

    return check


def _static_kernel(ctx: PatternCheckContext) -> bool | Rejected:
    weight = ctx.root.producer.inputs[1]
    if not all(isinstance(d, int) for d in weight.type.shape):
        return reject(f"%{weight.name} has shape {weight.type}: the recipe's kernel_shape must be static")
    return True


def _int8(ctx: PatternCheckContext) -> bool | Rejected:
    """Q/DQ in 8 bits with a float scale: int8 (a missing zero point becomes int8 0, the form the recipe
    writes), or uint8 with its zero point given (a model quantized with ``activation_type=QUInt8``, which
    onnxruntime fuses as it does int8); a constant int32 dequantized is a bias."""
    node = ctx.root.producer
    quantized = node.outputs[0] if node.op == "quantize" else node.inputs[0]
    dtype = quantized.type.dtype
    bias = node.op == "dequantize" and quantized.is_constant and dtype == "int32"
    eight_bit = dtype == "int8" or (dtype == "uint8" and len(node.inputs) > 2)
    if (not eight_bit and not bias) or node.inputs[1].type.dtype != "float32":
        return reject(f"{node.op} is {dtype} with a {node.inputs[1].type.dtype} scale; onnxruntime regions "
                      "quantize to int8, or uint8 with a zero point, with a float32 scale")  # fmt: skip
    return _tensors(ctx)


def _dynamic(ctx: PatternCheckContext) -> bool | Rejected:
    """A dequantize of what ``dynamic_quantize`` found at run time (uint8, its scale and zero point)."""
    node = ctx.root.producer
    source = node.inputs[0].producer
    if source is None or source.op != "dynamic_quantize" or any(v.producer is not source for v in node.inputs):
        return reject("dequantize of a run-time scale: onnxruntime regions take it only from dynamic_quantize")
    return _tensors(ctx)


def _integer_or_fmod(ctx: PatternCheckContext) -> bool | Rejected:
    """Floor modulo (``fmod=0``) of floats is ONNX only from opset 28: onnxruntime takes the opset-17 recipe,
    then fails every run of it (the region never reaches its host plan), so those stay on the host."""
    node = ctx.root.producer
    if not node.attrs["fmod"] and node.inputs[0].type.dtype.startswith("float"):
        return reject(f"mod: floor modulo (fmod=0) of {node.inputs[0].type.dtype} needs opset 28; recipes are 17")
    return _tensors(ctx)


def _scalar_bounds(ctx: PatternCheckContext) -> bool | Rejected:
    """ONNX's Range takes three scalars of one type; a position index (``arange``) kept in the region lets the
    recipe check follow the shapes computed from it (an attention mask's Expand) instead of cutting the region."""
    node = ctx.root.producer
    if any(v.type.rank != 0 or v.type.dtype != node.inputs[0].type.dtype for v in node.inputs):
        return reject(
            f"range of {', '.join(str(v.type) for v in node.inputs)}; ONNX's Range takes three scalars of one type"
        )
    return _tensors(ctx)


def _pattern(name: str, pattern, check=_tensors) -> FusionPattern:
    return FusionPattern(f"onnxruntime.{name}", pattern, {"root": pattern}, check)


def onnxruntime_patterns() -> list[FusionPattern]:
    """onnxruntime's patterns (single ops: their order does not matter)."""
    patterns = [_pattern(op, is_op(op)) for op in PLAIN_OPS]
    for conv in (*CONV_OPS, *CONV_TRANSPOSE_OPS):
        patterns.append(_pattern(conv, is_op(conv), all_of(_tensors, _static_kernel)))
    for pool in AVG_POOL_OPS:  # AveragePool has no dilations before opset 19: the recipe drops them
        patterns.append(_pattern(pool, is_op(pool), all_of(_tensors, _attr(lambda a: set(a["dilations"]) == {1},
                                                                         "dilated average pooling"))))  # fmt: skip
    patterns += [
        _pattern("pad", is_op("pad"), all_of(_tensors, _attr(lambda a: a["mode"] in PAD_MODES, "pad mode"))),
        _pattern("mod", is_op("mod"), _integer_or_fmod),
        _pattern("range", is_op("range"), _scalar_bounds),
        _pattern("quantize", is_op("quantize")(wildcard(), is_const(), ...), _int8),
        _pattern("dequantize", is_op("dequantize")(wildcard(), is_const(), ...), _int8),
        _pattern("dequantize_dynamic", is_op("dequantize")(wildcard(), wildcard(), wildcard()), _dynamic),
    ]
    return patterns


def register() -> None:
    register_patterns(list(reversed(onnxruntime_patterns())))
