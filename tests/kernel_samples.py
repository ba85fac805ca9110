"""One representative call of every host kernel: operands and attributes (the OpDef defaults filled in).

Used by tests/test_kernel_budgets.py to prove each kernel's declared ``cost`` bounds what
it really allocates (traced by tracemalloc, which sees numpy's buffers). Sizes are a few
hundred kB so numpy's fixed overheads (array headers, ufunc buffers) stay small next to them.
A kernel added without a sample here fails that test.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aot.ir.ops import OPS, REQUIRED

_rng = np.random.default_rng(0)


def _f(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return _rng.standard_normal(shape).astype(dtype)


X = (2, 16, 96, 96)  # 1.2 MB of float32
UNARY = ["exp", "log", "sqrt", "negative", "abs", "floor", "ceil", "round", "sign", "sin", "cos", "tan", "reciprocal",
         "relu", "relu6", "leaky_relu", "sigmoid", "tanh", "hard_sigmoid", "hard_swish", "softplus", "softsign", "erf",
         "gelu", "elu", "softmax", "log_softmax", "clip", "copy", "isnan", "isinf", "cumsum", "trilu",
         "reduce_mean", "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin",
         "flatten", "transpose", "squeeze", "lrn"]  # fmt: skip
BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "mod", "power", "equal", "less", "less_equal",
          "greater", "greater_equal"]  # fmt: skip
LOGICAL = ["logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"]


def samples() -> dict[str, tuple[list[np.ndarray], dict[str, Any]]]:
    """op -> (operands, attributes given explicitly); the rest of the attributes are OpDef defaults."""
    x = np.abs(_f(*X)) + 0.5
    cases: dict[str, tuple[list[np.ndarray], dict[str, Any]]] = {}
    for op in UNARY:
        cases[op] = ([x], {})
    cases["clip"] = ([x], {"min": 0.6, "max": 1.0})
    cases["cumsum"] = ([x], {"axis": 3, "exclusive": 1, "reverse": 1})
    cases["lrn"] = ([x], {"size": 3})
    cases["squeeze"] = ([x[:, :1]], {"axes": [1]})
    cases["transpose"] = ([x], {"perm": [0, 2, 3, 1]})
    for op in BINARY:
        cases[op] = ([x, x[:1, :1, :1, :]], {})  # a broadcast operand
    cases["divide_int"] = ([(x * 100).astype(np.int32), np.full((96,), 7, np.int32)], {})
    mask = x > 1.0
    for op in LOGICAL:
        cases[op] = ([mask, mask[:1]], {})
    cases["logical_not"] = ([mask], {})
    cases["bitwise_not"] = ([(x * 10).astype(np.int32)], {})
    cases["where"] = ([mask, x, x[:1]], {})
    cases["prelu"] = ([x, _f(16, 1, 1)], {})
    cases["cast"] = ([mask], {"to": "float64"})
    c = x.shape[1]
    cases["batch_norm"] = ([x, *(np.abs(_f(c)) + 0.1 for _ in range(4))], {})
    cases["instance_norm"] = ([x, _f(c), _f(c)], {})
    cases["layer_norm"] = ([x, _f(96), _f(96)], {})
    for nd in (1, 2, 3):
        shape = (2, 8) + ((4096,), (64, 48), (16, 12, 10))[nd - 1]
        xs = _f(*shape)
        kernel_shape = [3] * nd
        common = {"strides": [1] * nd, "pads": [1] * (2 * nd), "dilations": [1] * nd}
        cases[f"conv{nd}d"] = ([xs, _f(16, 8, *kernel_shape), _f(16)], {**common, "groups": 1})
        cases[f"conv_transpose{nd}d"] = (
            [xs, _f(8, 4, *kernel_shape), _f(4)],
            {**common, "strides": [2] * nd, "output_padding": [0] * nd, "groups": 1},
        )
        pool = {"kernel_shape": kernel_shape, "strides": [2] * nd, "pads": [1] * (2 * nd), "dilations": [1] * nd}
        cases[f"max_pool{nd}d"] = ([xs], dict(pool))
        cases[f"avg_pool{nd}d"] = ([xs], dict(pool))
    # strided: the output is far smaller than the input (an STFT as a conv, silero VAD's: stride 128 over 832)
    cases["conv1d_strided"] = ([_f(64, 1, 832), _f(258, 1, 256)],
                               {"strides": [128], "pads": [0, 0], "dilations": [1], "groups": 1})  # fmt: skip
    cases["conv2d_strided"] = ([_f(2, 8, 64, 48), _f(24, 8, 3, 3), _f(24)],
                               {"strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [1, 1], "groups": 1})  # fmt: skip
    cases["conv2d_depthwise"] = ([x, _f(16, 1, 3, 3), _f(16)],
                                 {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "groups": 16})  # fmt: skip
    cases["matmul"] = ([_f(4, 96, 128), _f(128, 160)], {})
    cases["dense"] = ([_f(4, 96, 128), _f(160, 128), _f(160)], {})
    cases["reshape"] = ([x], {"shape": [2, 16, -1]})
    cases["reshape_strided"] = ([x[:, :, ::2]], {"shape": [2, -1]})
    cases["unsqueeze"] = ([x], {"axes": [0]})
    cases["expand"] = ([x[:, :1]], {"shape": list(X)})
    cases["tile"] = ([x[:, :4]], {"repeats": [1, 4, 1, 1]})
    cases["concat"] = ([x, x, x], {"axis": 1})
    cases["split"] = ([x], {"axis": 1, "sizes": [4, 12]})
    sequence = _f(40, 2, 96)
    cases["recurrent"] = ([sequence, _f(2, 128, 96), _f(2, 128, 32), _f(2, 256), _f(2, 2, 32), _f(2, 2, 32)],
                          {"kind": "lstm", "hidden_size": 32, "direction": "bidirectional",
                           "activations": ["sigmoid", "tanh", "tanh"] * 2, "initial_h": 1, "initial_c": 1})  # fmt: skip
    cases["slice"] = ([x], {"starts": [1], "ends": [80], "axes": [2], "steps": [2]})
    cases["dynamic_slice"] = ([x, np.array([1]), np.array([80])], {"axes": [2], "steps": [1]})
    cases["pad"] = ([x], {"pads": [0, 0, 2, 2, 0, 0, 2, 2]})
    cases["same_pad"] = ([x], {"kernel_shape": [3, 3], "strides": [2, 2], "dilations": [1, 1]})
    cases["gather"] = ([x, np.array([[0, 3], [5, 5]], np.int64)], {"axis": 1})
    cases["gather_elements"] = ([x, _rng.integers(-96, 96, X)], {"axis": 3})
    cases["gather_nd"] = ([x, _rng.integers(0, 2, (20, 2))], {})
    cases["scatter_nd"] = ([x, np.array([[0, 1], [1, 2]]), _f(2, 96, 96)], {"reduction": "add"})
    cases["scatter_elements"] = ([x, _rng.integers(0, 96, X), x], {"axis": 3})
    cases["shape"] = ([x], {})
    cases["constant_of_shape"] = ([np.array(X, np.int64)], {"value": 1.0})
    cases["range"] = ([np.array(0, np.int64), np.array(100_000, np.int64), np.array(1, np.int64)], {})
    cases["resize"] = ([x], {"mode": "linear", "scales": [1, 1, 1.5, 0.75]})
    cases["resize_nearest"] = ([x], {"mode": "nearest", "sizes": [2, 16, 192, 192]})
    cases["dynamic_resize"] = ([x, np.array([2, 16, 80, 120], np.int64)], {"mode": "linear"})
    cases["topk"] = ([x], {"k": 5, "axis": 3})
    cases["quantize"] = ([x, np.array(0.02, np.float32), np.array(3, np.uint8)], {})
    cases["dequantize"] = ([(x * 10).astype(np.int8), np.array(0.1, np.float32), np.array(2, np.int8)], {})
    cases["dynamic_quantize"] = ([x], {})
    unit = np.clip(x - 1.0, -0.99, 0.99)  # inside every inverse function's domain
    for op in ("acos", "acosh", "asin", "asinh", "atan", "atanh", "sinh", "cosh", "log1p", "expm1", "log2", "log10",
               "trunc"):  # fmt: skip
        cases[op] = ([x + 1.0 if op == "acosh" else unit], {})
    cases["atan2"] = ([x, x[:1, :1, :1, :]], {})
    ints = (x * 100).astype(np.int32)
    cases["bit_shift"] = ([ints, np.full((96,), 3, np.int32)], {"direction": "LEFT"})
    cases["bit_shift_right"] = ([ints, np.full((96,), 40, np.int32)], {"direction": "RIGHT"})
    cases["grid_sample"] = ([x, _f(2, 64, 80, 2) * 0.9], {})
    cases["grid_sample_nearest"] = ([x, _f(2, 64, 80, 2) * 0.9], {"mode": "nearest", "padding_mode": "border"})
    boxes = np.array([[0, 0, 40, 30], [10.5, 20, 95, 90], [-5, -3, 30, 100], [50, 60, 52, 61]], np.float32)
    cases["roi_align"] = ([x, boxes, np.array([0, 1, 1, 0], np.int64)], {"output_height": 7, "output_width": 7})
    cases["roi_align_max"] = ([x, boxes, np.array([0, 1, 1, 0], np.int64)],
                              {"output_height": 5, "output_width": 6, "mode": "max", "sampling_ratio": 2,
                               "coordinate_transformation_mode": "output_half_pixel"})  # fmt: skip
    q = (x * 20).astype(np.int8)
    per_channel = (np.zeros(24, np.int32), np.full(24, 1 << 30, np.int32), np.full(24, 38, np.int32))
    cases["int8_conv"] = ([q, (_f(24, 16, 3, 3) * 20).astype(np.int8), *per_channel],
                          {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "act_min": -128, "act_max": 127})  # fmt: skip
    rows = (_f(4, 96, 128) * 20).astype(np.int8)
    per_unit = (np.zeros(160, np.int32), np.full(160, 1 << 30, np.int32), np.full(160, 38, np.int32))
    cases["int8_dense"] = ([rows, (_f(160, 128) * 20).astype(np.int8), *per_unit], {"act_min": 0, "act_max": 127})
    cases["int8_lut"] = ([q, np.arange(-128, 128).astype(np.int8)[::-1].copy()], {})
    cases["int8_mean"] = ([q], {"axes": [2, 3], "keepdims": 1, "multiplier": 1 << 30, "shift": 40, "act_min": -128,
                                "act_max": 127})  # fmt: skip
    cases["int8_concat"] = ([q, q[:, :8]], {"axis": 1, "multipliers": [1 << 30, 1 << 30], "shifts": [30, 31]})
    rows = _f(2000, 16)  # more (row, tree) slots than one block of the tree kernels walks
    rows[::7, 3] = np.nan
    for name, classes, attrs in (("", 5, {"mode": "MIXED", "tracks_missing": 1, "post_transform": "SOFTMAX"}),
                                 ("_binary", 2, {"binary": 1, "positive_weights": 0, "base_values": [0.5]})):  # fmt: skip
        cases[f"tree_ensemble_classifier{name}"] = (
            [rows, *_forest(50, 6, 16, classes, 3)],
            {"depth": 6, "mode": "BRANCH_LEQ", "class_labels": list(range(classes)), **attrs},
        )
    for aggregate in ("sum", "max"):
        cases[f"tree_ensemble_regressor_{aggregate}"] = (
            [rows, *_forest(40, 5, 16, 3, 1)], {"depth": 5, "mode": "BRANCH_LT", "n_targets": 3,
                                                "aggregate": aggregate.upper(), "base_values": [1.0, 2.0, 3.0]},
        )  # fmt: skip
    return cases


def _forest(trees: int, depth: int, features: int, outputs: int, slots: int) -> list[np.ndarray]:
    """Complete trees of ``depth`` laid out as the tree kernels read them (aot/ir/ml_ops.py): leaves first."""
    inner, leaves = 2**depth - 1, 2**depth
    count = trees * (inner + leaves)
    heap = np.arange(inner)
    roots = trees * leaves + np.arange(trees) * inner

    def child(k: np.ndarray, t: np.ndarray) -> np.ndarray:
        return np.where(k < inner, trees * leaves + t * inner + k, t * leaves + k - inner)

    t = np.repeat(np.arange(trees), inner)
    k = np.tile(heap, trees)
    true_next = np.concatenate([np.arange(trees * leaves), child(2 * k + 1, t)]).astype(np.int64)
    false_next = np.concatenate([np.arange(trees * leaves), child(2 * k + 2, t)]).astype(np.int64)
    modes = np.concatenate([np.full(trees * leaves, 6), _rng.integers(0, 6, trees * inner)]).astype(np.int8)
    return [
        _rng.integers(0, features, count), _f(count), modes, _rng.random(count) < 0.5, true_next, false_next,
        roots.astype(np.int64), _rng.integers(0, outputs, (trees * leaves, slots)), _f(trees * leaves, slots),
    ]  # fmt: skip


def kernel_of(case: str) -> str:
    """The op a case exercises (cases named ``op_variant`` for a second path through one kernel)."""
    from runtime_lite.kernels import KERNELS

    while case not in KERNELS:
        case = case.rsplit("_", 1)[0]
    return case


def attributes(case: str, given: dict[str, Any]) -> dict[str, Any]:
    op = kernel_of(case)
    out = {}
    for key, default in OPS[op].attrs.items():
        if key in given:
            out[key] = given[key]
        elif default is not REQUIRED:
            out[key] = default
        else:
            raise KeyError(f"sample {case!r} must give attribute {key!r}")
    return out
