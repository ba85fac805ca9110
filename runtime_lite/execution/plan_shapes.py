"""The host plan's output shapes, derived at load from the signature, and checked against it.

``check_outputs`` refuses an output that is not what the signature declares, but only
after the run made it: a hostile plan that ends in ``tile`` or ``expand`` computes a
1.6 GB output for a declared ``[2, 3]`` first. This walk follows shapes (never values,
never memory) through the instructions whose result shape is a function of their
operands' shapes, their attributes and the plan's constants, from the signature's static
input dims; a slot whose shape it cannot follow (a symbolic dim, a data-dependent op, a
backend that does not declare its results) is unknown, and so is everything computed
from it. An output whose shape is known and differs from the signature is a
``BundleError`` at load, naming the output. What stays unknown is checked at run as
before, after the run's budgets bounded what it could allocate.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from runtime_lite.errors import BundleError
from runtime_lite.format.records import Instruction
from runtime_lite.format.signature import TensorSpec
from runtime_lite.kernels.pool import _pool_geometry
from runtime_lite.kernels.shape import MAX_SHAPE_ENTRIES, flatten_axis, onnx_slice, resolve_reshape

Shape = tuple[int, ...]
#: A rule: operand shapes (None where unknown), the plan's constant values by operand (None where not
#: a constant), the attributes -> the result shapes, or None where they cannot be known at load.
Rule = Callable[[list, list, dict], "list[Shape] | None"]

#: Constants up to this many entries are read as values (a reshape's target, an expand's shape).
MAX_VALUE_ENTRIES = MAX_SHAPE_ENTRIES


def _known(shapes: list, count: int = 1) -> bool:
    return len(shapes) >= count and all(s is not None for s in shapes[:count])


def _axis(axis: int, rank: int) -> int:
    """``axis`` in ``0..rank-1``; ValueError (the walk then leaves the result unknown) where numpy refuses it."""
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} of rank {rank}")
    return axis % rank


def _same_as_first(shapes, values, attrs):
    return [shapes[0]] if _known(shapes) else None


def _broadcast(shapes, values, attrs):
    return [tuple(np.broadcast_shapes(*shapes))] if shapes and _known(shapes, len(shapes)) else None


def _dims(value: Any) -> tuple[int, ...] | None:
    if value is None or np.size(value) > MAX_VALUE_ENTRIES:
        return None
    return tuple(int(d) for d in np.asarray(value).reshape(-1))


def _reshape(shapes, values, attrs):
    target = _dims(values[1]) if len(values) > 1 else tuple(attrs["shape"])
    return [resolve_reshape(shapes[0], target, attrs.get("allowzero", 0))] if _known(shapes) and target else None


def _flatten(shapes, values, attrs):
    if not _known(shapes):
        return None
    x = shapes[0]
    axis = flatten_axis(attrs["axis"], len(x))
    return [(math.prod(x[:axis]), math.prod(x[axis:]))]


def _transpose(shapes, values, attrs):
    perm = attrs["perm"]
    if not _known(shapes):
        return None
    perm = range(len(shapes[0]) - 1, -1, -1) if perm is None else perm
    return [tuple(shapes[0][p] for p in perm)]


def _unsqueeze(shapes, values, attrs):
    if not _known(shapes):
        return None
    rank = len(shapes[0]) + len(attrs["axes"])
    axes = sorted(_axis(a, rank) for a in attrs["axes"])
    dims = list(shapes[0])
    for a in axes:
        dims.insert(a, 1)
    return [tuple(dims)]


def _squeeze(shapes, values, attrs):
    if not _known(shapes):
        return None
    x, axes = shapes[0], attrs["axes"]
    drop = {i for i, d in enumerate(x) if d == 1} if axes is None else {_axis(a, len(x)) for a in axes}
    return [tuple(d for i, d in enumerate(x) if i not in drop)]


def _expand(shapes, values, attrs):
    target = _dims(values[1]) if len(values) > 1 else tuple(attrs["shape"])
    return [tuple(np.broadcast_shapes(shapes[0], target))] if _known(shapes) and target is not None else None


def _tile(shapes, values, attrs):
    repeats = tuple(int(r) for r in attrs["repeats"])
    if not _known(shapes) or len(repeats) != len(shapes[0]):
        return None
    return [tuple(d * r for d, r in zip(shapes[0], repeats))]


def _concat(shapes, values, attrs):
    if not _known(shapes, len(shapes)):
        return None
    axis = _axis(attrs["axis"], len(shapes[0]))
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [tuple(out)]


def _pad(shapes, values, attrs):
    pads = attrs["pads"]
    if not _known(shapes) or len(pads) != 2 * len(shapes[0]):
        return None
    rank = len(shapes[0])
    return [tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(shapes[0]))]


def _slice(shapes, values, attrs):
    if not _known(shapes):
        return None
    dims = list(shapes[0])
    for start, end, axis, step in zip(attrs["starts"], attrs["ends"], attrs["axes"], attrs["steps"]):
        dims[axis] = len(range(dims[axis])[onnx_slice(dims[axis], start, end, step)])
    return [tuple(dims)]


def _resize(shapes, values, attrs):
    if not _known(shapes):
        return None
    sizes, scales = attrs["sizes"], attrs["scales"]
    if sizes is not None:
        return [tuple(int(s) for s in sizes)]
    return [tuple(int(np.floor(d * s)) for d, s in zip(shapes[0], scales))]


def _matmul(shapes, values, attrs):
    from runtime_lite.kernels.linalg import matmul_shape  # with the GEMM: imported where a plan has a matmul

    return [matmul_shape(shapes[0], shapes[1])] if _known(shapes, 2) else None


def _dense(shapes, values, attrs):
    return [shapes[0][:-1] + shapes[1][:1]] if _known(shapes, 2) else None


def _proxy(shape: Shape) -> np.ndarray:
    """An array of ``shape`` that holds no memory (every stride 0), for the kernels' own geometry helpers."""
    return np.broadcast_to(np.zeros((), np.float32), shape)


def _conv(shapes, values, attrs):
    if not _known(shapes, 2):
        return None
    from runtime_lite.kernels.conv import _conv_geometry  # with the GEMM: imported where a plan has a conv

    x, w = _proxy(shapes[0]), _proxy(shapes[1])
    b = _proxy(shapes[2]) if len(shapes) > 2 and shapes[2] is not None else None
    _, spatial = _conv_geometry(x, w, b, attrs["strides"], attrs["pads"], attrs["dilations"], attrs["groups"])
    return [(shapes[0][0], shapes[1][0], *spatial)]


def _pool(shapes, values, attrs):
    if not _known(shapes):
        return None
    args = (attrs[k] for k in ("kernel_shape", "strides", "pads", "dilations", "ceil_mode"))
    spatial, _ = _pool_geometry(_proxy(shapes[0]), *args)
    return [shapes[0][:2] + tuple(spatial)]


def _reduce(shapes, values, attrs):
    if not _known(shapes):
        return None
    x, axes = shapes[0], attrs["axes"]
    reduced = set(range(len(x))) if axes is None else {_axis(a, len(x)) for a in axes}
    if attrs["keepdims"]:
        return [tuple(1 if i in reduced else d for i, d in enumerate(x))]
    return [tuple(d for i, d in enumerate(x) if i not in reduced)]


def _conv_transpose(shapes, values, attrs):
    if not _known(shapes, 2):
        return None
    x, w = shapes[0], shapes[1]
    strides, pads, dilations, extra = attrs["strides"], attrs["pads"], attrs["dilations"], attrs["output_padding"]
    nd = len(w) - 2
    if len(x) != nd + 2 or len(pads) != 2 * nd:
        return None
    spatial = (
        strides[i] * (x[2 + i] - 1) + dilations[i] * (w[2 + i] - 1) + 1 + extra[i] - pads[i] - pads[i + nd]
        for i in range(nd)
    )
    return [(x[0], w[1] * attrs["groups"], *spatial)]


def _gather(shapes, values, attrs):
    if not _known(shapes, 2):
        return None
    data, axis = shapes[0], _axis(attrs["axis"], len(shapes[0]))
    return [data[:axis] + shapes[1] + data[axis + 1 :]]


def _elementwise_ops() -> dict[str, Rule]:
    """Ops whose result has operand 0's shape, or the operands' broadcast shape: read off their declared cost."""
    from runtime_lite.kernels import KERNELS

    rules: dict[str, Rule] = {}
    for name, kernel in KERNELS.items():
        cost = getattr(kernel.cost, "__qualname__", "")
        if cost.startswith("like."):
            rules[name] = _same_as_first
        elif cost.startswith("ufunc_cost."):
            rules[name] = _broadcast
    return rules


@functools.cache
def _rules() -> dict[str, Rule]:
    """Each op's rule, made on first use: the elementwise ones are read off the kernel registry, whose import
    a plan of backend calls alone (one onnxruntime region) never needs."""
    return {**_elementwise_ops(), **_SHAPE_RULES}


def __getattr__(name: str) -> Any:
    if name == "RULES":
        return _rules()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_SHAPE_RULES: dict[str, Rule] = {
    **dict.fromkeys(["cast", "isinf", "softmax", "log_softmax", "erf", "gelu", "elu", "leaky_relu"], _same_as_first),
    **dict.fromkeys(["quantize", "dequantize", "reciprocal", "cumsum", "trilu", "layer_norm"], _same_as_first),
    **dict.fromkeys(["divide", "power", "mod", "where"], _broadcast),
    "reshape": _reshape,
    "flatten": _flatten,
    "transpose": _transpose,
    "unsqueeze": _unsqueeze,
    "squeeze": _squeeze,
    "expand": _expand,
    "tile": _tile,
    "concat": _concat,
    "pad": _pad,
    "slice": _slice,
    "resize": _resize,
    "matmul": _matmul,
    "dense": _dense,
    "gather": _gather,
    **dict.fromkeys(["conv_transpose1d", "conv_transpose2d", "conv_transpose3d"], _conv_transpose),
    **dict.fromkeys(["conv1d", "conv2d", "conv3d"], _conv),
    **dict.fromkeys(["max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d"], _pool),
    **dict.fromkeys(["reduce_mean", "reduce_sum", "reduce_max", "reduce_min", "reduce_prod"], _reduce),
}


def _result_shapes(ins: Instruction, shapes: list, values: list, module_shapes: Callable | None) -> list | None:
    rule = (lambda *_: module_shapes(ins)) if module_shapes is not None else _rules().get(ins.op)
    if rule is None:
        return None
    try:
        found = rule(shapes, values, ins.attrs)
    except Exception:  # noqa: BLE001 - attributes or sizes the kernel refuses at run, where its error names them
        return None
    if found is None or len(found) != len(ins.outputs) or any(min(s, default=0) < 0 for s in found):
        return None
    return found


def check_output_shapes(
    instructions: Sequence[Instruction],
    input_slots: Sequence[int],
    output_slots: Sequence[int],
    constants: dict[int, np.ndarray],
    signature: tuple[Sequence[TensorSpec], Sequence[TensorSpec]],
    module_shapes: Callable[[Instruction], list | None],
) -> None:
    """Refuse (BundleError) a plan whose outputs, followed from the signature's static inputs, differ from it.

    ``constants``: the plan's constants by slot; ``module_shapes``: a backend call's result
    shapes where its backend declares them (else None).
    """
    inputs, outputs = signature
    shapes: dict[int, Shape | None] = {slot: array.shape for slot, array in constants.items()}
    values: dict[int, np.ndarray] = dict(constants)
    for slot, spec in zip(input_slots, inputs):
        shapes[slot] = spec.shape if all(type(d) is int for d in spec.shape) else None
        values.pop(slot, None)
    for ins in instructions:
        operands = [shapes.get(s) for s in ins.inputs]
        found = _result_shapes(
            ins, operands, [values.get(s) for s in ins.inputs], module_shapes if ins.op == "call_module" else None
        )
        for k, slot in enumerate(ins.outputs):
            shapes[slot] = None if found is None else tuple(found[k])
            values.pop(slot, None)
    for i, (slot, spec) in enumerate(zip(output_slots, outputs)):
        shape = shapes.get(slot)
        if shape is None:
            continue
        if len(shape) != len(spec.shape) or any(type(d) is int and d != s for d, s in zip(spec.shape, shape)):
            raise BundleError(
                f"bundle field 'plan.outputs[{i}]': the plan makes output {spec.name!r} {list(shape)} from the "
                f"signature's inputs, the signature declares [{','.join(str(d) for d in spec.shape)}]"
            )
