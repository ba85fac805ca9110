"""The recipe lowerings onnxruntime takes beyond TensorRT's: indexing, comparisons, casts.

``recipe.EXPORTS`` is what TensorRT's parser admits; onnxruntime's CPU provider runs
more of ONNX, and a model whose embedding lookup (Gather) or attention mask
(Where, Equal, Cast) stayed on the host would be cut into regions around them.
``ONNXRUNTIME_EXPORTS`` is both, and the onnxruntime backend admits exactly its keys.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from aot.compiler.backends.recipe import EXPORTS, Export, RecipeWriter, _simple
from aot.ir.graph import Node

EXTRA: dict[str, Export] = {
    **{op: _simple(onnx_op) for op, onnx_op in {
        "where": "Where", "equal": "Equal", "greater": "Greater", "greater_equal": "GreaterOrEqual",
        "less": "Less", "less_equal": "LessOrEqual", "logical_and": "And", "logical_or": "Or",
        "logical_xor": "Xor", "logical_not": "Not", "sign": "Sign", "tan": "Tan", "round": "Round",
        "gather": "Gather", "gather_elements": "GatherElements", "isnan": "IsNaN", "gather_nd": "GatherND",
        "dynamic_quantize": "DynamicQuantizeLinear",
    }.items()},
}  # fmt: skip


def _export(*ops: str):
    def register(fn: Export) -> Export:
        for op in ops:
            EXTRA[op] = fn
        return fn

    return register


@_export("cast")
def _cast(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    w.emit("Cast", ins, outs, to=helper.np_dtype_to_tensor_dtype(np.dtype(node.attrs["to"])))


@_export("expand")
def _expand(w: RecipeWriter, node: Node, ins: list[str], outs: list[str]) -> None:
    w.emit("Expand", [ins[0], w.ints(node.attrs["shape"], "shape")], outs)


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
