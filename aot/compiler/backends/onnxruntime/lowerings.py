"""The recipe lowerings onnxruntime takes beyond TensorRT's: indexing, comparisons, casts.

``recipe.EXPORTS`` is what TensorRT's parser admits; onnxruntime's CPU provider runs
more of ONNX, and a model whose embedding lookup (Gather) or attention mask
(Where, Equal, Cast) stayed on the host would be cut into regions around them.
``ONNXRUNTIME_EXPORTS`` is both, and the onnxruntime backend admits exactly its keys.
"""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from aot.compiler.backends.recipe import EXPORTS, Export, RecipeWriter, _simple
from aot.ir import contrib
from aot.ir.graph import Node

EXTRA: dict[str, Export] = {
    **{op: _simple(onnx_op) for op, onnx_op in {
        "where": "Where", "equal": "Equal", "greater": "Greater", "greater_equal": "GreaterOrEqual",
        "less": "Less", "less_equal": "LessOrEqual", "logical_and": "And", "logical_or": "Or",
        "logical_xor": "Xor", "logical_not": "Not", "sign": "Sign", "tan": "Tan", "round": "Round",
        "gather": "Gather", "gather_elements": "GatherElements", "isnan": "IsNaN", "gather_nd": "GatherND",
        "dynamic_quantize": "DynamicQuantizeLinear", "range": "Range",
    }.items()},
}  # fmt: skip


#: The ``recurrent`` op's activation names -> ONNX's.
RECURRENT_ACTIVATIONS = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu"}


def _export(*ops: str):
    def register(fn: Export) -> Export:
        for op in ops:
            EXTRA[op] = fn
        return fn

    return register


@_export("cast")
def _cast(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    w.emit("Cast", ins, outs, to=helper.np_dtype_to_tensor_dtype(np.dtype(node.attrs["to"])))


def _int64(w: RecipeWriter, node: Node, ins: list[str], i: int) -> str:
    """Input ``i`` (a run-time shape, start or end) as the int64 tensor ONNX takes there."""
    return ins[i] if node.inputs[i].type.dtype == "int64" else w.cast(ins[i], "int64")


@_export("expand")
def _expand(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    shape = _int64(w, node, ins, 1) if len(ins) > 1 else w.ints(node.attrs["shape"], "shape")
    w.emit("Expand", [ins[0], shape], outs)


@_export("constant_of_shape")
def _constant_of_shape(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    """A tensor of one value over a shape computed at run time (a detector's stride column, a recurrent layer's
    zero initial state): ONNX's ConstantOfShape, its value a one-element tensor of the output's dtype. The
    recipe check sizes it from the shape it follows, before each run, as it sizes an Expand."""
    value = np.asarray([node.attrs["value"]], dtype=np.dtype(node.attrs["dtype"]))
    w.emit("ConstantOfShape", [_int64(w, node, ins, 0)], outs, value=numpy_helper.from_array(value, "value"))


@_export("shape")
def _shape(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    """A shape read at run time: symbolic dims travel through the recipe as onnxruntime computes them."""
    end = node.attrs["end"]
    w.emit("Shape", ins, outs, start=node.attrs["start"], **({"end": end} if end is not None else {}))


@_export("dynamic_slice")
def _dynamic_slice(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    a = node.attrs
    bounds = [_int64(w, node, ins, i) for i in (1, 2)]
    w.emit("Slice", [ins[0], *bounds, w.ints(a["axes"], "axes"), w.ints(a["steps"], "steps")], outs)


@_export("tile")
def _tile(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    w.emit("Tile", [ins[0], w.ints(node.attrs["repeats"], "repeats")], outs)


@_export("argmax", "argmin")
def _arg(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    a = node.attrs
    w.emit("ArgMax" if node.op == "argmax" else "ArgMin", ins, outs, axis=a["axis"], keepdims=int(a["keepdims"]),
           select_last_index=int(a["select_last_index"]))  # fmt: skip


@_export("cumsum")
def _cumsum(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    a = node.attrs
    axis = w.const(np.asarray(a["axis"], np.int64), "axis")
    w.emit("CumSum", [ins[0], axis], outs, exclusive=int(a["exclusive"]), reverse=int(a["reverse"]))


@_export("isinf")
def _isinf(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    a = node.attrs
    w.emit("IsInf", ins, outs, detect_positive=int(a["detect_positive"]), detect_negative=int(a["detect_negative"]))


@_export("trilu")
def _trilu(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    k = w.const(np.asarray(node.attrs["k"], np.int64), "k")
    w.emit("Trilu", [ins[0], k], outs, upper=int(node.attrs["upper"]))


@_export("mod")
def _mod(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    w.emit("Mod", ins, outs, fmod=int(node.attrs["fmod"]))


@_export("dynamic_resize")
def _dynamic_resize(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    """A resize to sizes computed at run time (``Shape`` arithmetic in the recipe): Resize with a sizes input."""
    a = node.attrs
    w.emit("Resize", [ins[0], "", "", _int64(w, node, ins, 1)], outs, mode=a["mode"],
           coordinate_transformation_mode=a["coordinate_transformation_mode"], nearest_mode=a["nearest_mode"])  # fmt: skip


@_export("same_pad")
def _same_pad(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    """SAME padding of a size known only at run time, computed in the recipe as ``runtime_lite.kernels.geometry.
    same_pads`` computes it: out = ceil(size / s), total = max((out - 1) * s + extent - size, 0), the odd pixel at
    the end (SAME_UPPER) or the start (SAME_LOWER); then a constant Pad of the trailing spatial axes."""
    a = node.attrs
    nd, rank = len(a["kernel_shape"]), node.inputs[0].type.rank
    strides = w.ints(a["strides"], "strides")
    extent = w.ints([(k - 1) * d + 1 for k, d in zip(a["kernel_shape"], a["dilations"])], "extent")
    one, two, zero = (w.ints([v] * nd, name) for v, name in ((1, "one"), (2, "two"), (0, "zero")))
    size = w.emit("Shape", ins, start=rank - nd)
    out = w.emit("Div", [w.emit("Sub", [w.emit("Add", [size, strides]), one]), strides])
    span = w.emit("Add", [w.emit("Mul", [w.emit("Sub", [out, one]), strides]), extent])
    total = w.emit("Max", [w.emit("Sub", [span, size]), zero])
    small = w.emit("Div", [total, two])
    large = w.emit("Sub", [total, small])
    begins, ends = (large, small) if a["lower"] else (small, large)
    lead = w.ints([0] * (rank - nd), "lead")
    pads = w.emit("Concat", [lead, begins, lead, ends], axis=0)
    w.emit("Pad", [ins[0], pads, w.data_const(a["value"], node.inputs[0], "pad_value")], outs, mode="constant")


@_export("recurrent")
def _recurrent(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    """RNN / GRU / LSTM over a sequence length known only at run time: ONNX's own op, whose inputs the
    ``recurrent`` op keeps in ONNX's layout (x, W, R, B, then initial h, initial c and peepholes as flagged)."""
    a = node.attrs
    given = iter(ins[4:])
    slots = [*ins[:4], "", next(given) if a["initial_h"] else ""]
    if a["kind"] == "lstm":
        slots += [next(given) if a["initial_c"] else "", next(given) if a["peepholes"] else ""]
    while slots[-1] == "":
        slots.pop()
    attrs = {"hidden_size": a["hidden_size"], "direction": a["direction"],
             "activations": [RECURRENT_ACTIVATIONS[name] for name in a["activations"]]}  # fmt: skip
    if a["clip"] is not None:
        attrs["clip"] = float(a["clip"])
    if a["kind"] == "gru":
        attrs["linear_before_reset"] = int(a["linear_before_reset"])
    w.emit(a["kind"].upper() if a["kind"] != "lstm" else "LSTM", slots, outs, **attrs)


@_export(contrib.OP)
def _contrib(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    """The contrib node as the file wrote it: its domain, its attributes, a skipped optional input left empty."""
    a = node.attrs
    slots = [""] * (max(a["slots"]) + 1)
    for slot, name in zip(a["slots"], ins):
        slots[slot] = name
    w.emit(a["op_type"], slots, outs, domain=a["domain"], **contrib.attributes_of(a))


@_export("dense")
def _dense(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    """``x @ w.T (+ b)`` as Gemm(transB=1) over the weight as the host stores it (shared, never transposed).

    Inputs of rank > 2 are flattened to rows and the result reshaped back when those
    dims are static; otherwise the shared lowering (which stores a transposed copy).
    """
    x, out = node.inputs[0], node.outputs[0]
    if x.type.rank == 2:
        w.emit("Gemm", ins, outs, transB=1)
        return
    if x.type.rank < 2 or not all(isinstance(d, int) for d in out.type.shape):
        EXPORTS["dense"](w, node, ins, outs)
        return
    rows = w.emit("Reshape", [ins[0], w.ints([-1, x.type.shape[-1]], "rows")])
    product = w.emit("Gemm", [rows, *ins[1:]], transB=1)
    w.emit("Reshape", [product, w.ints(list(out.type.shape), "shape")], outs)


ONNXRUNTIME_EXPORTS: dict[str, Export] = {**EXPORTS, **EXTRA}
