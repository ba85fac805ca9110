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

from dataclasses import dataclass

import numpy as np

from aot.compiler.backends.npu.device import DEFAULT_PROFILE, LAYOUT_OPS, SUPPORTED_DTYPES
from aot.compiler.backends.npu.mobile import (
    check_conv_transpose,
    check_global_pool,
    check_layer_norm,
    check_layout,
    check_resize,
)
from aot.compiler.pattern import is_const, is_op, wildcard
from aot.compiler.pattern_registry import (
    Check,
    FusionPattern,
    PatternCheckContext,
    Rejected,
    all_of,
    register_patterns,
    reject,
)
from aot.compiler.quantize.insert import matmul_weight_reason, weight_reason
from aot.ir.graph import Node

#: What the NPU's integer kernels compute (runtime_lite/kernels/integer.py): conv1d/2d (grouped and
#: depthwise included) and matrix products with constant weights, with a fused relu, relu6 or clip.
INT8_OPS = frozenset({"conv1d", "conv2d", "dense", "matmul"})
INT8_ACTIVATIONS = ("relu", "relu6", "clip")


def int8_reason(node: Node) -> str | None:
    """Why the NPU keeps ``node`` in float when quantizing, or None when its integer kernels compute it."""
    if node.op not in INT8_OPS:
        return f"the npu has no int8 kernel for {node.op}"
    why = weight_reason(node, "the npu")
    if why is not None:
        return why
    if not all(v.type.is_static for v in (*node.inputs, *node.outputs)):
        return "symbolic shape; the npu plans static shapes only"
    return None


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


@dataclass(frozen=True)
class Int8Roles:
    """The nodes of a quantized composite by role (the codegen lowers them to one integer kernel)."""

    dequantize_x: Node
    dequantize_w: Node
    compute: Node
    activation: Node | None
    quantize: Node


def int8_roles(nodes: list[Node]) -> Int8Roles:
    compute = next(n for n in nodes if n.op in INT8_OPS)
    activation = next((n for n in nodes if n.op in INT8_ACTIVATIONS), None)
    quantize = next(n for n in nodes if n.op == "quantize")
    return Int8Roles(compute.inputs[0].producer, compute.inputs[1].producer, compute, activation, quantize)


def _symmetric_int8(ctx: PatternCheckContext) -> bool | Rejected:
    """The integer kernels' contract: int8 tensors, zero points of 0, per-tensor activation scales."""
    roles = int8_roles(ctx.nodes)
    dequantize_x, dequantize_w, quantize, compute = (
        roles.dequantize_x,
        roles.dequantize_w,
        roles.quantize,
        roles.compute,
    )
    for node in (dequantize_x, dequantize_w, quantize):
        if len(node.inputs) > 2 and np.asarray(node.inputs[2].data).any():
            return reject(f"{node.op} '{node.name}' has a non-zero zero point; the npu's integer path is symmetric")
    if dequantize_x.inputs[0].type.dtype != "int8" or dequantize_w.inputs[0].type.dtype != "int8":
        return reject("the npu's integer kernels take int8 operands")
    if quantize.outputs[0].type.dtype != "int8":
        return reject(f"quantizes to {quantize.outputs[0].type.dtype}; the npu's integer kernels write int8")
    for node in (dequantize_x, quantize):
        if node.inputs[1].type.numel != 1:
            return reject(f"{node.op} '{node.name}' has a per-axis scale; activations take one scale")
    weight = dequantize_w.inputs[0]
    if compute.op == "matmul" and weight.type.rank != 2:
        return reject(matmul_weight_reason(weight.type.rank, "the npu"))
    channels = compute.inputs[1].type.shape[1 if compute.op == "matmul" else 0]
    scale = dequantize_w.inputs[1]
    axis = dequantize_w.attrs["axis"] % max(compute.inputs[1].type.rank, 1)
    if scale.type.numel not in (1, channels) or (scale.type.numel > 1 and axis != (1 if compute.op == "matmul" else 0)):
        return reject("weight scales must be per tensor or per output channel")
    activation = roles.activation
    if activation is not None and activation.op == "clip":
        low, high = activation.attrs["min"], activation.attrs["max"]
        if low is not None and high is not None and low > high:
            return reject("clip with min > max")
    return _standard(ctx)


def _int8_pattern(compute):
    dequantized = is_op("dequantize")(wildcard(), is_const(), ...)
    weights = is_op("dequantize")(is_const(), is_const(), ...)
    op = compute(dequantized, weights) | compute(dequantized, weights, is_const())
    activated = op | is_op(*INT8_ACTIVATIONS)(op)
    return is_op("quantize")(activated, is_const(), ...)


def _and(check) -> Check:
    """An op-specific check, then the standard one (dtypes, static shapes, no escaping intermediate)."""
    return all_of(check, _standard)


def _pattern(name: str, pattern, check=_standard, **annotations) -> FusionPattern:
    return FusionPattern(f"npu.{name}", pattern, {"root": pattern, **annotations}, check)


def npu_patterns() -> list[FusionPattern]:
    """The NPU's patterns, highest priority first."""
    from aot.compiler.backends.npu import int8_mobile as q  # it lowers with int8.py, which imports this module

    conv2d = is_op("conv2d")(wildcard(), wildcard(), ...)
    matmul = is_op("matmul")(wildcard(), wildcard()) | is_op("dense")(wildcard(), wildcard(), ...)
    patterns = [
        # quantized composites, run as integer kernels: dequantize -> op -> [activation] -> quantize
        _pattern("int8_conv", _int8_pattern(is_op("conv1d", "conv2d")), _symmetric_int8),
        _pattern("int8_dense", _int8_pattern(is_op("dense", "matmul")), _symmetric_int8),
        _pattern("int8_lut", q.lut_pattern(), _and(q.check_lut)),
        _pattern("int8_global_avg_pool", q.global_avg_pool_pattern(), _and(q.check_global_avg_pool)),
        _pattern("int8_concat", q.concat_pattern(), _and(q.check_concat)),
        _pattern("int8_move", q.move_pattern(), _and(q.check_move)),
        _pattern("conv2d_relu_fused", is_op("relu")(conv2d), conv=conv2d),
        _pattern("matmul_relu_fused", is_op("relu")(matmul), matmul=matmul),
        _pattern("depthwise_conv2d", conv2d, _depthwise, conv=conv2d),
        _pattern("conv2d", conv2d),
        _pattern("conv1d", is_op("conv1d")(wildcard(), wildcard(), ...)),
        _pattern("matmul", is_op("matmul")(wildcard(), wildcard())),
        _pattern("dense", is_op("dense")(wildcard(), wildcard(), ...)),
        _pattern(
            "conv_transpose2d", is_op("conv_transpose2d")(wildcard(), wildcard(), ...), _and(check_conv_transpose)
        ),
        _pattern("avg_pool2d", is_op("avg_pool2d")(wildcard())),
        _pattern("global_avg_pool", is_op("reduce_mean")(wildcard()), _and(check_global_pool)),
        _pattern("max_pool2d", is_op("max_pool2d")(wildcard())),
        _pattern("batch_norm", is_op("batch_norm")(wildcard(), is_const(), is_const(), is_const(), is_const())),
        _pattern("softmax", is_op("softmax")(wildcard())),
        _pattern("gelu", is_op("gelu")(wildcard())),
        _pattern("relu", is_op("relu")(wildcard())),
        _pattern("relu6", is_op("relu6")(wildcard()) | is_op("clip")(wildcard()).has_attr(min=0.0, max=6.0)),
        _pattern("sigmoid", is_op("sigmoid")(wildcard())),
        _pattern("tanh", is_op("tanh")(wildcard())),
        _pattern("hard_swish", is_op("hard_swish")(wildcard())),
        _pattern("hard_sigmoid", is_op("hard_sigmoid")(wildcard())),
        _pattern("layer_norm", is_op("layer_norm")(wildcard(), is_const(), ...), _and(check_layer_norm)),
        _pattern("resize", is_op("resize")(wildcard()), _and(check_resize)),
        # data movement: the DMA engine, or a zero-cost view where the layout allows (dispatch.py)
        *(_pattern(op, is_op(op)(wildcard(), ...), _and(check_layout)) for op in LAYOUT_OPS),
        _pattern("concat", is_op("concat")(wildcard(), ...)),
        # one node, several outputs: nothing is intermediate, each piece is its own DMA (codegen.py)
        _pattern("split", is_op("split")(wildcard()), _tensors_supported),
        _pattern("slice", is_op("slice")(wildcard())),
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
