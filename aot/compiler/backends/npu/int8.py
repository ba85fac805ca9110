"""A quantized composite as one integer kernel: the NPU's int8 arithmetic, derived at build time.

``dequantize(x_q) -> conv/dense/matmul(., dequantize(w_q), bias) -> [relu|relu6|clip] -> quantize``
becomes ``int8_conv`` / ``int8_dense`` (runtime_lite/kernels/integer.py) over
``x_q``, the int8 weights and three per-channel int32 constants computed here:

* ``bias = round(b / (s_x * s_w[c]))``: the float bias in accumulator units;
* ``multiplier, shift``: ``s_x * s_w[c] / s_y`` in Q31 fixed point (``fixed_point.py``);
* the activation as a clamp of the int8 result: relu [0, 127], relu6 [0, round(6 / s_y)],
  clip(a, b) [round(a / s_y), round(b / s_y)], which equals quantizing after the activation.

All zero points are 0 (the pattern's check makes sure of it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aot.compiler.backends.npu.patterns import int8_roles
from aot.compiler.quantize.fixed_point import quantize_multiplier
from aot.ir.graph import Node, Value
from aot.ir.types import TensorType


@dataclass
class Int8Kernel:
    op: str  # int8_conv or int8_dense
    inputs: list[Value]  # x_q, w_q, bias, multiplier, shift
    attrs: dict
    anchor: Node


def _constant(name: str, data: np.ndarray) -> Value:
    return Value(name, TensorType(data.shape, data.dtype.name), data=np.ascontiguousarray(data))


def _scalar(value: Value) -> float:
    return float(np.asarray(value.data, np.float64).reshape(-1)[0])


def activation_bounds(activation: Node | None, scale: float) -> tuple[int, int]:
    """The fused activation as a clamp of the int8 result (quantize after the activation, rounding alike)."""
    low, high = -128.0, 127.0
    if activation is not None:
        if activation.op in ("relu", "relu6"):
            low = 0.0
        if activation.op == "relu6":
            high = np.rint(6.0 / scale)
        if activation.op == "clip":
            if activation.attrs["min"] is not None:
                low = np.rint(activation.attrs["min"] / scale)
            if activation.attrs["max"] is not None:
                high = np.rint(activation.attrs["max"] / scale)
    low, high = int(np.clip(low, -128, 127)), int(np.clip(high, -128, 127))
    return low, max(low, high)


def lower_int8(nodes: list[Node]) -> Int8Kernel:
    roles = int8_roles(nodes)
    compute = roles.compute
    x_q = roles.dequantize_x.inputs[0]
    s_x = _scalar(roles.dequantize_x.inputs[1])
    s_y = _scalar(roles.quantize.inputs[1])
    w_value = roles.dequantize_w.inputs[0]
    matmul = compute.op == "matmul"
    w_q = np.asarray(w_value.data)
    if matmul:  # (K, N) -> (N, K): dense's layout
        w_value = _constant(f"{compute.name}_weight_int8", np.ascontiguousarray(w_q.T))
    channels = w_value.type.shape[0]
    s_w = np.broadcast_to(np.asarray(roles.dequantize_w.inputs[1].data, np.float64).reshape(-1), (channels,))
    accumulator_scale = s_x * s_w
    bias = compute.inputs[2].data if len(compute.inputs) > 2 else np.zeros(channels, np.float32)
    bias_q = np.clip(np.rint(np.asarray(bias, np.float64) / accumulator_scale), -(2**31), 2**31 - 1).astype(np.int32)
    multiplier, shift = quantize_multiplier(accumulator_scale / s_y, f"npu int8 kernel {compute.name!r}")
    act_min, act_max = activation_bounds(roles.activation, s_y)
    inputs = [
        x_q,
        w_value,
        _constant(f"{compute.name}_bias_int32", bias_q),
        _constant(f"{compute.name}_multiplier", multiplier),
        _constant(f"{compute.name}_shift", shift),
    ]
    attrs = {"act_min": act_min, "act_max": act_max}
    if compute.op.startswith("conv"):
        op = "int8_conv"
        attrs = {**{k: compute.attrs[k] for k in ("strides", "pads", "dilations", "groups")}, **attrs}
    else:
        op = "int8_dense"
    return Int8Kernel(op, inputs, attrs, compute)
