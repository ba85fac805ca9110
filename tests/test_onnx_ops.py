"""Every supported ONNX op, across the opsets that changed it, against onnxruntime.

Each case builds a one- or few-node model, compiles it with aot, runs it with
runtime_lite and compares every output (dtype, shape, values) with onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.conftest import small_cnn_model
from tests.helpers import assert_matches_onnxruntime, build_and_load, make_model, rand

CASES = {}


def case(name):
    def register(fn):
        CASES[name] = fn
        return fn

    return register


def node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), **attrs)


def unary(op, opset=13, x=None, **attrs):
    x = rand(2, 3, 4, 5) if x is None else x
    return make_model([node(op, ["x"], **attrs)], {"x": x}, ["y"], opset=opset), {"x": x}


def binary(op, a, b, opset=13, out="float32", b_const=False):
    inits = {"b": b} if b_const else {}
    inputs = {"a": a} if b_const else {"a": a, "b": b}
    model = make_model([node(op, ["a", "b"])], inputs, {"y": out}, inits, opset=opset)
    return model, inputs


# -- elementwise ------------------------------------------------------------------------
for _op in [
    "Relu",
    "Sigmoid",
    "Tanh",
    "Erf",
    "Exp",
    "Neg",
    "Abs",
    "Floor",
    "Ceil",
    "Sin",
    "Cos",
    "Softsign",
    "Softplus",
]:
    case(_op.lower())(lambda op=_op: unary(op))
case("sqrt")(lambda: unary("Sqrt", x=rand(2, 3, 4, low=0.01, high=4)))
case("log")(lambda: unary("Log", x=rand(2, 3, 4, low=0.01, high=4)))
case("reciprocal")(lambda: unary("Reciprocal", x=rand(2, 3, 4, low=0.5, high=4)))
case("round_half_even")(lambda: unary("Round", x=np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, 0.6], np.float32)))
case("sign")(lambda: unary("Sign", x=np.array([-2.0, 0.0, 3.0], np.float32)))
case("leaky_relu")(lambda: unary("LeakyRelu", alpha=0.1))
case("leaky_relu_steep")(lambda: unary("LeakyRelu", alpha=1.5))
case("elu")(lambda: unary("Elu", alpha=0.7))
case("hard_sigmoid")(lambda: unary("HardSigmoid", x=rand(2, 3, 4, low=-6, high=6), alpha=0.25, beta=0.4))
case("hard_swish")(lambda: unary("HardSwish", opset=14, x=rand(2, 3, 4, low=-6, high=6)))
case("gelu_exact")(lambda: unary("Gelu", opset=20, x=rand(2, 3, 4, low=-4, high=4)))
case("gelu_tanh")(lambda: unary("Gelu", opset=20, x=rand(2, 3, 4, low=-4, high=4), approximate="tanh"))
case("erf_wide_range")(lambda: unary("Erf", x=np.linspace(-5, 5, 1001, dtype=np.float32)))
case("softmax_opset13_axis1")(lambda: unary("Softmax", axis=1))
case("softmax_opset11_coerced_2d")(lambda: unary("Softmax", opset=11, axis=1))
case("softmax_opset11_last_axis")(lambda: unary("Softmax", opset=11, axis=-1))
case("log_softmax")(lambda: unary("LogSoftmax", axis=-1))
case("log_softmax_opset9_default")(lambda: unary("LogSoftmax", opset=9))
case("not")(lambda: (make_model([node("Not", ["x"])], {"x": rand(6) > 0}, {"y": "bool"}), {"x": rand(6) > 0}))
case("add_broadcast")(lambda: binary("Add", rand(2, 3, 4), rand(4, seed=1)))
case("sub_broadcast_const")(lambda: binary("Sub", rand(2, 3, 4), rand(3, 1, seed=1), b_const=True))
case("mul_scalar")(lambda: binary("Mul", rand(2, 3), np.array(2.5, np.float32), b_const=True))
case("div_float")(lambda: binary("Div", rand(2, 3), rand(2, 3, seed=1, low=0.5, high=2)))
case("div_int_truncates")(
    lambda: binary("Div", np.array([7, -7, 7, -7, 6], np.int64), np.array([2, 2, -2, -2, 3], np.int64), out="int64")
)
case("pow_float")(lambda: binary("Pow", rand(3, 4, low=0.1, high=2), rand(3, 4, seed=1)))
case("pow_int_exponent")(lambda: binary("Pow", rand(3, 4), np.array(3, np.int64), opset=15, b_const=True))
case("mod_int")(lambda: binary("Mod", np.array([7, -7, 5], np.int64), np.array([3, 3, -2], np.int64), out="int64"))
case("prelu_channel")(lambda: binary("PRelu", rand(2, 3, 4, 4), rand(3, 1, 1, seed=1), b_const=True))
case("equal_int")(lambda: binary("Equal", np.array([1, 2, 3], np.int64), np.array([1, 0, 3], np.int64), out="bool"))
case("less")(lambda: binary("Less", rand(2, 3), rand(2, 3, seed=1), out="bool"))
case("greater_broadcast")(lambda: binary("Greater", rand(2, 3), rand(3, seed=1), out="bool"))
case("less_or_equal")(lambda: binary("LessOrEqual", rand(2, 3), rand(3, seed=1), opset=16, out="bool"))
case("tan")(lambda: unary("Tan", x=rand(2, 3, low=-1.2, high=1.2)))
for _op in ("And", "Or", "Xor"):
    case(_op.lower())(lambda op=_op: binary(op, rand(2, 3) > 0, rand(3, seed=1) > 0, out="bool"))
case("greater_or_equal")(lambda: binary("GreaterOrEqual", rand(2, 3), rand(3, seed=1), opset=16, out="bool"))


@case("clip_opset6_attrs")
def _():
    return unary("Clip", opset=6, x=rand(3, 4, low=-3, high=3), min=-1.0, max=0.5)


@case("clip_opset13_inputs")
def _():
    x = rand(3, 4, low=-3, high=3)
    inits = {"lo": np.array(-1.0, np.float32), "hi": np.array(0.5, np.float32)}
    return make_model([node("Clip", ["x", "lo", "hi"])], {"x": x}, ["y"], inits), {"x": x}


@case("clip_only_max")
def _():
    x = rand(3, 4, low=-3, high=3)
    return make_model([node("Clip", ["x", "", "hi"])], {"x": x}, ["y"], {"hi": np.array(0.5, np.float32)}), {"x": x}


@case("clip_relu6")
def _():
    x = rand(3, 4, low=-3, high=9)
    inits = {"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    return make_model([node("Clip", ["x", "lo", "hi"])], {"x": x}, ["y"], inits), {"x": x}


@case("clip_runtime_bounds")
def _():
    feeds = {"x": rand(3, 4, low=-3, high=3), "lo": np.array(-1.0, np.float32), "hi": np.array(1.0, np.float32)}
    return make_model([node("Clip", ["x", "lo", "hi"])], feeds, ["y"]), feeds


@case("where")
def _():
    feeds = {"c": rand(2, 3) > 0, "a": rand(2, 3, seed=1), "b": rand(3, seed=2)}
    return make_model([node("Where", ["c", "a", "b"])], feeds, ["y"]), feeds


@case("sum_mean_max_min_variadic")
def _():
    feeds = {"a": rand(2, 3), "b": rand(3, seed=1), "c": rand(2, 1, seed=2)}
    nodes = [node(op, ["a", "b", "c"], [op.lower()]) for op in ("Sum", "Mean", "Max", "Min")]
    return make_model(nodes, feeds, ["sum", "mean", "max", "min"]), feeds


@case("cast_float_to_int")
def _():
    x = rand(5, low=-5, high=5)
    return make_model([node("Cast", ["x"], to=7)], {"x": x}, {"y": "int64"}), {"x": x}


@case("cast_like")
def _():
    feeds = {"x": np.array([1, 2, 3], np.int64)}
    return make_model([node("CastLike", ["x", "t"])], feeds, ["y"], {"t": np.zeros(1, np.float32)}, opset=15), feeds


@case("identity_dropout")
def _():
    x = rand(2, 3)
    nodes = [node("Dropout", ["x"], ["d", "mask"]), node("Identity", ["d"], ["y"])]
    return make_model(nodes, {"x": x}, ["y"]), {"x": x}


# -- convolution and pooling ------------------------------------------------------------


def conv_case(x_shape, w_shape, bias=True, opset=13, op="Conv", **attrs):
    x = rand(*x_shape)
    inits = {"w": rand(*w_shape, seed=1)}
    inputs = ["x", "w"]
    if bias:
        channels = w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1)
        inits["b"] = rand(channels, seed=2)
        inputs.append("b")
    return make_model([node(op, inputs, **attrs)], {"x": x}, ["y"], inits, opset=opset), {"x": x}


case("conv2d_basic")(lambda: conv_case((1, 3, 9, 9), (4, 3, 3, 3)))
case("conv2d_stride_pad_dilation")(
    lambda: conv_case((2, 3, 11, 10), (5, 3, 3, 2), strides=[2, 1], pads=[1, 0, 2, 1], dilations=[2, 1])
)
case("conv2d_grouped")(lambda: conv_case((1, 6, 8, 8), (9, 2, 3, 3), group=3, pads=[1, 1, 1, 1]))
case("conv2d_depthwise")(lambda: conv_case((2, 4, 8, 8), (4, 1, 3, 3), group=4, pads=[1, 1, 1, 1], strides=[2, 2]))
case("conv2d_depthwise_multiplier")(lambda: conv_case((1, 4, 8, 8), (8, 1, 3, 3), group=4))
case("conv2d_pointwise")(lambda: conv_case((2, 8, 5, 5), (6, 8, 1, 1)))
case("conv2d_pointwise_stride2")(lambda: conv_case((1, 8, 7, 7), (6, 8, 1, 1), strides=[2, 2], bias=False))
case("conv2d_auto_pad_same_upper")(lambda: conv_case((1, 2, 7, 8), (3, 2, 3, 3), auto_pad="SAME_UPPER", strides=[2, 2]))
case("conv2d_auto_pad_same_lower")(lambda: conv_case((1, 2, 7, 8), (3, 2, 4, 4), auto_pad="SAME_LOWER"))
case("conv1d")(lambda: conv_case((2, 3, 12), (4, 3, 3), pads=[1, 1], strides=[2]))
case("conv3d")(lambda: conv_case((1, 2, 5, 6, 6), (3, 2, 3, 3, 3), pads=[1, 1, 1, 1, 1, 1]))
case("conv_transpose2d")(lambda: conv_case((1, 4, 5, 5), (4, 3, 3, 3), op="ConvTranspose"))
case("conv_transpose2d_stride_outpad")(
    lambda: conv_case(
        (2, 4, 5, 6), (4, 3, 3, 3), op="ConvTranspose", strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 0]
    )
)
case("conv_transpose2d_grouped_dilated")(
    lambda: conv_case((1, 4, 5, 5), (4, 2, 3, 3), op="ConvTranspose", group=2, dilations=[2, 2])
)
case("conv_transpose2d_output_shape")(
    lambda: conv_case((1, 2, 4, 4), (2, 3, 3, 3), op="ConvTranspose", strides=[2, 2], output_shape=[9, 9], bias=False)
)
case("conv_transpose1d")(lambda: conv_case((1, 2, 7), (2, 3, 4), op="ConvTranspose", strides=[3]))

case("max_pool2d")(lambda: unary("MaxPool", x=rand(1, 3, 9, 9), kernel_shape=[3, 3], strides=[2, 2]))
case("max_pool2d_pads_ceil")(
    lambda: unary(
        "MaxPool", opset=12, x=rand(2, 3, 10, 9), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1
    )
)
case("max_pool2d_dilated")(
    lambda: unary("MaxPool", opset=12, x=rand(1, 2, 10, 10), kernel_shape=[2, 2], dilations=[2, 2])
)
case("max_pool2d_same_upper")(
    lambda: unary("MaxPool", x=rand(1, 2, 7, 7), kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")
)
case("max_pool1d")(lambda: unary("MaxPool", x=rand(2, 3, 11), kernel_shape=[3], strides=[2]))
case("avg_pool2d_exclude_pad")(
    lambda: unary("AveragePool", x=rand(1, 3, 9, 9), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
)
case("avg_pool2d_include_pad")(
    lambda: unary("AveragePool", x=rand(1, 3, 9, 9), kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)
)
case("avg_pool2d_ceil")(
    lambda: unary("AveragePool", x=rand(1, 2, 10, 10), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
)
case("avg_pool2d_ceil_include_pad")(
    lambda: unary(
        "AveragePool", x=rand(1, 2, 10, 10), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
        count_include_pad=1,
    )
)  # fmt: skip
case("global_average_pool")(lambda: unary("GlobalAveragePool", x=rand(2, 3, 5, 6)))
case("global_max_pool")(lambda: unary("GlobalMaxPool", x=rand(2, 3, 5, 6)))
case("lrn")(lambda: unary("LRN", x=rand(1, 7, 4, 4), size=5, alpha=1e-3, beta=0.75, bias=2.0))


@case("batch_norm")
def _():
    x = rand(2, 4, 3, 3)
    inits = {"s": rand(4, seed=1), "b": rand(4, seed=2), "m": rand(4, seed=3), "v": rand(4, seed=4, low=0.5, high=2)}
    return make_model([node("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)], {"x": x}, ["y"], inits), {
        "x": x
    }


@case("conv_bn_relu_folded")
def _():
    x = rand(1, 3, 8, 8)
    inits = {
        "w": rand(4, 3, 3, 3, seed=1),
        "s": rand(4, seed=2),
        "b": rand(4, seed=3),
        "m": rand(4, seed=4),
        "v": rand(4, seed=5, low=0.5, high=2),
    }
    nodes = [
        node("Conv", ["x", "w"], ["c"]),
        node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
        node("Relu", ["n"]),
    ]
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


@case("layer_norm")
def _():
    x = rand(2, 3, 8)
    inits = {"s": rand(8, seed=1), "b": rand(8, seed=2)}
    return make_model(
        [node("LayerNormalization", ["x", "s", "b"], axis=-1, epsilon=1e-5)], {"x": x}, ["y"], inits, opset=17
    ), {"x": x}


@case("layer_norm_two_axes_no_bias")
def _():
    x = rand(2, 3, 4)
    return make_model(
        [node("LayerNormalization", ["x", "s"], axis=1)], {"x": x}, ["y"], {"s": rand(3, 4, seed=1)}, opset=17
    ), {"x": x}


@case("instance_norm")
def _():
    x = rand(2, 3, 4, 4)
    inits = {"s": rand(3, seed=1), "b": rand(3, seed=2)}
    return make_model([node("InstanceNormalization", ["x", "s", "b"])], {"x": x}, ["y"], inits), {"x": x}


# -- linear algebra ---------------------------------------------------------------------


@case("gemm_transB_bias")
def _():
    x = rand(3, 5)
    inits = {"w": rand(4, 5, seed=1), "c": rand(4, seed=2)}
    return make_model([node("Gemm", ["x", "w", "c"], transB=1)], {"x": x}, ["y"], inits), {"x": x}


@case("gemm_alpha_beta_transA")
def _():
    x = rand(5, 3)
    inits = {"w": rand(5, 4, seed=1), "c": rand(3, 4, seed=2)}
    return make_model([node("Gemm", ["x", "w", "c"], transA=1, alpha=0.5, beta=2.0)], {"x": x}, ["y"], inits), {"x": x}


@case("gemm_runtime_weight_no_bias")
def _():
    feeds = {"a": rand(3, 5), "b": rand(5, 2, seed=1)}
    return make_model([node("Gemm", ["a", "b"])], feeds, ["y"]), feeds


case("matmul_2d")(lambda: binary("MatMul", rand(3, 5), rand(5, 4, seed=1)))
case("matmul_batched_broadcast")(lambda: binary("MatMul", rand(2, 1, 3, 5), rand(4, 5, 6, seed=1)))
case("matmul_vector")(lambda: binary("MatMul", rand(5), rand(2, 5, 3, seed=1)))


def einsum(equation, *operands, shapes=None):
    names = [f"x{i}" for i in range(len(operands))]
    feeds = dict(zip(names, operands))
    model = make_model([node("Einsum", names, equation=equation)], feeds, ["y"], opset=12, input_shapes=shapes)
    return model, feeds


case("einsum_maxvit_scores")(lambda: einsum("bghid,bghjd->bghij", rand(2, 3, 2, 5, 4), rand(2, 3, 2, 6, 4, seed=1)))
case("einsum_maxvit_values")(
    lambda: einsum("B G H I J, B G H J D -> B G H I D", rand(1, 2, 2, 5, 6), rand(1, 2, 2, 6, 3))
)
case("einsum_merged_groups")(lambda: einsum("abc,cde->abde", rand(2, 3, 4), rand(4, 5, 2, seed=1)))
case("einsum_batch_and_merged_groups")(lambda: einsum("gab,gbcd->gdac", rand(2, 3, 4), rand(2, 4, 5, 3, seed=1)))
case("einsum_ellipsis_broadcast")(lambda: einsum("...ij,...jk->...ik", rand(2, 1, 3, 4), rand(1, 5, 4, 2, seed=1)))
case("einsum_implicit_output")(lambda: einsum("ij,jk", rand(3, 4), rand(4, 2, seed=1)))
case("einsum_one_operand")(lambda: einsum("ijk->ki", rand(2, 3, 4)))
case("einsum_summed_apart")(lambda: einsum("ij,k->i", rand(3, 4), rand(5, seed=1)))
case("einsum_dot")(lambda: einsum("i,i->", rand(6), rand(6, seed=1)))
case("einsum_outer")(lambda: einsum("i,j->ji", rand(3), rand(4, seed=1)))
case("einsum_symbolic_attention")(
    lambda: einsum("bshd,bthd->bhst", rand(2, 5, 3, 4), rand(2, 7, 3, 4, seed=1),
                   shapes={"x0": ["B", "S", 3, 4], "x1": ["B", "T", 3, 4]})
)  # fmt: skip
case("einsum_symbolic_contraction")(
    lambda: einsum("bsd,bsd->b", rand(2, 5, 4), rand(2, 5, 4, seed=1), shapes={"x0": ["B", "S", 4], "x1": ["B", "S", 4]})
)  # fmt: skip


def test_einsum_with_a_repeated_index_is_refused_with_the_node_named():
    from aot.errors import UnsupportedOpsError

    model, _ = einsum("ii->i", rand(3, 3))
    with pytest.raises(UnsupportedOpsError, match=r"Einsum node '.*': equation 'ii->i': a repeated index") as info:
        build_and_load(model)
    assert "\n" not in str(info.value)


# -- reductions -------------------------------------------------------------------------
case("reduce_mean_opset13_attr")(lambda: unary("ReduceMean", x=rand(2, 3, 4), axes=[1, -1], keepdims=0))
case("reduce_max_all")(lambda: unary("ReduceMax", x=rand(2, 3, 4)))
case("reduce_min_keepdims")(lambda: unary("ReduceMin", x=rand(2, 3, 4), axes=[0]))
case("reduce_sum_opset11_attr")(lambda: unary("ReduceSum", opset=11, x=rand(2, 3, 4), axes=[2]))
case("reduce_prod")(lambda: unary("ReduceProd", x=rand(2, 3, 4, low=0.5, high=1.5), axes=[1]))
case("argmax_last_index")(
    lambda: (
        make_model(
            [node("ArgMax", ["x"], axis=0, keepdims=0, select_last_index=1)],
            {"x": np.array([[1, 3], [3, 1], [3, 3]], np.float32)},
            {"y": "int64"},
        ),
        {"x": np.array([[1, 3], [3, 1], [3, 3]], np.float32)},
    )
)
case("argmax")(
    lambda: (make_model([node("ArgMax", ["x"], axis=1)], {"x": rand(3, 5)}, {"y": "int64"}), {"x": rand(3, 5)})
)


@case("reduce_mean_opset18_input")
def _():
    x = rand(2, 3, 4)
    return make_model(
        [node("ReduceMean", ["x", "axes"])], {"x": x}, ["y"], {"axes": np.array([1], np.int64)}, opset=18
    ), {"x": x}


@case("reduce_sum_opset13_input_noop")
def _():
    x = rand(2, 3)
    nodes = [
        node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=1),
        node("ReduceSum", ["x", "axes"], ["z"], keepdims=0),
    ]
    return make_model(nodes, {"x": x}, ["y", "z"], {"axes": np.array([0], np.int64)}), {"x": x}


case("argmin_last_index")(
    lambda: (
        make_model(
            [node("ArgMin", ["x"], axis=1, keepdims=0, select_last_index=1)],
            {"x": np.array([[1, 0, 0], [3, 1, 2]], np.float32)},
            {"y": "int64"},
            opset=12,
        ),
        {"x": np.array([[1, 0, 0], [3, 1, 2]], np.float32)},
    )
)
case("argmin")(lambda: (make_model([node("ArgMin", ["x"])], {"x": rand(4, 3)}, {"y": "int64"}), {"x": rand(4, 3)}))


def with_input(op, feeds, outputs, inits=None, opset=13, inputs=None, **attrs):
    """One node reading ``feeds`` (run-time inputs) and ``inits`` (constants), in that order unless ``inputs``."""
    names = inputs or list(feeds) + list(inits or {})
    return make_model([node(op, names, list(outputs), **attrs)], feeds, outputs, inits, opset=opset), feeds


case("cumsum_axis1")(lambda: with_input("CumSum", {"x": rand(2, 5, 3)}, ["y"], {"a": np.array(1, np.int64)}, opset=14))
case("cumsum_exclusive_reverse_int")(
    lambda: with_input(
        "CumSum", {"x": np.arange(12, dtype=np.int64).reshape(3, 4)}, {"y": "int64"},
        {"a": np.array(-1, np.int32)}, exclusive=1, reverse=1,
    )
)  # fmt: skip
case("cumsum_exclusive")(
    lambda: with_input("CumSum", {"x": rand(3, 4)}, ["y"], {"a": np.array(0, np.int64)}, exclusive=1)
)
case("cumsum_reverse")(lambda: with_input("CumSum", {"x": rand(3, 4)}, ["y"], {"a": np.array(1, np.int64)}, reverse=1))
case("topk_largest_ties_lower_index_first")(
    lambda: with_input(
        "TopK", {"x": np.array([[1, 3, 3, 2, 3], [0, 0, 1, 1, 0]], np.float32)}, {"v": "float32", "i": "int64"},
        {"k": np.array([3], np.int64)}, opset=11,
    )
)  # fmt: skip
case("topk_smallest_axis0")(
    lambda: with_input(
        "TopK", {"x": rand(6, 4)}, {"v": "float32", "i": "int64"}, {"k": np.array([2], np.int64)}, opset=11,
        axis=0, largest=0,
    )
)  # fmt: skip
case("topk_opset9_attr")(
    lambda: with_input(
        "TopK", {"x": np.array([[5, 1, 5, 7], [2, 2, 9, 0]], np.float32)}, {"v": "float32", "i": "int64"}, opset=9, k=2
    )
)
case("topk_int64")(
    lambda: with_input(
        "TopK", {"x": np.array([[5, 1, 5, 7], [2, 2, 9, 0]], np.int64)}, {"v": "int64", "i": "int64"},
        {"k": np.array([4], np.int64)}, opset=11,
    )
)  # fmt: skip
case("trilu_upper_k1")(lambda: with_input("Trilu", {"x": rand(2, 4, 5)}, ["y"], {"k": np.array(1, np.int64)}, opset=14))
case("trilu_lower_k_negative")(
    lambda: with_input("Trilu", {"x": rand(5, 3)}, ["y"], {"k": np.array(-1, np.int64)}, opset=14, upper=0)
)
case("trilu_lower_default_k")(lambda: with_input("Trilu", {"x": rand(4, 4)}, ["y"], opset=14, upper=0))
case("isnan")(
    lambda: with_input("IsNaN", {"x": np.array([1.0, np.nan, -np.inf, 0.0], np.float32)}, {"y": "bool"}, opset=13)
)
case("isinf_both")(
    lambda: with_input("IsInf", {"x": np.array([1.0, np.nan, -np.inf, np.inf], np.float32)}, {"y": "bool"}, opset=10)
)
case("isinf_negative_only")(
    lambda: with_input(
        "IsInf", {"x": np.array([np.inf, -np.inf, 3.0], np.float32)}, {"y": "bool"}, opset=10, detect_positive=0
    )
)
for _op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
    case(_op.lower())(
        lambda op=_op: with_input(
            op, {"a": np.array([[5, -3, 12]], np.int32), "b": np.array([3, 6, -1], np.int32)}, {"y": "int32"}, opset=18
        )
    )
case("bitwise_not")(lambda: with_input("BitwiseNot", {"x": np.array([0, 7, -8], np.int64)}, {"y": "int64"}, opset=18))
case("bitwise_not_uint8")(
    lambda: with_input("BitwiseNot", {"x": np.array([0, 7, 255], np.uint8)}, {"y": "uint8"}, opset=18)
)


# -- indexed reads and writes -----------------------------------------------------------
case("gather_nd")(
    lambda: with_input(
        "GatherND", {"x": rand(4, 5, 3), "i": np.array([[[0, 1], [-1, 4]], [[2, 2], [3, -5]]], np.int64)}, ["y"]
    )
)
case("gather_nd_full_index")(
    lambda: with_input("GatherND", {"x": rand(4, 5), "i": np.array([[3, 1], [0, 0], [2, 4]], np.int64)}, ["y"])
)
case("gather_nd_batch_dims")(
    lambda: with_input(
        "GatherND", {"x": rand(2, 3, 4), "i": np.array([[[1], [0]], [[2], [2]]], np.int64)}, ["y"], opset=12,
        batch_dims=1,
    )
)  # fmt: skip
case("scatter_nd_rows")(
    lambda: with_input(
        "ScatterND", {"x": rand(4, 5, 6), "i": np.array([[1], [-1]], np.int64), "u": rand(2, 5, 6, seed=1)}, ["y"]
    )
)
case("scatter_nd_elements")(
    lambda: with_input(
        "ScatterND", {"x": rand(4, 5), "i": np.array([[[0, 1], [3, 4]], [[2, 0], [1, -1]]], np.int64),
                      "u": rand(2, 2, seed=1)}, ["y"],
    )
)  # fmt: skip
case("scatter_nd_add_duplicates")(
    lambda: with_input(
        "ScatterND", {"x": rand(5, 3), "i": np.array([[1], [1], [4]], np.int64), "u": rand(3, 3, seed=1)}, ["y"],
        opset=16, reduction="add",
    )
)  # fmt: skip
case("scatter_nd_max")(
    lambda: with_input(
        "ScatterND", {"x": rand(5, 3), "i": np.array([[0], [2]], np.int64), "u": rand(2, 3, seed=1)}, ["y"],
        opset=18, reduction="max",
    )
)  # fmt: skip
case("scatter_elements_axis1_negative")(
    lambda: with_input(
        "ScatterElements", {"x": rand(3, 5), "i": np.array([[0, -1], [4, 2], [1, 1]], np.int64),
                            "u": rand(3, 2, seed=1)}, ["y"], opset=13, axis=1,
    )
)  # fmt: skip
case("scatter_elements_mul")(
    lambda: with_input(
        "ScatterElements", {"x": rand(4, 3), "i": np.array([[0, 1, 2], [0, 1, 2]], np.int64),
                            "u": rand(2, 3, seed=1)}, ["y"], opset=16, axis=0, reduction="mul",
    )
)  # fmt: skip
case("scatter_opset10")(
    lambda: with_input(
        "Scatter", {"x": rand(3, 3), "i": np.array([[1, 0, 2]], np.int64), "u": rand(1, 3, seed=1)}, ["y"], opset=10
    )
)


# -- shapes and data movement -----------------------------------------------------------


@case("reshape_zero_and_minus_one")
def _():
    x = rand(2, 3, 4)
    return make_model([node("Reshape", ["x", "s"])], {"x": x}, ["y"], {"s": np.array([0, -1], np.int64)}), {"x": x}


@case("reshape_allowzero")
def _():
    x = rand(2, 0, 3)
    return make_model(
        [node("Reshape", ["x", "s"], allowzero=1)], {"x": x}, ["y"], {"s": np.array([0, 3, 2], np.int64)}, opset=14
    ), {"x": x}


case("flatten_axis0")(lambda: unary("Flatten", x=rand(2, 3, 4), axis=0))
case("flatten_axis2")(lambda: unary("Flatten", x=rand(2, 3, 4), axis=2))
case("flatten_axis_rank")(lambda: unary("Flatten", x=rand(2, 3, 4), axis=3))  # (24, 1): legal, and no wrap to 0
case("flatten_axis_minus1")(lambda: unary("Flatten", x=rand(2, 3, 4), axis=-1))
case("flatten_axis_minus_rank")(lambda: unary("Flatten", x=rand(2, 3, 4), axis=-3))


@case("flatten_axis_rank_symbolic_dims")
def _():
    """HF's masks as torch.onnx's legacy exporter writes them: Flatten(axis=2) of a [batch, seq] tensor."""
    x = rand(2, 3)
    return make_model([node("Flatten", ["x"], axis=2)], {"x": x}, ["y"], input_shapes={"x": ["b", "s"]}), {"x": x}


case("transpose")(lambda: unary("Transpose", x=rand(2, 3, 4), perm=[2, 0, 1]))
case("transpose_default_reverses")(lambda: unary("Transpose", x=rand(2, 3, 4)))
case("squeeze_opset11_attr")(lambda: unary("Squeeze", opset=11, x=rand(2, 1, 3, 1), axes=[1, -1]))
case("squeeze_all_ones")(lambda: unary("Squeeze", x=rand(2, 1, 3, 1)))
case("unsqueeze_opset11_attr")(lambda: unary("Unsqueeze", opset=11, x=rand(2, 3), axes=[0, 3]))


@case("squeeze_unsqueeze_opset13_inputs")
def _():
    x = rand(2, 1, 3)
    nodes = [node("Squeeze", ["x", "a"], ["s"]), node("Unsqueeze", ["s", "b"], ["y"])]
    inits = {"a": np.array([1], np.int64), "b": np.array([-1, 0], np.int64)}
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


@case("expand")
def _():
    x = rand(3, 1)
    return make_model([node("Expand", ["x", "s"])], {"x": x}, ["y"], {"s": np.array([2, 1, 4], np.int64)}), {"x": x}


@case("tile")
def _():
    x = rand(2, 3)
    return make_model([node("Tile", ["x", "r"])], {"x": x}, ["y"], {"r": np.array([2, 3], np.int64)}), {"x": x}


@case("concat_negative_axis")
def _():
    feeds = {"a": rand(2, 3), "b": rand(2, 5, seed=1)}
    return make_model([node("Concat", ["a", "b"], axis=-1)], feeds, ["y"]), feeds


@case("split_opset11_attr")
def _():
    x = rand(2, 7)
    return make_model([node("Split", ["x"], ["y", "z"], axis=1, split=[3, 4])], {"x": x}, ["y", "z"], opset=11), {
        "x": x
    }


@case("split_opset13_input")
def _():
    x = rand(6, 2)
    inits = {"s": np.array([1, 2, 3], np.int64)}
    return make_model([node("Split", ["x", "s"], ["a", "b", "c"])], {"x": x}, ["a", "b", "c"], inits), {"x": x}


@case("split_opset18_num_outputs_uneven")
def _():
    x = rand(7, 2)
    return make_model([node("Split", ["x"], ["a", "b", "c"], num_outputs=3)], {"x": x}, ["a", "b", "c"], opset=18), {
        "x": x
    }


@case("split_equal_default")
def _():
    x = rand(2, 6)
    return make_model([node("Split", ["x"], ["a", "b"], axis=1)], {"x": x}, ["a", "b"]), {"x": x}


@case("slice_opset9_attrs")
def _():
    return unary("Slice", opset=9, x=rand(4, 5, 6), starts=[1, 0], ends=[3, -1], axes=[0, 2])


@case("slice_opset13_steps_negative")
def _():
    x = rand(5, 6)
    inits = {
        "s": np.array([-1, 1], np.int64),
        "e": np.array([-(2**63), 2**63 - 1], np.int64),
        "a": np.array([0, 1], np.int64),
        "t": np.array([-2, 2], np.int64),
    }
    return make_model([node("Slice", ["x", "s", "e", "a", "t"])], {"x": x}, ["y"], inits), {"x": x}


@case("slice_opset10_no_axes")
def _():
    x = rand(4, 5)
    inits = {"s": np.array([1], np.int64), "e": np.array([100], np.int64)}
    return make_model([node("Slice", ["x", "s", "e"])], {"x": x}, ["y"], inits, opset=10), {"x": x}


case("pad_opset9_attrs")(lambda: unary("Pad", opset=9, x=rand(2, 3), pads=[0, 1, 1, 2], value=1.5))
case("pad_opset9_reflect")(lambda: unary("Pad", opset=9, x=rand(3, 4), pads=[1, 2, 1, 2], mode="reflect"))


@case("pad_opset13_inputs_edge")
def _():
    x = rand(1, 2, 3, 3)
    inits = {"p": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)}
    return make_model([node("Pad", ["x", "p"], mode="edge")], {"x": x}, ["y"], inits), {"x": x}


@case("pad_opset13_constant_value_negative_crop")
def _():
    x = rand(3, 4)
    inits = {"p": np.array([1, -1, -1, 2], np.int64), "v": np.array(-3.0, np.float32)}
    return make_model([node("Pad", ["x", "p", "v"])], {"x": x}, ["y"], inits), {"x": x}


@case("pad_opset18_axes")
def _():
    x = rand(2, 3, 4)
    inits = {"p": np.array([1, 2], np.int64), "v": np.array(0.0, np.float32), "a": np.array([-1], np.int64)}
    return make_model([node("Pad", ["x", "p", "v", "a"])], {"x": x}, ["y"], inits, opset=18), {"x": x}


@case("gather_negative_indices")
def _():
    x = rand(5, 4)
    return make_model(
        [node("Gather", ["x", "i"], axis=0)], {"x": x}, ["y"], {"i": np.array([[0, -1], [2, 3]], np.int64)}
    ), {"x": x}


@case("gather_scalar_index_axis1")
def _():
    x = rand(3, 4, 2)
    return make_model([node("Gather", ["x", "i"], axis=1)], {"x": x}, ["y"], {"i": np.array(2, np.int64)}), {"x": x}


@case("gather_runtime_indices")
def _():
    feeds = {"x": rand(6, 3), "i": np.array([5, 0, 2], np.int64)}
    return make_model([node("Gather", ["x", "i"])], feeds, ["y"]), feeds


@case("shape_start_end_and_arithmetic")
def _():
    x = rand(2, 3, 4, 5)
    nodes = [
        node("Shape", ["x"], ["s"], start=1, end=3),
        node("ReduceProd", ["s"], ["p"], keepdims=1),
        node("Concat", ["n", "p"], ["t"], axis=0),
        node("Reshape", ["x", "t"], ["r"]),
        node("Relu", ["r"], ["y"]),
    ]
    return make_model(nodes, {"x": x}, ["y"], {"n": np.array([2, -1], np.int64)}, opset=15), {"x": x}


@case("size_and_gather_elements")
def _():
    feeds = {"x": rand(3, 4), "i": np.array([[0, 3], [-1, 1], [2, 2]], np.int64)}
    nodes = [node("Size", ["x"], ["n"]), node("GatherElements", ["x", "i"], ["g"], axis=1)]
    return make_model(nodes, feeds, {"n": "int64", "g": "float32"}), feeds


@case("constant_and_constant_of_shape")
def _():
    x = rand(2, 3)
    nodes = [
        node("Constant", [], ["c"], value_floats=[1.0, 2.0, 3.0]),
        node("Constant", [], ["shape"], value_ints=[2, 3]),
        node("ConstantOfShape", ["shape"], ["k"], value=helper.make_tensor("v", 1, [1], [0.5])),
        node("Add", ["x", "c"], ["a"]),
        node("Mul", ["a", "k"], ["y"]),
    ]
    return make_model(nodes, {"x": x}, ["y"]), {"x": x}


@case("range_folded")
def _():
    x = rand(5)
    inits = {"s": np.array(0.0, np.float32), "l": np.array(5.0, np.float32), "d": np.array(1.0, np.float32)}
    nodes = [node("Range", ["s", "l", "d"], ["r"], name="range"), node("Add", ["x", "r"])]
    return make_model(nodes, {"x": x}, ["y"], inits, opset=11), {"x": x}


# -- resize -----------------------------------------------------------------------------


def resize_case(opset, x, scales=None, sizes=None, **attrs):
    inits = {"roi": np.array([], np.float32)}
    inputs = ["x", "roi"]
    if opset == 10:
        inits = {"scales": np.array(scales, np.float32)}
        inputs = ["x", "scales"]
    elif sizes is not None:
        inits.update(scales=np.array([], np.float32), sizes=np.array(sizes, np.int64))
        inputs += ["scales", "sizes"]
    else:
        inits["scales"] = np.array(scales, np.float32)
        inputs.append("scales")
    return make_model([node("Resize", inputs, **attrs)], {"x": x}, ["y"], inits, opset=opset), {"x": x}


case("resize_opset10_nearest_x2")(lambda: resize_case(10, rand(1, 2, 3, 4), scales=[1, 1, 2, 2]))
case("resize_linear_half_pixel")(lambda: resize_case(13, rand(1, 2, 4, 5), scales=[1, 1, 2, 1.5], mode="linear"))
case("resize_linear_downsample")(lambda: resize_case(13, rand(1, 2, 8, 9), scales=[1, 1, 0.5, 0.6], mode="linear"))
case("resize_linear_align_corners_sizes")(
    lambda: resize_case(
        13, rand(1, 1, 4, 4), sizes=[1, 1, 7, 9], mode="linear", coordinate_transformation_mode="align_corners"
    )
)
case("resize_linear_pytorch_half_pixel")(
    lambda: resize_case(
        13, rand(1, 1, 5, 5), sizes=[1, 1, 1, 8], mode="linear", coordinate_transformation_mode="pytorch_half_pixel"
    )
)
case("resize_nearest_asymmetric_ceil")(
    lambda: resize_case(
        13, rand(1, 2, 3, 3), scales=[1, 1, 2.5, 1.7], coordinate_transformation_mode="asymmetric", nearest_mode="ceil"
    )
)
case("resize_nearest_half_pixel_prefer_ceil")(
    lambda: resize_case(13, rand(1, 1, 4, 6), sizes=[1, 1, 7, 4], nearest_mode="round_prefer_ceil")
)
case("resize_nearest_align_corners_floor")(
    lambda: resize_case(
        11,
        rand(1, 1, 5, 4),
        scales=[1, 1, 0.6, 1.5],
        coordinate_transformation_mode="align_corners",
        nearest_mode="floor",
    )
)
case("resize_opset19_half_pixel_symmetric")(
    lambda: resize_case(
        19,
        rand(1, 1, 4, 5),
        scales=[1, 1, 1.7, 0.7],
        mode="linear",
        coordinate_transformation_mode="half_pixel_symmetric",
    )
)


@case("resize_opset18_axes_sizes")
def _():
    x = rand(1, 2, 4, 4)
    inits = {"roi": np.array([], np.float32), "scales": np.array([], np.float32), "sizes": np.array([6, 3], np.int64)}
    return make_model(
        [node("Resize", ["x", "roi", "scales", "sizes"], axes=[2, 3], mode="linear")], {"x": x}, ["y"], inits, opset=18
    ), {"x": x}


@case("upsample_opset9")
def _():
    x = rand(1, 2, 3, 3)
    return make_model(
        [node("Upsample", ["x", "s"])], {"x": x}, ["y"], {"s": np.array([1, 1, 2, 3], np.float32)}, opset=9
    ), {"x": x}


# -- quantisation -----------------------------------------------------------------------


@case("quantize_uint8_dequantize")
def _():
    x = rand(2, 3, low=-2, high=2)
    inits = {"s": np.array(0.02, np.float32), "z": np.array(128, np.uint8)}
    nodes = [node("QuantizeLinear", ["x", "s", "z"], ["q"]), node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    return make_model(nodes, {"x": x}, {"q": "uint8", "y": "float32"}, inits), {"x": x}


@case("quantize_int8_per_axis")
def _():
    x = rand(2, 3, 4, low=-3, high=3)
    inits = {"s": np.array([0.01, 0.02, 0.05], np.float32), "z": np.array([0, -3, 5], np.int8)}
    nodes = [
        node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
        node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1),
    ]
    return make_model(nodes, {"x": x}, {"q": "int8", "y": "float32"}, inits), {"x": x}


def reduce_case(op, opset, x=None, axes=(1,), **attrs):
    """A reduction with its axes as an attribute (before opset 18) or an input (from 18)."""
    x = rand(2, 3, 4, low=0.1, high=2) if x is None else x
    if opset >= 18:
        return with_input(op, {"x": x}, ["y"], {"axes": np.array(axes, np.int64)}, opset=opset, **attrs)
    return with_input(op, {"x": x}, ["y"], opset=opset, axes=list(axes), **attrs)


for _op in ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"):
    case(f"{_op.lower()}_opset13_attr")(
        lambda op=_op: reduce_case(op, 13, x=rand(2, 3, 4, low=-2, high=2) if op != "ReduceLogSum" else None)
    )
    case(f"{_op.lower()}_opset18_input_keepdims0")(lambda op=_op: reduce_case(op, 18, axes=(0, -1), keepdims=0))
    case(f"{_op.lower()}_all_axes")(lambda op=_op: reduce_case(op, 13, axes=(0, 1, 2), keepdims=0))
case("reduce_log_sum_exp_large_values")(
    lambda: reduce_case("ReduceLogSumExp", 13, x=np.array([[500.0, 501.0], [-800.0, -801.0]], np.float32))
)


# -- shapes computed at run time (exporters with dynamic axes) ---------------------------
def _seq_model(nodes, out_type="float32", inits=None, opset=17):
    """``x`` is [batch, seq, 12] with batch and seq symbolic; ``shape`` = Shape(x) is available to nodes."""
    x = rand(3, 5, 12)
    nodes = [node("Shape", ["x"], ["shape"])] + nodes
    inits = {"i1": np.array([1], np.int64), "zero": np.array([0], np.int64), **(inits or {})}
    model = make_model(nodes, {"x": x}, {"y": out_type}, inits, opset=opset, input_shapes={"x": ["B", "S", 12]})
    return model, {"x": x}


@case("slice_ends_from_run_time_size")  # BERT: position_ids[:, :seq] with a symbolic seq
def _():
    nodes = [
        node("Gather", ["shape", "i1"], ["seq"], axis=0),
        node("Slice", ["table", "zero", "seq", "i1"], ["y"]),
    ]
    return _seq_model(nodes, inits={"table": rand(1, 9, 4, seed=3)})


@case("slice_starts_and_ends_run_time_negative_step")
def _():
    nodes = [
        node("Gather", ["shape", "i1"], ["seq"], axis=0),
        node("Sub", ["seq", "two"], ["last"]),
        node("Slice", ["x", "last", "minus_big", "i1", "minus_one"], ["y"]),
    ]
    inits = {"two": np.array([2], np.int64), "minus_big": np.array([-(2**62)], np.int64)}
    return _seq_model(nodes, inits={**inits, "minus_one": np.array([-1], np.int64)})


@case("reshape_run_time_target_keeps_static_dim_for_split")  # GPT-2: view(size()[:-1] + (nf,)), then split
def _():
    nodes = [
        node("Slice", ["shape", "zero", "minus_one"], ["lead"]),
        node("Concat", ["lead", "four_three"], ["target"], axis=0),
        node("Reshape", ["x", "target"], ["r"]),
        node("Split", ["r"], ["a", "b", "c"], axis=-1, num_outputs=3),
        node("Mul", ["a", "c"], ["y"]),
    ]
    inits = {"minus_one": np.array([-1], np.int64), "four_three": np.array([4, 3], np.int64)}
    return _seq_model(nodes, inits=inits, opset=18)


@case("reshape_run_time_target_with_zero_and_minus_one")
def _():
    nodes = [
        node("Gather", ["shape", "i1"], ["seq"], axis=0),
        node("Mul", ["seq", "four"], ["seq4"]),
        node("Concat", ["zero", "seq4", "minus_one"], ["target"], axis=0),
        node("Reshape", ["x", "target"], ["y"]),
    ]
    return _seq_model(nodes, inits={"minus_one": np.array([-1], np.int64), "four": np.array([4], np.int64)})


def test_a_run_time_reshape_target_keeps_the_dims_its_producers_tell():
    """[0, S*4, -1] on [B, S, 12]: 0 copies B, S*4 is unknown, -1 is left fresh; Shape[:-1] + [4, 3] keeps B, S, 4, 3."""
    from aot.frontend.onnx import from_onnx

    graph = from_onnx(CASES["reshape_run_time_target_keeps_static_dim_for_split"]()[0])
    reshape = next(n for n in graph.nodes if n.op == "reshape")
    assert reshape.outputs[0].type.shape == ("B", "S", 4, 3)
    graph = from_onnx(CASES["reshape_run_time_target_with_zero_and_minus_one"]()[0])
    shape = graph.outputs[0].type.shape
    assert shape[0] == "B" and all(isinstance(d, str) and d.startswith("?") for d in shape[1:]), shape


@case("quantize_saturates_no_zero_point")
def _():
    x = np.array([-5.0, -0.001, 0.5, 1.49, 300.0], np.float32)
    return make_model(
        [node("QuantizeLinear", ["x", "s"], ["y"])], {"x": x}, {"y": "uint8"}, {"s": np.array(1.0, np.float32)}
    ), {"x": x}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_onnxruntime(name):
    model, feeds = CASES[name]()
    assert_matches_onnxruntime(model, feeds)


def test_lrn_even_size_follows_the_spec():
    """onnxruntime refuses an even LRN size and onnx's reference evaluator loops over the batch axis
    instead of channels, so the oracle here is the spec's formula written out per channel."""
    x = rand(2, 6, 3, 3)
    size, alpha, beta, bias = 4, 0.3, 0.75, 2.0
    model, feeds = unary("LRN", x=x, size=size, alpha=alpha, beta=beta, bias=bias)
    expected = np.empty_like(x)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1] - 1, c + -(-(size - 1) // 2))
        square_sum = (x[:, lo : hi + 1] ** 2).sum(axis=1)
        expected[:, c] = x[:, c] / (bias + alpha / size * square_sum) ** beta
    np.testing.assert_allclose(build_and_load(model).run(feeds)[0], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", range(9, 22))
def test_a_small_network_at_every_opset_from_9_to_21(opset):
    """Conv, BatchNormalization, Relu, MaxPool, Flatten, Gemm, Softmax: ops whose schemas changed across these opsets."""
    x = rand(2, 3, 8, 8)
    assert_matches_onnxruntime(small_cnn_model(batch="N", opset=opset), {"x": x})


BAD_INDICES = {
    "gather_nd": lambda: with_input("GatherND", {"x": rand(4, 5), "i": np.array([[3, 5]], np.int64)}, ["y"]),
    "gather_nd_negative": lambda: with_input("GatherND", {"x": rand(4, 5), "i": np.array([[-5, 0]], np.int64)}, ["y"]),
    "scatter_nd": lambda: with_input(
        "ScatterND", {"x": rand(4, 5), "i": np.array([[4]], np.int64), "u": rand(1, 5)}, ["y"]
    ),
    "scatter_elements": lambda: with_input(
        "ScatterElements", {"x": rand(3, 5), "i": np.array([[0, -6]], np.int64), "u": rand(1, 2)}, ["y"], axis=1
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_INDICES))
def test_an_index_out_of_range_is_a_clear_error_not_a_wrong_read(name):
    import runtime_lite

    model, feeds = BAD_INDICES[name]()
    module = build_and_load(model)
    with pytest.raises(runtime_lite.ExecutionError, match=r"index -?\d+ is out of range for an axis of size \d+"):
        module.run(feeds)


HOSTILE_KERNEL_CALLS = {
    "topk k past the axis": ("topk", (rand(2, 3),), {"k": 4}, "k = 4 is out of range"),
    "topk negative k": ("topk", (rand(2, 3),), {"k": -1}, "k = -1 is out of range"),
    "scatter_nd unknown reduction": (
        "scatter_nd", (rand(3), np.array([[0]], np.int64), rand(1)), {"reduction": "xor"}, "reduction 'xor'",
    ),
    "scatter_nd updates of the wrong shape": (
        "scatter_nd", (rand(4, 5), np.array([[1]], np.int64), rand(2, 5)), {}, "updates have shape",
    ),
    "scatter_elements indices wider than data": (
        "scatter_elements", (rand(2, 2), np.zeros((2, 3), np.int64), rand(2, 3)), {"axis": 0}, "exceed data",
    ),
    "gather_nd batch_dims past the rank": ("gather_nd", (rand(2, 3), np.zeros((2, 1), np.int64)), {"batch_dims": 2},
                                           "do not fit"),
    "gather_nd float indices": ("gather_nd", (rand(2, 3), np.zeros((2, 1), np.float32)), {}, "must be integers"),
    "trilu on a vector": ("trilu", (rand(3),), {}, "rank >= 2"),
}  # fmt: skip


@pytest.mark.parametrize("case_name", sorted(HOSTILE_KERNEL_CALLS))
def test_indexing_kernels_refuse_what_a_bundle_or_an_input_could_lie_about(case_name):
    """Bundles are untrusted: a kernel given attributes or operands that do not fit fails with a clear error."""
    from aot.ir.ops import get_op
    from runtime_lite.kernels import get_kernel

    op, operands, attrs, message = HOSTILE_KERNEL_CALLS[case_name]
    attrs = get_op(op).complete_attrs(attrs, case_name)  # as a bundle records them: every attribute
    with pytest.raises((ValueError, IndexError, TypeError), match=message):
        get_kernel(op).fn(*operands, **attrs)
