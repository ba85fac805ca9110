"""What the virtual NPU can run: its fusion patterns and the checks behind them.

Registered lowest priority first, so ``get_patterns_with_prefix("npu")`` lists
them in the order below (fused patterns first, quantize last). Unlike the TVM
example NPU, every pattern can match: ``dense`` is its own op, quantize and
dequantize take their scale (and zero point) as inputs, and relu6, sigmoid and
tanh are registered. Every check is real: dtypes the NPU supports, static
shapes, tensors that fit in DRAM, depthwise only when groups == channels, and no
intermediate value that escapes the match.
"""

from __future__ import annotations

from aot.compiler.backends.npu.device import DEFAULT_PROFILE, SUPPORTED_DTYPES
from aot.compiler.pattern import is_const, is_op, wildcard
from aot.compiler.pattern_registry import FusionPattern, PatternCheckContext, Rejected, register_patterns, reject


def _tensors_supported(ctx: PatternCheckContext) -> bool | Rejected:
    dram = DEFAULT_PROFILE.tiers[-1].bytes
    for value in ctx.values():
        t = value.type
        if t.dtype not in SUPPORTED_DTYPES:
            return reject(f"%{value.name} is {t.dtype}; the npu computes in {', '.join(sorted(SUPPORTED_DTYPES))}")
        if not t.is_static:
            return reject(f"%{value.name} has a symbolic shape {t}; the npu plans static shapes only")
        if t.nbytes > dram:
            return reject(f"%{value.name} takes {t.nbytes} bytes, more than the npu's DRAM ({dram})")
    return True


def _standard(ctx: PatternCheckContext) -> bool | Rejected:
    if ctx.intermediate_used_outside():
        return reject("a value inside the match is also read outside it")
    return _tensors_supported(ctx)


def _depthwise(ctx: PatternCheckContext) -> bool | Rejected:
    conv = ctx.annotated["conv"].producer
    x, w = conv.inputs[0].type, conv.inputs[1].type
    channels = x.shape[1]
    if not (conv.attrs["groups"] == channels > 1 and w.shape[1] == 1):
        return reject(f"groups {conv.attrs['groups']} with {channels} channels is not a depthwise convolution")
    return _standard(ctx)


def _quantize(ctx: PatternCheckContext) -> bool | Rejected:
    # int8/int16 only: the NPU has no unsigned integer path (uint8 models are requantised by the host).
    if ctx.root.type.dtype not in ("int8", "int16"):
        return reject(f"quantizes to {ctx.root.type.dtype}; the npu has int8 and int16 only")
    return _standard(ctx)


def _dequantize(ctx: PatternCheckContext) -> bool | Rejected:
    dtype = ctx.root.producer.inputs[0].type.dtype
    if dtype not in ("int8", "int16"):
        return reject(f"dequantizes {dtype}; the npu has int8 and int16 only")
    return _standard(ctx)


def _pattern(name: str, pattern, check=_standard, **annotations) -> FusionPattern:
    return FusionPattern(f"npu.{name}", pattern, {"root": pattern, **annotations}, check)


def npu_patterns() -> list[FusionPattern]:
    """The NPU's patterns, highest priority first."""
    conv2d = is_op("conv2d")(wildcard(), wildcard(), ...)
    matmul = is_op("matmul")(wildcard(), wildcard()) | is_op("dense")(wildcard(), wildcard(), ...)
    patterns = [
        _pattern("conv2d_relu_fused", is_op("relu")(conv2d), conv=conv2d),
        _pattern("matmul_relu_fused", is_op("relu")(matmul), matmul=matmul),
        _pattern("depthwise_conv2d", conv2d, _depthwise, conv=conv2d),
        _pattern("conv2d", conv2d),
        _pattern("conv1d", is_op("conv1d")(wildcard(), wildcard(), ...)),
        _pattern("matmul", is_op("matmul")(wildcard(), wildcard())),
        _pattern("dense", is_op("dense")(wildcard(), wildcard(), ...)),
        _pattern("avg_pool2d", is_op("avg_pool2d")(wildcard())),
        _pattern("max_pool2d", is_op("max_pool2d")(wildcard())),
        _pattern("batch_norm", is_op("batch_norm")(wildcard(), is_const(), is_const(), is_const(), is_const())),
        _pattern("softmax", is_op("softmax")(wildcard())),
        _pattern("gelu", is_op("gelu")(wildcard())),
        _pattern("relu", is_op("relu")(wildcard())),
        _pattern("relu6", is_op("relu6")(wildcard()) | is_op("clip")(wildcard()).has_attr(min=0.0, max=6.0)),
        _pattern("sigmoid", is_op("sigmoid")(wildcard())),
        _pattern("tanh", is_op("tanh")(wildcard())),
        _pattern("divide", is_op("divide")(wildcard(), wildcard())),
        _pattern("subtract", is_op("subtract")(wildcard(), wildcard())),
        _pattern("multiply", is_op("multiply")(wildcard(), wildcard())),
        _pattern("add", is_op("add")(wildcard(), wildcard())),
        _pattern("dequantize", is_op("dequantize")(wildcard(), is_const(), ...), _dequantize),
        _pattern("quantize", is_op("quantize")(wildcard(), is_const(), ...), _quantize),
    ]
    return patterns


def register() -> None:
    register_patterns(list(reversed(npu_patterns())))
