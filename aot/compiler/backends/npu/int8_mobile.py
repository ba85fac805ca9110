"""Quantized composites of the ops between convolutions, as integer kernels (runtime_lite/kernels/integer_mobile.py).

Each is ``dequantize -> op -> quantize`` (a concat: one dequantize per input):

* ``npu.int8_lut``: hard-swish / hard-sigmoid as a 256-entry table, filled by running the
  host's own dequantize, activation and quantize kernels on every int8 value, so the
  lookup equals the float Q/DQ graph exactly (any zero points);
* ``npu.int8_global_avg_pool``: the int32 sum over the spatial axes, requantized by
  ``s_x / (count * s_y)`` in Q31 fixed point;
* ``npu.int8_concat``: each input requantized by ``s_i / s_y`` (identity when equal), joined;
* ``npu.int8_move``: a layout op or slice between equal scales and zero points moves the
  int8 bytes themselves (dequantize then quantize at one scale is the identity).

The checks say why a chain stays in float: int8 operands, per-tensor scales, zero points
of 0 where the kernel's arithmetic is symmetric, equal scales for a move.
"""

from __future__ import annotations

import numpy as np

from aot.compiler.backends.npu.device import LAYOUT_OPS
from aot.compiler.backends.npu.int8 import Int8Kernel, _constant, _scalar
from aot.compiler.backends.npu.mobile import spatial_axes
from aot.compiler.pattern import is_const, is_op, wildcard
from aot.compiler.pattern_registry import PatternCheckContext, Rejected, reject
from aot.compiler.quantize.fixed_point import quantize_multiplier
from aot.ir.graph import Node
from runtime_lite.kernels import KERNELS

LUT_OPS = ("hard_swish", "hard_sigmoid")
MOVE_OPS = (*LAYOUT_OPS, "slice")
#: Inputs of a concat the int8 pattern matches (one alternative per count).
MAX_CONCAT_INPUTS = 8


def _dequantized():
    return is_op("dequantize")(wildcard(), is_const(), ...)


def _requantized(op_pattern):
    return is_op("quantize")(op_pattern, is_const(), ...)


def lut_pattern():
    return _requantized(is_op(*LUT_OPS)(_dequantized()))


def global_avg_pool_pattern():
    return _requantized(is_op("reduce_mean")(_dequantized()))


def move_pattern():
    return _requantized(is_op(*MOVE_OPS)(_dequantized()))


def concat_pattern():
    alternatives = [is_op("concat")(*(_dequantized() for _ in range(n))) for n in range(2, MAX_CONCAT_INPUTS + 1)]
    pattern = alternatives[0]
    for more in alternatives[1:]:
        pattern = pattern | more
    return _requantized(pattern)


def _parts(nodes: list[Node]) -> tuple[list[Node], Node, Node]:
    """(the dequantizes in input order, the op, the quantize) of a matched chain."""
    quantize = next(n for n in nodes if n.op == "quantize")
    op = quantize.inputs[0].producer
    return [v.producer for v in op.inputs], op, quantize


def _zero_point(node: Node) -> np.ndarray:
    return np.asarray(node.inputs[2].data) if len(node.inputs) > 2 else np.zeros((), np.int8)


def _int8_per_tensor(dequantizes: list[Node], quantize: Node, symmetric: bool) -> Rejected | bool:
    for node in (*dequantizes, quantize):
        if node.inputs[1].type.numel != 1:
            return reject(f"{node.op} '{node.name}' has a per-axis scale; the npu's int8 kernels take one per tensor")
        if symmetric and _zero_point(node).any():
            return reject(f"{node.op} '{node.name}' has a non-zero zero point; this npu integer kernel is symmetric")
    if any(d.inputs[0].type.dtype != "int8" for d in dequantizes) or quantize.outputs[0].type.dtype != "int8":
        return reject("the npu's integer kernels take and give int8")
    return True


def check_lut(ctx: PatternCheckContext) -> bool | Rejected:
    dequantizes, _, quantize = _parts(ctx.nodes)
    return _int8_per_tensor(dequantizes, quantize, symmetric=False)


def check_global_avg_pool(ctx: PatternCheckContext) -> bool | Rejected:
    dequantizes, op, quantize = _parts(ctx.nodes)
    if spatial_axes(op) is None:
        return reject(f"reduce_mean over axes {op.attrs['axes']}; the npu averages over the spatial axes only")
    return _int8_per_tensor(dequantizes, quantize, symmetric=True)


def check_concat(ctx: PatternCheckContext) -> bool | Rejected:
    dequantizes, _, quantize = _parts(ctx.nodes)
    return _int8_per_tensor(dequantizes, quantize, symmetric=True)


def check_move(ctx: PatternCheckContext) -> bool | Rejected:
    dequantizes, op, quantize = _parts(ctx.nodes)
    (dequantize,) = dequantizes
    verdict = _int8_per_tensor(dequantizes, quantize, symmetric=False)
    if not verdict:
        return verdict
    if len(op.inputs) > 1:
        return reject(f"{op.op} reads its target shape from a tensor; the npu takes it as a static attribute")
    s_x, s_y = _scalar(dequantize.inputs[1]), _scalar(quantize.inputs[1])
    if s_x != s_y or not np.array_equal(_zero_point(dequantize), _zero_point(quantize)):
        return reject(f"{op.op} between scales {s_x:.6g} and {s_y:.6g} (or zero points) that differ: not a pure move")
    return True


def _run(node: Node, *operands: np.ndarray) -> np.ndarray:
    """``node`` computed by its host kernel: what the host plan would compute for it."""
    data = [np.asarray(v.data) for v in node.inputs[1:]]
    return KERNELS[node.op].fn(*operands, *data, **node.attrs)


def lower_lut(nodes: list[Node]) -> Int8Kernel:
    (dequantize,), op, quantize = _parts(nodes)
    every_int8 = np.arange(-128, 128).astype(np.int8)
    table = _run(quantize, KERNELS[op.op].fn(_run(dequantize, every_int8), **op.attrs))
    table = _constant(f"{op.name}_table", np.ascontiguousarray(table, np.int8))
    return Int8Kernel("int8_lut", [dequantize.inputs[0], table], {}, op)


def lower_global_avg_pool(nodes: list[Node]) -> Int8Kernel:
    (dequantize,), op, quantize = _parts(nodes)
    axes = spatial_axes(op)
    count = int(np.prod([op.inputs[0].type.shape[a] for a in axes]))
    rescale = _scalar(dequantize.inputs[1]) / (count * _scalar(quantize.inputs[1]))
    multiplier, shift = quantize_multiplier(rescale, f"npu int8 average pool {op.name!r}")
    attrs = {"axes": axes, "keepdims": int(op.attrs["keepdims"]), "multiplier": int(multiplier[0]),
             "shift": int(shift[0]), "act_min": -128, "act_max": 127}  # fmt: skip
    return Int8Kernel("int8_mean", [dequantize.inputs[0]], attrs, op)


def lower_concat(nodes: list[Node]) -> Int8Kernel:
    dequantizes, op, quantize = _parts(nodes)
    s_y = _scalar(quantize.inputs[1])
    rescales = np.array([_scalar(d.inputs[1]) / s_y for d in dequantizes])
    multipliers, shifts = quantize_multiplier(rescales, f"npu int8 concat {op.name!r}")
    attrs = {"axis": op.attrs["axis"] % op.outputs[0].type.rank, "multipliers": [int(m) for m in multipliers],
             "shifts": [int(s) for s in shifts]}  # fmt: skip
    return Int8Kernel("int8_concat", [d.inputs[0] for d in dequantizes], attrs, op)


def lower_move(nodes: list[Node]) -> Int8Kernel:
    (dequantize,), op, _ = _parts(nodes)
    return Int8Kernel(op.op, [dequantize.inputs[0]], dict(op.attrs), op)


#: Composite name -> its lowering to one integer kernel.
LOWERINGS = {
    "npu.int8_lut": lower_lut,
    "npu.int8_global_avg_pool": lower_global_avg_pool,
    "npu.int8_concat": lower_concat,
    "npu.int8_move": lower_move,
}
