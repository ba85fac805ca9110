"""Where int8 goes: which ops quantize, which tensors need a range, and the Q/DQ rewrite.

The backends decide (each ``CompilerBackend.int8`` says why a node stays float on it,
or None when it computes the node in int8); an op quantizes when any int8 target
takes it. A quantized op reads its activation through quantize -> dequantize
(per tensor, symmetric, scale = amax / 127) and its weights as int8 constants
through dequantize (per output channel, symmetric); its output, after a relu,
relu6 or clip it fuses, is quantized the same way. Every consumer gets a
dequantize of its own, so a backend's pattern can take a whole
``dequantize -> op -> [activation] -> quantize`` chain as one composite (the
NPU's integer kernels) while the host, and any region that falls back, computes
the same graph in float between the Q/DQ pairs.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from aot.compiler.quantize.table import CalibrationTable
from aot.ir.graph import Graph, Node, Value
from aot.ir.ops import CONV_OPS

#: Ops an int8 target may compute in integers (the rest always run in float).
COMPUTE_OPS = frozenset({*CONV_OPS, "dense", "matmul"})
#: Activations fused into the op before its output is quantized.
FUSED_ACTIVATIONS = frozenset({"relu", "relu6", "clip"})
INT8_MAX = 127

Rule = Callable[[Node], "str | None"]


@dataclass
class QuantizedOp:
    node: Node
    #: The value quantized as the op's result: its own output, or the fused activation's.
    output: Value
    activation: Node | None


@dataclass
class QuantizationPlan:
    ops: list[QuantizedOp]
    #: Every tensor that needs a calibrated range (the quantized ops' activation inputs and results).
    tensors: list[Value]
    #: op -> reason -> count, for ops that stay float.
    floats: dict[str, collections.Counter] = field(default_factory=dict)

    def notes(self) -> list[str]:
        lines = []
        counts = collections.Counter(q.node.op for q in self.ops)
        done = ", ".join(f"{op} {n}" for op, n in sorted(counts.items())) or "none"
        lines.append(f"int8: {sum(counts.values())} ops compute in int8 ({done})")
        for op, reasons in sorted(self.floats.items()):
            for reason, n in sorted(reasons.items()):
                lines.append(f"int8: {op} x{n} stays float: {reason}")
        return lines


def matmul_weight_reason(rank: int, who: str) -> str:
    return f"matmul with a rank-{rank} weight; {who}'s int8 matmul takes a 2-d (K, N) weight"


def weight_reason(node: Node, who: str) -> str | None:
    """Why ``who`` (an int8 target) keeps ``node`` in float for its weight (operand 1), or None.

    What every int8 target asks of a weight: a constant, so its per-channel scales are known
    at build; float32; 2-d for a matmul, so a channel is a column.
    """
    weight = node.inputs[1]
    if not weight.is_constant:
        return f"{node.op} of two activations; {who}'s int8 kernels take constant weights"
    if node.op == "matmul" and weight.type.rank != 2:
        return matmul_weight_reason(weight.type.rank, who)
    if weight.type.dtype != "float32":
        return f"weights are {weight.type.dtype}"
    return None


def weight_axis(node: Node) -> int:
    """The weight axis of output channels: 0 for conv (O, I, ...) and dense (units, in), 1 for matmul (K, N)."""
    return 1 if node.op == "matmul" else 0


def _fused_activation(node: Node, consumers: dict[Value, list[Node]], outputs: set[int]) -> Node | None:
    out = node.outputs[0]
    users = consumers.get(out, [])
    if len(users) == 1 and id(out) not in outputs and users[0].op in FUSED_ACTIVATIONS:
        return users[0]
    return None


def plan_quantization(graph: Graph, rules: dict[str, Rule]) -> QuantizationPlan:
    """Which nodes compute in int8 (``rules``: each int8 target's reason to keep a node float)."""
    consumers = graph.consumers()
    outputs = {id(v) for v in graph.outputs}
    ops: list[QuantizedOp] = []
    floats: dict[str, collections.Counter] = {}
    tensors: dict[int, Value] = {}
    for node in graph.nodes:
        if node.op not in COMPUTE_OPS:
            continue
        reasons = {target: rule(node) for target, rule in rules.items()}
        if all(reasons.values()):
            why = "; ".join(f"{t}: {r}" for t, r in sorted(reasons.items()))
            floats.setdefault(node.op, collections.Counter())[why] += 1
            continue
        activation = _fused_activation(node, consumers, outputs)
        result = (activation or node).outputs[0]
        ops.append(QuantizedOp(node, result, activation))
        tensors.setdefault(id(node.inputs[0]), node.inputs[0])
        tensors.setdefault(id(result), result)
    for node in graph.nodes:
        if (
            node.op not in COMPUTE_OPS
            and node.op not in FUSED_ACTIVATIONS
            and node.op not in ("quantize", "dequantize")
        ):
            floats.setdefault(node.op, collections.Counter())["no int8 kernel on any target; runs in float"] += 1
    return QuantizationPlan(ops, list(tensors.values()), floats)


def activation_scale(amax: float) -> np.float32:
    return np.float32(amax / INT8_MAX if amax > 0 else 1.0)


def weight_scales(w: np.ndarray, axis: int) -> np.ndarray:
    """Per-channel symmetric scales; an all-zero channel borrows the largest scale (its int8 weights stay 0)."""
    other = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.abs(w).max(axis=other).astype(np.float64)
    scales = amax / INT8_MAX
    scales[scales == 0] = scales.max() if scales.max() > 0 else 1.0
    return scales.astype(np.float32)


def quantize_weights(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    scales = weight_scales(w, axis)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scales.reshape(shape)), -INT8_MAX, INT8_MAX).astype(np.int8)
    return q, scales


def insert_qdq(graph: Graph, plan: QuantizationPlan, table: CalibrationTable) -> None:
    """Rewrite ``graph`` in place: Q/DQ around every quantized op, int8 weights with per-channel scales."""
    consumers = graph.consumers()
    quantized_nodes = {id(q.node) for q in plan.ops}
    results = {id(q.output) for q in plan.ops}
    zero = np.zeros((), np.int8)
    for value in plan.tensors:
        scale = graph.constant(activation_scale(table.amax(value.name)), f"{value.name}_scale")
        zp = graph.constant(zero, f"{value.name}_zero_point")
        q = graph.op("quantize", value, scale, zp, dtype="int8", name=f"{value.name}_quantize")
        for user in consumers.get(value, []):
            if id(value) in results or id(user) in quantized_nodes:
                dq = graph.op("dequantize", q, scale, zp, name=f"{value.name}_dequantize")
                graph.replace_uses(value, dq, [user])
        if id(value) in results and any(v is value for v in graph.outputs):
            dq = graph.op("dequantize", q, scale, zp, name=f"{value.name}_dequantize")
            name = value.name
            value.name = graph.unique_name(f"{name}_float")
            dq.name = name  # the signature keeps the output's name
            graph.outputs = [dq if v is value else v for v in graph.outputs]
    for op in plan.ops:
        node = op.node
        w = node.inputs[1]
        axis = weight_axis(node)
        q, scales = quantize_weights(np.asarray(w.data, np.float32), axis)
        wq = graph.constant(q, f"{w.name}_int8")
        dq = graph.op(
            "dequantize", wq, graph.constant(scales, f"{w.name}_scale"),
            graph.constant(np.zeros(scales.shape, np.int8), f"{w.name}_zero_point"),
            axis=axis, name=f"{node.name}_weight_dequantize",
        )  # fmt: skip
        node.inputs[1] = dq
    graph.toposort()
