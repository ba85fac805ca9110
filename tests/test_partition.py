"""Partitioning: composites, regions, the no-cycle rule, and the NPU's patterns and checks."""

from __future__ import annotations

import numpy as np
import pytest

import aot.compiler.backends.npu  # noqa: F401  (registers the NPU patterns)
from aot.compiler.partition import (
    drop_small_regions,
    fuse_ops_by_pattern,
    merge_composite_functions,
    partition,
)
from aot.compiler.pattern import is_op, wildcard
from aot.compiler.pattern_registry import FusionPattern, get_patterns_with_prefix
from aot.ir.graph import Graph
from aot.ir.types import TensorType

NPU = get_patterns_with_prefix("npu")
CONV = dict(strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1])


def conv_relu():
    """The tutorial's ConvReLU: data and weight are both function parameters."""
    g = Graph("ConvReLU")
    data = g.add_input("data", TensorType((1, 3, 32, 32), "float32"))
    weight = g.constant(np.random.default_rng(0).standard_normal((16, 3, 3, 3)).astype(np.float32), "weight")
    g.outputs = [g.op("relu", g.op("conv2d", data, weight, name="conv", **CONV), name="out")]
    return g


def matmul_relu():
    g = Graph("MatmulReLU")
    x = g.add_input("x", TensorType((2, 4), "float32"))
    w = g.add_input("w", TensorType((4, 8), "float32"))
    g.outputs = [g.op("relu", g.op("matmul", x, w, name="y"), name="z")]
    return g


def test_tutorial_conv_relu_becomes_one_fused_composite():
    pg = fuse_ops_by_pattern(conv_relu(), NPU, bind_constants=False, annotate_codegen=True)
    pg = merge_composite_functions(pg)
    assert [c.name for c in pg.composites] == ["npu.conv2d_relu_fused"]
    (region,) = pg.regions
    assert region.backend == "npu" and [v.name for v in region.inputs] == ["data", "weight"]
    text = str(pg)
    assert 'region npu_0 {Codegen="npu"} (%data, @weight: float32[16,3,3,3]) -> (%out)' in text
    assert "composite npu.conv2d_relu_fused" in text and "%out = relu(%conv)" in text


def test_bind_constants_keeps_weights_inside_the_region():
    pg = merge_composite_functions(fuse_ops_by_pattern(conv_relu(), NPU, bind_constants=True))
    assert [v.name for v in pg.regions[0].inputs] == ["data"]


def test_tutorial_matmul_relu():
    pg = merge_composite_functions(fuse_ops_by_pattern(matmul_relu(), NPU))
    assert [c.name for c in pg.composites] == ["npu.matmul_relu_fused"]
    assert [v.name for v in pg.regions[0].inputs] == ["x", "w"]


def test_adjacent_composites_merge_into_one_region():
    g = Graph()
    x = g.add_input("x", TensorType((1, 8), "float32"))
    y = g.op("sigmoid", g.op("tanh", g.op("relu", x)))
    g.outputs = [y]
    pg = merge_composite_functions(fuse_ops_by_pattern(g, NPU))
    assert len(pg.composites) == 3 and len(pg.regions) == 1
    assert pg.regions[0].ops == ["relu", "tanh", "sigmoid"]


def test_diamond_does_not_merge_into_a_cycle():
    """A-conv -> B-gelu -> A-add, with A-conv also feeding A-add: the two A parts must stay apart."""
    g = Graph()
    x = g.add_input("x", TensorType((1, 3, 8, 8), "float32"))
    w = g.constant(np.ones((3, 3, 1, 1), np.float32), "w")
    conv = g.op("conv2d", x, w, name="conv", **CONV)
    gelu = g.op("gelu", conv, name="gelu")
    g.outputs = [g.op("add", conv, gelu, name="add")]
    a = [p for p in NPU if p.name in ("npu.conv2d", "npu.add")]
    b = [FusionPattern("other.gelu", is_op("gelu")(wildcard()))]
    pg = fuse_ops_by_pattern(g, a)
    pg = fuse_ops_by_pattern(pg, b)
    pg = merge_composite_functions(pg)
    assert [(r.id, r.ops) for r in pg.regions] == [("npu_0", ["conv2d"]), ("other_0", ["gelu"]), ("npu_1", ["add"])]


def test_min_region_size_keeps_tiny_regions_on_the_host():
    g = Graph()
    x = g.add_input("x", TensorType((1, 8), "float32"))
    h = g.op("exp", g.op("relu", x))  # exp: not an NPU op
    g.outputs = [g.op("sigmoid", g.op("tanh", h))]
    pg = partition(g, ["npu"], min_region_size=2)
    assert [r.ops for r in pg.regions] == [["tanh", "sigmoid"]]
    assert pg.op_counts() == {"host": 2, "npu": 2}
    assert drop_small_regions(pg, 3) and pg.regions == []


def test_host_target_alone_partitions_nothing():
    pg = partition(conv_relu(), ["host"])
    assert pg.regions == [] and pg.op_counts() == {"host": 2}


def _graph_for(name: str) -> Graph:
    """The smallest graph each NPU pattern should claim, with nothing of higher priority around it."""
    from tests.test_npu_int8_mobile import _graph as int8_chain

    int8_cases = {"int8_lut": "hard_swish", "int8_global_avg_pool": "global_avg_pool", "int8_concat": "concat",
                  "int8_move": "transpose"}  # fmt: skip
    if name in int8_cases:
        return int8_chain(int8_cases[name])
    g = Graph(name)
    f32 = "float32"
    x4 = g.add_input("x", TensorType((1, 4, 8, 8), f32))
    rng = np.random.default_rng(0)

    def const(*shape, dtype=np.float32):
        return g.constant(rng.standard_normal(shape).astype(dtype) if dtype == np.float32 else np.zeros(shape, dtype))

    if name == "conv2d_relu_fused":
        out = g.op("relu", g.op("conv2d", x4, const(4, 4, 3, 3), **CONV))
    elif name == "matmul_relu_fused":
        out = g.op("relu", g.op("matmul", x4, const(8, 8)))
    elif name == "depthwise_conv2d":
        out = g.op("conv2d", x4, const(4, 1, 3, 3), groups=4, **CONV)
    elif name == "conv2d":
        out = g.op("conv2d", x4, const(8, 2, 3, 3), const(8), groups=2, **CONV)  # grouped, not depthwise
    elif name == "conv1d":
        x = g.add_input("s", TensorType((1, 4, 16), f32))
        out = g.op("conv1d", x, const(4, 4, 3), strides=[1], pads=[0, 0], dilations=[1])
    elif name == "matmul":
        out = g.op("matmul", x4, const(8, 8))
    elif name == "dense":
        x = g.add_input("v", TensorType((2, 8), f32))
        out = g.op("dense", x, const(4, 8), const(4))
    elif name in ("avg_pool2d", "max_pool2d"):
        out = g.op(name, x4, kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1])
    elif name == "batch_norm":
        out = g.op("batch_norm", x4, const(4), const(4), const(4), g.constant(np.ones(4, np.float32)))
    elif name in ("softmax", "gelu", "relu", "relu6", "sigmoid", "tanh"):
        out = g.op(name, x4)
    elif name in ("divide", "subtract", "multiply", "add"):
        out = g.op(name, x4, const(8))
    elif name in ("int8_conv", "int8_dense"):  # dequantize -> op -> relu6 -> quantize, symmetric int8
        q = g.add_input("q", TensorType((1, 4, 8, 8), "int8"))
        scale, zero = g.constant(np.float32(0.1)), g.constant(np.int8(0))
        x = g.op("dequantize", q, scale, zero)
        w_q = g.constant(rng.integers(-127, 128, (4, 4, 3, 3) if name == "int8_conv" else (4, 8)).astype(np.int8))
        w = g.op("dequantize", w_q, g.constant(np.full(4, 0.01, np.float32)), const(4, dtype=np.int8), axis=0)
        y = g.op("conv2d", x, w, const(4), **CONV) if name == "int8_conv" else g.op("dense", x, w, const(4))
        out = g.op("quantize", g.op("relu6", y), scale, zero, dtype="int8")
    elif name == "dequantize":
        q = g.add_input("q", TensorType((1, 4, 8, 8), "int8"))
        out = g.op("dequantize", q, g.constant(np.float32(0.1)), g.constant(np.int8(3)))
    elif name == "quantize":
        out = g.op("quantize", x4, g.constant(np.float32(0.1)), g.constant(np.int8(0)), dtype="int8")
    elif name in ("hard_swish", "hard_sigmoid"):
        out = g.op(name, x4)
    elif name == "global_avg_pool":
        out = g.op("reduce_mean", x4, axes=[2, 3], keepdims=1)
    elif name == "conv_transpose2d":
        out = g.op(name, x4, const(4, 2, 2, 2), strides=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1],
                   output_padding=[0, 0])  # fmt: skip
    elif name == "layer_norm":
        out = g.op("layer_norm", x4, const(8), const(8), axis=-1)
    elif name == "resize":
        out = g.op("resize", x4, mode="linear", scales=[1.0, 1.0, 2.0, 2.0])
    elif name in ("reshape", "flatten", "squeeze", "unsqueeze", "transpose"):
        attrs = {"reshape": {"shape": [1, 4, 64]}, "flatten": {"axis": 1}, "squeeze": {"axes": [0]},
                 "unsqueeze": {"axes": [0]}, "transpose": {"perm": [0, 2, 3, 1]}}[name]  # fmt: skip
        out = g.op(name, x4, **attrs)
    elif name == "concat":
        out = g.op("concat", x4, x4, axis=1)
    elif name == "split":
        out = g.add_node("split", [x4], {"axis": 1, "sizes": [1, 3]}).outputs[1]
    elif name == "slice":
        out = g.op("slice", x4, starts=[1], ends=[3], axes=[1], steps=[1])
    else:  # pragma: no cover
        raise AssertionError(name)
    g.outputs = [out]
    return g


@pytest.mark.parametrize("name", [p.name.split(".", 1)[1] for p in NPU])
def test_every_npu_pattern_can_match(name):
    pg = fuse_ops_by_pattern(_graph_for(name), NPU)
    assert [c.name for c in pg.composites] == [f"npu.{name}"]


def test_clip_0_6_is_relu6_but_other_clips_are_not():
    for bounds, expected in (((0.0, 6.0), ["npu.relu6"]), ((0.0, 1.0), [])):
        g = Graph()
        x = g.add_input("x", TensorType((4,), "float32"))
        g.outputs = [g.op("clip", x, min=bounds[0], max=bounds[1])]
        assert [c.name for c in fuse_ops_by_pattern(g, NPU).composites] == expected


@pytest.mark.parametrize(
    "case",
    ["uint8 quantize", "float64", "int64", "symbolic batch", "bigger than DRAM", "leaking intermediate"],
)
def test_npu_checks_reject_what_it_cannot_run(case):
    g = Graph()
    if case == "uint8 quantize":
        x = g.add_input("x", TensorType((4,), "float32"))
        g.outputs = [g.op("quantize", x, g.constant(np.float32(0.1)), g.constant(np.uint8(0)), dtype="uint8")]
    elif case in ("float64", "int64"):
        x = g.add_input("x", TensorType((4,), case))
        g.outputs = [g.op("relu", x)]
    elif case == "symbolic batch":
        x = g.add_input("x", TensorType(("N", 4), "float32"))
        g.outputs = [g.op("relu", x)]
    elif case == "bigger than DRAM":
        x = g.add_input("x", TensorType((1, 300_000_000), "float32"))  # 1.2 GB > 1 GiB
        g.outputs = [g.op("relu", x)]
    else:
        x = g.add_input("x", TensorType((1, 4, 8, 8), "float32"))
        conv = g.op("conv2d", x, g.constant(np.ones((4, 4, 1, 1), np.float32)), **CONV)
        g.outputs = [g.op("relu", conv), g.op("exp", conv)]
    names = [c.name for c in fuse_ops_by_pattern(g, NPU).composites]
    if case == "leaking intermediate":
        assert names == ["npu.conv2d", "npu.relu"]  # not fused: the conv's output is also read by exp
    else:
        assert names == []


def test_build_says_why_work_stayed_on_the_host():
    """A symbolic batch keeps every NPU op on the host: the summary says so, per target, with a reason."""
    import onnx

    import aot
    from tests.helpers import make_model, rand

    nodes = [
        onnx.helper.make_node("Conv", ["x", "w"], ["c"]),
        onnx.helper.make_node("Relu", ["c"], ["r"]),
        onnx.helper.make_node("Reshape", ["r", "shape"], ["f"]),
        onnx.helper.make_node("Exp", ["f"], ["y"]),  # no npu pattern
    ]
    inits = {"w": rand(4, 3, 3, 3), "shape": np.array([0, -1], np.int64)}
    model = make_model(nodes, {"x": rand(1, 3, 8, 8)}, ["y"], inits, input_shapes={"x": ["N", 3, 8, 8]})
    result = aot.build(model, targets=["npu"])
    (note,) = [n for n in result.notes if n.startswith("npu left on the host")]
    assert "refused conv2d, relu, reshape" in note and "has a symbolic shape float32[N,3,8,8]" in note
    assert "no npu pattern for exp" in note
    printed = str(result.partitioned)
    assert "# stays on the host: npu.conv2d: %x has a symbolic shape float32[N,3,8,8]" in printed
    fixed = aot.build(model, targets=["npu"], input_shapes={"x": (1, 3, 8, 8)})
    assert [n for n in fixed.notes if "refused" in n] == [] and fixed.regions["npu"] == 3
