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

How the Q/DQ are written is an :class:`Int8Scheme`, chosen by the build from its int8
targets: TensorRT and the NPU take the symmetric one above; onnxruntime's integer kernels
want a ReLU-bounded result over [0, amax] (zero point -128, 8 bits instead of 7, so the
ReLU folds into the kernel's clamp) and biases as int32 at the scale x_scale * w_scale
(the QDQ form its QLinearConv / QGemm fusions take).

A scheme also says how matrix products quantize (``Int8Scheme.matmuls``): ``static`` as above;
``dynamic``, as onnxruntime's ``quantize_dynamic`` does for transformers, the activation's
range found at run time by ``dynamic_quantize`` (ONNX DynamicQuantizeLinear: uint8 over
[min(x, 0), max(x, 0)]) and the result left float, so nothing of it needs calibrating; or
``weight-only``: int8 weights, float activations (convolutions too). ``auto`` is
``dynamic`` for a transformer (a graph with layer normalization), ``static`` elsewhere.
Under ``dynamic`` and ``weight-only`` an embedding table (a ``gather`` from a constant
float32 matrix) is stored int8 too, per tensor, and dequantized after the lookup, as
``quantize_dynamic`` does: the lookup reads int8 rows, so it costs nothing at run time.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from aot.compiler.quantize.table import MIN_AMAX, CalibrationTable
from aot.ir.graph import Graph, Node, Value
from aot.ir.ops import CONV_OPS

#: Ops an int8 target may compute in integers (the rest always run in float).
COMPUTE_OPS = frozenset({*CONV_OPS, "dense", "matmul"})
#: Activations fused into the op before its output is quantized.
FUSED_ACTIVATIONS = frozenset({"relu", "relu6", "clip"})
INT8_MAX = 127
#: How ``Int8Scheme.matmuls`` may quantize matrix products (``auto`` is resolved per graph by ``resolve_scheme``).
MATMUL_MODES = ("auto", "static", "dynamic", "weight-only")
#: The ops ``dynamic`` quantizes at run time (convolutions keep calibrated ranges).
DYNAMIC_OPS = frozenset({"dense", "matmul"})
#: The smallest embedding table stored int8 (smaller ones stay float: they are not worth a dequantize).
EMBEDDING_ELEMENTS = 1 << 16
INT32 = np.iinfo(np.int32)


@dataclass(frozen=True)
class Int8Scheme:
    """How ``insert_qdq`` writes the quantized function (both fields False: symmetric int8 throughout)."""

    #: A result bounded below by 0 (after relu, relu6, clip(0, ...)) quantized over [0, amax] with zero point -128.
    unsigned_relu: bool = False
    #: Biases as int32 constants at the scale x_scale * w_scale (per channel), through a dequantize.
    int32_bias: bool = False
    #: How matmul and dense quantize: one of ``MATMUL_MODES`` (module docstring).
    matmuls: str = "static"

    def int8_embeddings(self) -> bool:
        """Whether embedding tables are stored int8 (the schemes that quantize matmuls without calibration)."""
        return self.matmuls in ("dynamic", "weight-only")

    def mode(self, node: Node) -> str:
        """How ``node`` (a quantized op) quantizes: ``static``, ``dynamic`` or ``weight-only``."""
        if self.matmuls == "weight-only" or (self.matmuls == "dynamic" and node.op in DYNAMIC_OPS):
            return self.matmuls
        return "static"


SYMMETRIC = Int8Scheme()


def is_embedding(node: Node) -> bool:
    """A lookup in a large constant float32 table along its rows (the tables ``int8_embeddings`` stores int8)."""
    table = node.inputs[0]
    return (node.op == "gather" and node.attrs["axis"] == 0 and table.is_constant and table.type.rank == 2
            and table.type.dtype == "float32" and int(np.prod(table.type.shape)) >= EMBEDDING_ELEMENTS)  # fmt: skip


def quantize_embeddings(graph: Graph) -> int:
    """Store each embedding table int8 (per tensor, symmetric) and dequantize the rows looked up; how many."""
    count = 0
    for node in [n for n in graph.nodes if is_embedding(n)]:
        table, indices = node.inputs
        data = np.asarray(table.data, np.float32)
        scale = activation_scale(float(np.abs(data).max()))
        q = np.clip(np.rint(data / scale), -INT8_MAX, INT8_MAX).astype(np.int8)
        rows = graph.op("gather", graph.constant(q, f"{table.name}_int8"), indices, axis=0, name=f"{node.name}_int8")
        looked_up = graph.op("dequantize", rows, graph.constant(scale, f"{table.name}_scale"),
                             graph.constant(np.zeros((), np.int8), f"{table.name}_zero_point"),
                             name=f"{node.name}_dequantize")  # fmt: skip
        graph.replace_uses(node.outputs[0], looked_up)
        graph.nodes.remove(node)
        count += 1
    return count


#: What lies between attention's scores (a product of two activations) and their softmax: scaling, masking,
#: casts and layout.
_SCORE_STEPS = frozenset({"multiply", "divide", "add", "subtract", "where", "cast", "reshape", "transpose"})


def _softmax_of_scores(node: Node) -> bool:
    """``node`` is a softmax over a matmul of two activations (Q Kt), reached through at most a few steps."""
    frontier, steps = [node.inputs[0]], 0
    while frontier and steps < 8:
        producer = frontier.pop().producer
        steps += 1
        if producer is None:
            continue
        if producer.op == "matmul" and not any(v.is_constant for v in producer.inputs):
            return True
        if producer.op in _SCORE_STEPS:
            frontier.extend(v for v in producer.inputs if not v.is_constant)
    return False


def is_transformer(graph: Graph) -> bool:
    """A graph ``auto`` quantizes dynamically: one with layer normalization or with attention (BERT-like encoders,
    ViTs, and decoders whose RMS norm is spelled out in elementwise ops: Llama, Mistral, Qwen2)."""
    return any(node.op == "layer_norm" or (node.op == "softmax" and _softmax_of_scores(node)) for node in graph.nodes)


def resolve_scheme(scheme: Int8Scheme, graph: Graph) -> Int8Scheme:
    """``scheme`` with ``matmuls="auto"`` made ``dynamic`` for a transformer, ``static`` elsewhere."""
    if scheme.matmuls != "auto":
        return scheme
    return dataclasses.replace(scheme, matmuls="dynamic" if is_transformer(graph) else "static")


Rule = Callable[[Node], "str | None"]
#: Why an op with no int8 kernel anywhere stays float (the start of its note).
NO_KERNEL = "no int8 kernel on any target"


@dataclass
class QuantizedOp:
    node: Node
    #: The value quantized as the op's result: its own output, or the fused activation's.
    output: Value
    activation: Node | None


@dataclass
class QuantizationPlan:
    ops: list[QuantizedOp]
    #: Every tensor that needs a calibrated range (the statically quantized ops' activation inputs and results).
    tensors: list[Value]
    #: op -> reason -> count, for ops that stay float.
    floats: dict[str, collections.Counter] = field(default_factory=dict)
    #: How the matrix products quantize (``Int8Scheme.matmuls``, resolved), for the notes.
    how: str = "static"

    def notes(self) -> list[str]:
        lines = []
        counts = collections.Counter(q.node.op for q in self.ops)
        done = ", ".join(f"{op} {n}" for op, n in sorted(counts.items())) or "none"
        lines.append(f"int8: {sum(counts.values())} ops compute in int8 ({done})")
        if self.ops and not self.tensors:
            lines.append(f"int8: matmuls {self.how}: no activation range to calibrate, no calibration needed")
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


def compute_op_reason(node: Node, who: str) -> str | None:
    """Why ``who`` keeps ``node`` in float, for a target whose int8 kernels are convolutions and matrix
    products over constant weights (TensorRT, onnxruntime), or None when it computes ``node`` in int8."""
    if node.op not in COMPUTE_OPS:
        return f"{who} computes {node.op} in float between Q/DQ"
    return weight_reason(node, who)


def weight_axis(node: Node) -> int:
    """The weight axis of output channels: 0 for conv (O, I, ...) and dense (units, in), 1 for matmul (K, N)."""
    return 1 if node.op == "matmul" else 0


def _fused_activation(node: Node, consumers: dict[Value, list[Node]], outputs: set[int]) -> Node | None:
    out = node.outputs[0]
    users = consumers.get(out, [])
    if len(users) == 1 and id(out) not in outputs and users[0].op in FUSED_ACTIVATIONS:
        return users[0]
    return None


def plan_quantization(graph: Graph, rules: dict[str, Rule], scheme: Int8Scheme = SYMMETRIC) -> QuantizationPlan:
    """Which nodes compute in int8 (``rules``: each int8 target's reason to keep a node float); only those
    ``scheme`` quantizes statically have tensors to calibrate (``scheme.matmuls`` resolved)."""
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
        if scheme.mode(node) == "static":
            tensors.setdefault(id(node.inputs[0]), node.inputs[0])
            tensors.setdefault(id(result), result)
    for node in graph.nodes:
        if scheme.int8_embeddings() and is_embedding(node):
            continue  # quantize_graph notes it
        if (
            node.op not in COMPUTE_OPS
            and node.op not in FUSED_ACTIVATIONS
            and node.op not in ("quantize", "dequantize")
            and any(v.type.dtype.startswith(("float", "bfloat")) for v in node.outputs)  # not shape arithmetic
        ):
            floats.setdefault(node.op, collections.Counter())[f"{NO_KERNEL}; runs in float"] += 1
    return QuantizationPlan(ops, list(tensors.values()), floats, scheme.matmuls)


def activation_scale(amax: float) -> np.float32:
    """amax / 127; a range too small to step (table.MIN_AMAX: the scale would be subnormal or 0, and quantizing
    would divide by it) is a zero range, scale 1, as for a tensor that is 0 everywhere."""
    return np.float32(amax / INT8_MAX if amax >= MIN_AMAX else 1.0)


def _lower_bound_zero(activation: Node | None) -> float | None:
    """The upper bound (inf when none) of a fused activation whose output is never below 0, else None."""
    if activation is None:
        return None
    if activation.op == "relu":
        return np.inf
    if activation.op == "relu6":
        return 6.0
    low, high = activation.attrs.get("min"), activation.attrs.get("max")
    return (np.inf if high is None else float(high)) if low is not None and float(low) == 0.0 else None


def unsigned_scale(amax: float, bound: float) -> np.float32:
    """The scale of [0, amax] over 255 steps, nudged so that 255 * scale stays within the activation's bound
    (onnxruntime folds a Clip into the quantize only when the quantized range lies inside it)."""
    scale = np.float32(amax / 255 if amax >= MIN_AMAX else 1.0 / 255)
    while np.float32(scale * np.float32(255)) > bound:
        scale = np.nextafter(scale, np.float32(0))
    return scale


def _activation_params(plan: QuantizationPlan, table: CalibrationTable, scheme: Int8Scheme) -> dict[int, tuple]:
    """id(tensor) -> (scale, zero point) of every tensor the plan quantizes."""
    bounds = {id(q.output): _lower_bound_zero(q.activation) for q in plan.ops}
    params = {}
    for value in plan.tensors:
        amax = table.amax(value.name)
        bound = bounds.get(id(value)) if scheme.unsigned_relu else None
        if bound is None:
            params[id(value)] = (activation_scale(amax), np.zeros((), np.int8))
        else:
            params[id(value)] = (unsigned_scale(amax, bound), np.full((), -128, np.int8))
    return params


def quantize_bias(bias: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``bias`` as int32 steps of ``scale`` (per channel), saturated to int32."""
    steps = np.rint(np.asarray(bias, np.float64) / np.asarray(scale, np.float64))
    return np.clip(steps, INT32.min, INT32.max).astype(np.int32)


def weight_scales(w: np.ndarray, axis: int) -> np.ndarray:
    """Per-channel symmetric scales; an all-zero channel borrows the largest scale (its int8 weights stay 0)."""
    other = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.abs(w).max(axis=other).astype(np.float64)
    scales = amax / INT8_MAX
    scales[scales == 0] = scales.max() if scales.max() > 0 else 1.0
    return scales.astype(np.float32)


def bias_fitting_scales(scales: np.ndarray, bias: np.ndarray, x_scale: float) -> np.ndarray:
    """``scales`` raised where an int32 bias at x_scale * w_scale would saturate.

    A channel with near-zero weights and a real bias (a dead channel after batch-norm
    folding: PP-OCR's recognizer has two) gets a weight scale so small that its bias
    needs more than 2**31 steps; clipped, its output is wrong by the whole bias. Its
    weight scale grows until the bias fits in half the int32 range (headroom for the
    accumulated products), as onnxruntime's own quantizer does; its weights round
    coarser, which for weights that small costs nothing.
    """
    need = np.abs(np.asarray(bias, np.float64)) / (float(x_scale) * (INT32.max // 2))
    return np.maximum(scales, need).astype(np.float32)


def quantize_weights(w: np.ndarray, axis: int, scales: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """int8 weights and their per-channel scales (``scales``: given, else ``weight_scales``)."""
    scales = weight_scales(w, axis) if scales is None else scales
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scales.reshape(shape)), -INT8_MAX, INT8_MAX).astype(np.int8)
    return q, scales


def _dense_as_matmul(graph: Graph, node: Node) -> None:
    """A dynamic or weight-only ``dense`` as ``matmul`` with its weight transposed once, int8 per column (then
    ``add`` of the bias): the form onnxruntime's integer matmuls take, without a transpose at every run."""
    q, scales = quantize_weights(np.asarray(node.inputs[1].data, np.float32).T, 1)
    w = node.inputs[1].name
    dq = graph.op("dequantize", graph.constant(q, f"{w}_int8"), graph.constant(scales, f"{w}_scale"),
                  graph.constant(np.zeros(scales.shape, np.int8), f"{w}_zero_point"), axis=1,
                  name=f"{node.name}_weight_dequantize")  # fmt: skip
    y = graph.op("matmul", node.inputs[0], dq, name=f"{node.name}_matmul")
    if len(node.inputs) > 2:
        y = graph.op("add", y, node.inputs[2], name=f"{node.name}_bias")
    out = node.outputs[0]
    name, out.name = out.name, graph.unique_name(f"{out.name}_dense")
    y.name = name  # a graph output keeps its name
    graph.replace_uses(out, y)
    graph.nodes.remove(node)


def insert_qdq(graph: Graph, plan: QuantizationPlan, table: CalibrationTable, scheme: Int8Scheme = SYMMETRIC) -> None:
    """Rewrite ``graph`` in place: Q/DQ around every statically quantized op, a run-time quantize before every
    dynamic one, int8 weights with per-channel scales for all (``scheme.matmuls`` resolved)."""
    consumers = graph.consumers()
    all_ops = [q.node for q in plan.ops]
    static = [q for q in plan.ops if scheme.mode(q.node) == "static"]
    quantized_nodes = {id(q.node) for q in static}
    results = {id(q.output) for q in static}
    ranged = {id(q.node.inputs[0]) for q in static} | results
    plan = QuantizationPlan(static, [v for v in plan.tensors if id(v) in ranged], plan.floats, plan.how)
    params = _activation_params(plan, table, scheme)
    input_scales = {id(q.node): params[id(q.node.inputs[0])][0] for q in plan.ops}  # before the rewrite
    for value in plan.tensors:
        scale = graph.constant(params[id(value)][0], f"{value.name}_scale")
        zp = graph.constant(params[id(value)][1], f"{value.name}_zero_point")
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
    dynamic: dict[int, Node] = {}  # one run-time quantize per activation, a dequantize per reader
    for node in all_ops:
        if scheme.mode(node) == "dynamic":
            x = node.inputs[0]
            if id(x) not in dynamic:
                dynamic[id(x)] = graph.add_node("dynamic_quantize", [x], name=f"{x.name}_dynamic_quantize")
            node.inputs[0] = graph.op("dequantize", *dynamic[id(x)].outputs, name=f"{x.name}_dequantize")
    for node in all_ops:
        if node.op == "dense" and id(node) not in quantized_nodes:
            _dense_as_matmul(graph, node)
            continue
        w = node.inputs[1]
        axis = weight_axis(node)
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        int32_bias = (
            scheme.int32_bias
            and id(node) in quantized_nodes  # a dynamic matmul's input scale is known only at run time
            and bias is not None
            and bias.is_constant
            and bias.type.dtype == "float32"
        )
        weights = np.asarray(w.data, np.float32)
        scales = weight_scales(weights, axis)
        if int32_bias:
            scales = bias_fitting_scales(scales, bias.data, input_scales[id(node)])
        q, scales = quantize_weights(weights, axis, scales)
        wq = graph.constant(q, f"{w.name}_int8")
        dq = graph.op(
            "dequantize", wq, graph.constant(scales, f"{w.name}_scale"),
            graph.constant(np.zeros(scales.shape, np.int8), f"{w.name}_zero_point"),
            axis=axis, name=f"{node.name}_weight_dequantize",
        )  # fmt: skip
        node.inputs[1] = dq
        if int32_bias:
            step = (input_scales[id(node)] * scales).astype(np.float32)
            node.inputs[2] = graph.op(
                "dequantize", graph.constant(quantize_bias(bias.data, step), f"{bias.name}_int32"),
                graph.constant(step, f"{bias.name}_scale"), graph.constant(np.zeros(step.shape, np.int32),
                                                                          f"{bias.name}_zero_point"),
                axis=0, name=f"{node.name}_bias_dequantize",
            )  # fmt: skip
    if scheme.int8_embeddings():
        quantize_embeddings(graph)
    graph.toposort()
