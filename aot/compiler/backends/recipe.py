"""A region as an ONNX model: the *recipe* a delegate runs (TensorRT builds engines from it,
onnxruntime runs it on the CPU).

The recipe is the region's canonical ops written back as ONNX (opset 17, which
TensorRT 10 and 11 both parse), weights included, with the precision written
into the graph: for ``fp16`` every float32 tensor inside becomes float16, the
weights are stored as float16 and Casts sit at the region boundary, so the
strongly typed TensorRT 11 (which has no FP16 builder flag) and TensorRT 10
build the same engine. int8 arrives as the model's own Q/DQ nodes.

One small function per canonical op, as in onnx's reference evaluator. The
recipe is plain ONNX, so on a machine without a GPU onnxruntime can run it and
prove the lowering against the host's result.

Shared by the TensorRT and onnxruntime backends: ``write_recipe`` takes the
export table (onnxruntime's extends ``EXPORTS`` with ops TensorRT does not take)
and how each weight is stored (inside the recipe, or as a placeholder for the
bundle's own blob, resolved at load).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.errors import BuildError
from aot.ir.graph import Graph, Node, Value
from aot.ir.names import NamePool
from aot.ir.ops import AVG_POOL_OPS, CONV_OPS, CONV_TRANSPOSE_OPS, MAX_POOL_OPS, REDUCE_OPS

OPSET = 17
PRECISIONS = ("fp32", "fp16", "int8")  # int8: float32 between explicit Q/DQ
NARROWED = {"fp16": "float16"}  # precision -> the dtype float32 tensors take inside the recipe


class RecipeWriter:
    """Builds one recipe; ``tensor(value)`` names a value, ``emit`` adds ONNX nodes."""

    def __init__(self, precision: str, label: str = "tensorrt"):
        self.label = label  # which backend's recipe, for errors
        if precision not in PRECISIONS:
            raise BuildError(f"precision {precision!r} is not supported (choose from {', '.join(PRECISIONS)})")
        self.narrow = NARROWED.get(precision)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[tuple[str, np.ndarray]] = []
        self.names: dict[int, str] = {}
        self._names = NamePool()

    # -- naming and types -----------------------------------------------------------
    def fresh(self, base: str) -> str:
        return self._names.take(base)

    def inner_dtype(self, dtype: str) -> str:
        """The dtype a tensor of ``dtype`` has inside the recipe."""
        return self.narrow if self.narrow and dtype == "float32" else dtype

    def tensor(self, value: Value) -> str:
        """The recipe's name for ``value``; constants become initializers on first use."""
        if id(value) not in self.names:
            if not value.is_constant:
                raise BuildError(f"{self.label} recipe: value {value.name!r} is used before it is defined")
            data = np.asarray(value.data)
            self.names[id(value)] = self.const(data.astype(self.inner_dtype(data.dtype.name)), value.name)
        return self.names[id(value)]

    def const(self, array: Any, base: str = "const") -> str:
        name = self.fresh(base)
        self.initializers.append((name, np.asarray(array)))
        return name

    def data_const(self, value: float, like: Value, base: str = "const") -> str:
        """A scalar of the dtype ``like`` has inside the recipe (Clip bounds, pad values)."""
        return self.const(np.array(value, dtype=self.inner_dtype(like.type.dtype)), base)

    def ints(self, values: Any, base: str) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), base)

    def emit(self, op_type: str, inputs: list[str], outputs: list[str] | None = None, **attrs: Any) -> str:
        outputs = outputs or [self.fresh(op_type.lower())]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=self.fresh(f"{op_type}_node"), **attrs))
        return outputs[0]

    def cast(self, name: str, to: str) -> str:
        return self.emit("Cast", [name], to=helper.np_dtype_to_tensor_dtype(np.dtype(to)))


Export = Callable[[RecipeWriter, Node, list[str], list[str]], None]
EXPORTS: dict[str, Export] = {}


def exports(*ops: str):
    def register(fn: Export) -> Export:
        for op in ops:
            EXPORTS[op] = fn
        return fn

    return register


def _simple(op_type: str, **fixed: Any) -> Export:
    return lambda w, node, ins, outs: w.emit(op_type, ins, outs, **fixed, **_renamed(node.attrs))


def _renamed(attrs: dict[str, Any]) -> dict[str, Any]:
    """Canonical attribute names that differ from ONNX's."""
    table = {"groups": "group"}
    return {table.get(k, k): v for k, v in attrs.items() if v is not None}


UNARY = {
    "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "erf": "Erf", "exp": "Exp", "log": "Log",
    "sqrt": "Sqrt", "reciprocal": "Reciprocal", "abs": "Abs", "negative": "Neg", "floor": "Floor",
    "ceil": "Ceil", "sin": "Sin", "cos": "Cos", "softplus": "Softplus", "softsign": "Softsign",
    "hard_swish": "HardSwish", "hard_sigmoid": "HardSigmoid", "leaky_relu": "LeakyRelu", "elu": "Elu",
    "softmax": "Softmax", "log_softmax": "LogSoftmax", "flatten": "Flatten", "concat": "Concat",
    "lrn": "LRN", "batch_norm": "BatchNormalization", "instance_norm": "InstanceNormalization",
    "layer_norm": "LayerNormalization",
}  # fmt: skip
BINARY = {
    "add": "Add", "subtract": "Sub", "multiply": "Mul", "divide": "Div", "maximum": "Max",
    "minimum": "Min", "power": "Pow", "prelu": "PRelu", "matmul": "MatMul",
}  # fmt: skip
for _op, _onnx in {**UNARY, **BINARY}.items():
    EXPORTS[_op] = _simple(_onnx)
#: ONNX's arithmetic takes no bool; over masks torch's a + b and max(a, b) are a logical or, a * b and min an and.
BOOL_LOGIC = {"add": "Or", "maximum": "Or", "multiply": "And", "minimum": "And"}


def _binary_or_logic(op: str, onnx_op: str) -> Export:
    def export(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
        if all(v.type.dtype == "bool" for v in node.inputs):
            w.emit(BOOL_LOGIC[op], ins, outs)
        else:
            w.emit(onnx_op, ins, outs, **_renamed(node.attrs))

    return export


for _op in BOOL_LOGIC:
    EXPORTS[_op] = _binary_or_logic(_op, BINARY[_op])


@exports(*CONV_OPS, *CONV_TRANSPOSE_OPS)
def _conv(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    op_type = "ConvTranspose" if node.op.startswith("conv_transpose") else "Conv"
    kernel_shape = list(node.inputs[1].type.shape[2:])
    w.emit(op_type, ins, outs, kernel_shape=kernel_shape, **_renamed(node.attrs))


@exports(*MAX_POOL_OPS, *AVG_POOL_OPS)
def _pool(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    attrs = dict(node.attrs)
    if node.op.startswith("avg"):
        attrs.pop("dilations")  # AveragePool has none before opset 19; the pattern admits only 1s
    w.emit("MaxPool" if node.op.startswith("max") else "AveragePool", ins, outs, **attrs)


@exports("dense")
def _dense(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    x, weight = node.inputs[:2]
    if x.type.rank == 2:
        w.emit("Gemm", ins, outs, transB=1)
        return
    if weight.is_constant:  # transposed once, here, rather than by TensorRT at every build
        transposed = w.const(np.asarray(weight.data).T.astype(w.inner_dtype(weight.type.dtype)), f"{weight.name}_t")
    else:
        transposed = w.emit("Transpose", [ins[1]], perm=[1, 0])
    if len(ins) == 2:
        w.emit("MatMul", [ins[0], transposed], outs)
    else:
        w.emit("Add", [w.emit("MatMul", [ins[0], transposed]), ins[2]], outs)


@exports("relu6", "clip")
def _clip(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    lo, hi = (0.0, 6.0) if node.op == "relu6" else (node.attrs["min"], node.attrs["max"])
    x = node.inputs[0]
    bounds = [
        w.data_const(lo, x, "clip_min") if lo is not None else "",
        w.data_const(hi, x, "clip_max") if hi is not None else "",
    ]
    w.emit("Clip", [ins[0], *bounds], outs)


@exports("gelu")
def _gelu(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    """Opset 17 has no Gelu: its decomposition, the form TensorRT recognises and fuses."""
    x = node.inputs[0]
    half, one = w.data_const(0.5, x, "half"), w.data_const(1.0, x, "one")
    if node.attrs["approximate"] == "tanh":
        cube = w.emit("Mul", [w.emit("Mul", [ins[0], ins[0]]), ins[0]])
        inner = w.emit("Add", [ins[0], w.emit("Mul", [cube, w.data_const(0.044715, x, "gelu_c")])])
        curve = w.emit("Tanh", [w.emit("Mul", [inner, w.data_const(math.sqrt(2 / math.pi), x, "gelu_k")])])
    else:
        curve = w.emit("Erf", [w.emit("Div", [ins[0], w.data_const(math.sqrt(2.0), x, "sqrt2")])])
    w.emit("Mul", [w.emit("Mul", [ins[0], half]), w.emit("Add", [curve, one])], outs)


@exports(*REDUCE_OPS)
def _reduce(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    op_type = {"reduce_mean": "ReduceMean", "reduce_max": "ReduceMax", "reduce_min": "ReduceMin",
               "reduce_prod": "ReduceProd", "reduce_sum": "ReduceSum"}[node.op]  # fmt: skip
    axes, keepdims = node.attrs["axes"], node.attrs["keepdims"]
    if node.inputs[0].type.dtype == "bool":  # any()/all() of a mask: ONNX reduces no bool, so over uint8 and back
        reduced = w.fresh(op_type.lower())
        _reduce_axes(w, op_type, [w.cast(ins[0], "uint8")], [reduced], axes, keepdims)
        w.emit("Cast", [reduced], outs, to=helper.np_dtype_to_tensor_dtype(np.dtype(node.outputs[0].type.dtype)))
        return
    _reduce_axes(w, op_type, ins, outs, axes, keepdims)


def _reduce_axes(w: RecipeWriter, op_type: str, ins: list[str], outs: list[str], axes: Any, keepdims: int) -> None:
    if op_type == "ReduceSum":  # its axes became an input in opset 13, the others' in 18
        w.emit(op_type, ins + ([w.ints(axes, "axes")] if axes is not None else []), outs, keepdims=keepdims)
    else:
        w.emit(op_type, ins, outs, keepdims=keepdims, **({"axes": list(axes)} if axes is not None else {}))


@exports("split")
def _split(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    w.emit("Split", [ins[0], w.ints(node.attrs["sizes"], "split")], outs, axis=node.attrs["axis"])


@exports("slice")
def _slice(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    a = node.attrs
    w.emit("Slice", [ins[0], *(w.ints(a[k], k) for k in ("starts", "ends", "axes", "steps"))], outs)


@exports("squeeze", "unsqueeze")
def _squeeze(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    axes = node.attrs["axes"]
    w.emit("Squeeze" if node.op == "squeeze" else "Unsqueeze", ins + ([w.ints(axes, "axes")] if axes else []), outs)


@exports("transpose")
def _transpose(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    perm = node.attrs["perm"]
    w.emit("Transpose", ins, outs, **({"perm": list(perm)} if perm is not None else {}))


@exports("reshape")
def _reshape(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    """To the ``shape`` attribute, or to a target computed in the recipe (``Shape`` -> ... -> ``Concat``)."""
    shape = node.attrs["shape"]
    if len(ins) > 1:
        target = ins[1] if node.inputs[1].type.dtype == "int64" else w.cast(ins[1], "int64")
    elif shape is not None:
        target = w.ints(shape, "shape")
    else:
        raise BuildError(f"{w.label} recipe: reshape {node.name!r} has no target shape")
    w.emit("Reshape", [ins[0], target], outs, allowzero=node.attrs["allowzero"])


@exports("pad")
def _pad(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    a = node.attrs
    value = [w.data_const(a["value"], node.inputs[0], "pad_value")] if a["mode"] == "constant" else []
    w.emit("Pad", [ins[0], w.ints(a["pads"], "pads"), *value], outs, mode=a["mode"])


@exports("resize")
def _resize(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    a = node.attrs
    scales = w.const(np.asarray(a["scales"], np.float32), "scales") if a["sizes"] is None else ""
    sizes = w.ints(a["sizes"], "sizes") if a["sizes"] is not None else ""
    w.emit(
        "Resize", [ins[0], "", scales, *([sizes] if sizes else [])], outs, mode=a["mode"],
        coordinate_transformation_mode=a["coordinate_transformation_mode"], nearest_mode=a["nearest_mode"],
    )  # fmt: skip


def _zero_point(w: RecipeWriter, node: Node, ins: list[str]) -> str:
    """TensorRT's Q/DQ are symmetric int8: an explicit zero point of 0 (ONNX defaults to uint8)."""
    if len(ins) > 2:
        return ins[2]
    return w.const(np.zeros(node.inputs[1].type.shape, np.int8), "zero_point")


def _scale(w: RecipeWriter, node: Node, ins: list[str]) -> str:
    """The Q/DQ's scale in float32, which QuantizeLinear and DequantizeLinear take before opset 19: the
    scale's own initializer, or a float32 copy of a narrowed one."""
    if w.inner_dtype(node.inputs[1].type.dtype) == "float32":
        return ins[1]
    return w.const(np.asarray(node.inputs[1].data, np.float32), "scale")


@exports("quantize")
def _quantize(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    # QuantizeLinear takes float32 before opset 19: narrowed activations are widened for it.
    x = w.cast(ins[0], "float32") if w.inner_dtype(node.inputs[0].type.dtype) != "float32" else ins[0]
    w.emit("QuantizeLinear", [x, _scale(w, node, ins), _zero_point(w, node, ins)], outs, axis=node.attrs["axis"])


@exports("dequantize")
def _dequantize(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    scale = _scale(w, node, ins)
    target = w.inner_dtype(node.outputs[0].type.dtype)
    out = outs if target == "float32" else None
    y = w.emit("DequantizeLinear", [ins[0], scale, _zero_point(w, node, ins)], out, axis=node.attrs["axis"])
    if target != "float32":
        w.emit("Cast", [y], outs, to=helper.np_dtype_to_tensor_dtype(np.dtype(target)))


def _value_info(name: str, value: Value, dtype: str) -> onnx.ValueInfoProto:
    dims = [d if isinstance(d, int) else str(d) for d in value.type.shape]
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), dims)


#: ``store(tensor, array)``: fill an initializer's data (its name, dtype and dims are set already).
StoreWeight = Callable[[onnx.TensorProto, np.ndarray], None]


def inline_weight(tensor: onnx.TensorProto, array: np.ndarray) -> None:
    """The weight's bytes inside the recipe (TensorRT's engine builder reads them from there)."""
    tensor.raw_data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def write_recipe(
    graph: Graph,
    precision: str = "fp32",
    *,
    exports: dict[str, Export] | None = None,
    store: StoreWeight = inline_weight,
    label: str = "tensorrt",
) -> onnx.ModelProto:
    """``graph`` (a region, see ``Region.as_graph``) as a checked ONNX model in ``precision``.

    Its inputs and outputs keep the names and dtypes the host exchanges with the
    region; a narrowed precision is cast on the way in and out. ``exports`` is the
    table of op lowerings (default ``EXPORTS``), ``store`` fills each weight's data
    and ``label`` names the backend in errors.
    """
    exports = EXPORTS if exports is None else exports
    w = RecipeWriter(precision, label)
    inputs, outputs = [], []
    for value in graph.inputs:
        name = w.fresh(value.name)
        inputs.append(_value_info(name, value, value.type.dtype))
        inner = w.inner_dtype(value.type.dtype)
        w.names[id(value)] = w.cast(name, inner) if inner != value.type.dtype else name
    boundary = {id(v): w.fresh(v.name) for v in graph.outputs}
    for node in graph.nodes:
        export = exports.get(node.op)
        if export is None:
            raise BuildError(f"{label} recipe: op {node.op!r} (node {node.name!r}) has no ONNX lowering")
        ins = [w.tensor(v) for v in node.inputs]
        outs = []
        for v in node.outputs:
            narrowed = id(v) in boundary and w.inner_dtype(v.type.dtype) != v.type.dtype
            outs.append(boundary[id(v)] if id(v) in boundary and not narrowed else w.fresh(v.name))
            w.names[id(v)] = outs[-1]
        export(w, node, ins, outs)
    for value in graph.outputs:
        name = boundary[id(value)]
        inner = w.tensor(value)
        if inner != name:  # narrowed inside, or an input/constant passed straight through
            w.emit("Cast", [inner], [name], to=helper.np_dtype_to_tensor_dtype(np.dtype(value.type.dtype)))
        outputs.append(_value_info(name, value, value.type.dtype))
    read = {name for node in w.nodes for name in node.input} | {o.name for o in outputs}
    w.initializers = [(name, array) for name, array in w.initializers if name in read]  # a narrowed scale's original
    _check(w, graph.name, inputs, outputs)
    onnx_graph = helper.make_graph(w.nodes, graph.name, inputs, outputs)
    for name, array in w.initializers:  # filled in place: protobuf would copy a finished tensor again
        tensor = onnx_graph.initializer.add()
        tensor.name = name
        tensor.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        tensor.dims.extend(array.shape)
        store(tensor, array)
    return _model(onnx_graph)


#: Opsets of the other domains a recipe may hold ops of (onnxruntime's contrib ops, aot/ir/contrib.py).
DOMAIN_OPSETS = {"com.microsoft": 1}


def _model(onnx_graph: onnx.GraphProto) -> onnx.ModelProto:
    domains = sorted({node.domain for node in onnx_graph.node if node.domain not in ("", "ai.onnx")})
    opsets = [helper.make_opsetid("", OPSET), *(helper.make_opsetid(d, DOMAIN_OPSETS[d]) for d in domains)]
    model = helper.make_model(onnx_graph, opset_imports=opsets, producer_name="aot")
    model.ir_version = 8  # what opset 17 needs; TensorRT 10's parser reads up to IR 10
    return model


def _check(w: RecipeWriter, name: str, inputs: list, outputs: list) -> None:
    """Check and shape-infer the recipe with its large weights stood in by typed inputs.

    The weights cannot change the verdict (their shapes and dtypes are kept) but
    dominate the cost: protobuf would copy hundreds of MB three times.
    """
    small, stand_ins = [], []
    for weight, array in w.initializers:
        if array.nbytes > 4096:
            dtype = helper.np_dtype_to_tensor_dtype(array.dtype)
            stand_ins.append(helper.make_tensor_value_info(weight, dtype, list(array.shape)))
        else:
            small.append(numpy_helper.from_array(np.asarray(array, order="C"), weight))  # 0-d stays 0-d
    skeleton = _model(helper.make_graph(w.nodes, name, inputs + stand_ins, outputs, small))
    try:
        onnx.checker.check_model(skeleton)
        onnx.shape_inference.infer_shapes(skeleton, check_type=True, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        first = str(e).strip().splitlines()[0]
        raise BuildError(f"{w.label} recipe for {name!r} is not valid ONNX: {first}") from None
