"""The TensorRT backend on a CPU-only machine: patterns, recipes proven in onnxruntime, host fallback.

Without a GPU, a recipe is proven by running it in onnxruntime beside the region's
host plan (fp32 within 1e-4 relative L2, fp16 within 1e-2), and a bundle runs its
TensorRT regions on the host from the same bundle. tests/test_tensorrt_standin.py
drives the engine path with a stand-in for the tensorrt module; tests/gpu/ the real one.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

import runtime_lite
from aot.compiler import build
from aot.compiler.backends.recipe import EXPORTS, write_recipe
from aot.compiler.backends.tensorrt import TensorRTOptions
from aot.compiler.backends.tensorrt.verify import TOLERANCE, verify_recipe
from aot.compiler.partition import partition
from aot.errors import BuildError
from aot.ir.graph import Graph
from aot.ir.types import TensorType
from aot.testing import load_zoo_model, relative_l2
from aot.testing.zoo import zoo_input
from runtime_lite.backends.tensorrt.spec import BuildSettings
from tests.helpers import ZOO_MODELS, build_and_load, conv_relu_graph, onnxruntime_outputs, zoo_params
from tests.memory import release_memory

RNG = np.random.default_rng(0)
#: VGG-19 and ZFNet-512 use no op the other zoo models do not (conv, relu, LRN, max pool, gemm,
#: softmax): with TensorRT they add only size, ~100 s of CI. AOT_TEST_LARGE_ZOO=1 adds them back.
LARGE_ZOO = ("vgg19", "zfnet512")
TENSORRT_ZOO = zoo_params(
    [n for n in ZOO_MODELS if os.environ.get("AOT_TEST_LARGE_ZOO") or n not in LARGE_ZOO],
    own_process=(*LARGE_ZOO, "bvlc_alexnet"),  # AlexNet's 233 MB of weights took the shared process to 2.99 GiB
)


def const(g: Graph, *shape: int, name: str = "w", positive: bool = False):
    data = RNG.standard_normal(shape).astype(np.float32)
    return g.constant(np.abs(data) + 0.5 if positive else data, name)


def _graph(x_shape=(2, 4, 6, 6), extra_inputs=()):
    g = Graph("case")
    x = g.add_input("x", TensorType(x_shape, "float32"))
    others = [g.add_input(f"y{i}", TensorType(s, "float32")) for i, s in enumerate(extra_inputs)]
    return g, x, others


def _one_and_three_d(g: Graph, x1, x3):
    def pools(x, nd):
        window = dict(kernel_shape=[2] * nd, strides=[1] * nd, pads=[0] * (2 * nd), dilations=[1] * nd)
        return [g.op(f"max_pool{nd}d", x, **window), g.op(f"avg_pool{nd}d", x, **window)]

    def transpose(x, nd, w):
        return g.op(f"conv_transpose{nd}d", x, w, strides=[2] * nd, pads=[0] * (2 * nd), dilations=[1] * nd,
                    output_padding=[0] * nd)  # fmt: skip

    return [
        *pools(x1, 1),
        *pools(x3, 3),
        transpose(x1, 1, const(g, 4, 2, 3)),
        transpose(x3, 3, const(g, 4, 2, 2, 2, 1)),
        g.op("conv3d", x3, const(g, 3, 4, 2, 2, 1), strides=[1, 1, 1], pads=[0] * 6, dilations=[1, 1, 1]),
    ]


SPATIAL = dict(strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1])
CASES = {
    "conv2d": lambda g, x: g.op("conv2d", x, const(g, 6, 2, 3, 3), const(g, 6, name="b"), strides=[2, 2],
                                pads=[1, 0, 1, 0], dilations=[2, 1], groups=2),
    "conv1d": lambda g, x: g.op("conv1d", g.op("reshape", x, shape=[2, 4, 36]), const(g, 3, 4, 5),
                                strides=[1], pads=[2, 2], dilations=[1]),
    "conv_transpose2d": lambda g, x: g.op("conv_transpose2d", x, const(g, 4, 3, 3, 3), strides=[2, 2],
                                          pads=[1, 1, 1, 1], dilations=[1, 1], output_padding=[1, 1]),
    "1d_3d": lambda g, x: _one_and_three_d(g, g.op("reshape", x, shape=[2, 4, 36]),
                                            g.op("reshape", x, shape=[2, 4, 6, 3, 2])),
    "pools": lambda g, x: [
        g.op("max_pool2d", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 1], ceil_mode=1),
        g.op("avg_pool2d", x, kernel_shape=[3, 3], count_include_pad=1, **SPATIAL),
        g.op("avg_pool2d", x, kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1], dilations=[1, 1]),
    ],
    "dense": lambda g, x: [
        g.op("dense", g.op("flatten", x), const(g, 5, 144), const(g, 5, name="b")),
        g.op("dense", x, const(g, 3, 6), const(g, 3, name="b2")),
        g.op("matmul", x, g.op("transpose", x, perm=[0, 1, 3, 2])),
    ],
    "unary": lambda g, x: [
        g.op(op, x) for op in "relu relu6 sigmoid tanh softplus softsign erf abs negative floor ceil sin cos "
        "hard_swish".split()
    ] + [
        g.op("leaky_relu", x, alpha=0.2), g.op("elu", x, alpha=0.7), g.op("hard_sigmoid", x, alpha=0.3, beta=0.4),
        g.op("gelu", x), g.op("gelu", x, approximate="tanh"), g.op("clip", x, min=-0.5, max=None),
        g.op("clip", x, min=-0.25, max=0.75),
        g.op("log", g.op("exp", x)), g.op("sqrt", g.op("exp", x)), g.op("reciprocal", g.op("exp", x)),
    ],
    "binary": lambda g, x: [
        g.op("add", x, const(g, 1, 4, 1, 1)), g.op("subtract", x, const(g, 6)),
        g.op("multiply", x, x), g.op("divide", x, g.op("exp", x)), g.op("maximum", x, const(g, 6, 6)),
        g.op("minimum", x, const(g, 1, 1, 6, 6)), g.op("power", g.op("exp", x), g.constant(np.float32(2.0))),
        g.op("prelu", x, const(g, 4, 1, 1)),
    ],
    "reductions": lambda g, x: [
        g.op("reduce_mean", x, axes=[2, 3], keepdims=1), g.op("reduce_sum", x, axes=[1], keepdims=0),
        g.op("reduce_max", x), g.op("reduce_min", x, axes=[3], keepdims=1),
        g.op("reduce_prod", g.op("sigmoid", x), axes=[1], keepdims=1),
        g.op("softmax", x, axis=1), g.op("log_softmax", x, axis=3),
    ],
    "shapes": lambda g, x: [
        g.op("concat", x, g.op("relu", x), axis=1), *g.add_node("split", [x], {"axis": 2, "sizes": [2, 4]}).outputs,
        g.op("slice", x, starts=[0, 1], ends=[6, 5], axes=[2, 3], steps=[2, 1]),
        g.op("flatten", x, axis=2), g.op("transpose", x, perm=[0, 2, 3, 1]),
        g.op("squeeze", g.op("unsqueeze", x, axes=[0, 3]), axes=[0]), g.op("reshape", x, shape=[2, -1, 3]),
        g.op("pad", x, pads=[0, 0, 1, 2, 0, 0, 2, 1], mode="constant", value=0.5),
        g.op("pad", x, pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="reflect"),
    ],
    "norms": lambda g, x: [
        g.op("batch_norm", x, const(g, 4), const(g, 4, name="b"), const(g, 4, name="m"),
             const(g, 4, name="v", positive=True), epsilon=1e-3),
        g.op("instance_norm", x, const(g, 4), const(g, 4, name="b")),
        g.op("layer_norm", x, const(g, 6), const(g, 6, name="b"), axis=-1, epsilon=1e-5),
        g.op("lrn", x, size=3, alpha=1e-3, beta=0.75, bias=1.0),
    ],
    "resize": lambda g, x: [
        g.op("resize", x, mode="nearest", scales=[1.0, 1.0, 2.0, 2.0]),
        g.op("resize", x, mode="linear", sizes=[2, 4, 9, 9], coordinate_transformation_mode="half_pixel"),
    ],
    "qdq": lambda g, x: g.op(
        "relu", g.op("dequantize", g.op("quantize", x, g.constant(np.float32(0.02)), dtype="int8"),
                     g.constant(np.float32(0.02))),
    ),
}  # fmt: skip


def _modules(result):
    for record in result.header["modules"]:
        if record["backend"] == "tensorrt":
            yield {k: result.blobs.payloads[i] for k, i in record["payloads"].items()}, record["compile_specs"]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_recipe_matches_the_host_in_onnxruntime(case, precision):
    g, x, _ = _graph()
    outs = CASES[case](g, x)
    g.outputs = list(outs) if isinstance(outs, list) else [outs]
    result = build(
        g, targets=["tensorrt"], min_region_size=1,
        backend_options={"tensorrt": TensorRTOptions(BuildSettings(precision=precision))},
    )  # fmt: skip
    assert result.regions["host"] == 0, f"not every op went to TensorRT: {result.regions}"
    # fp16 in onnx's reference evaluator, which rounds every activation to fp16 as a GPU does
    # (onnxruntime's CPU provider computes most fp16 ops in fp32); it has no opset-17 DequantizeLinear.
    evaluator = "reference" if precision == "fp16" and case != "qdq" else "onnxruntime"
    errors = []
    for module in _modules(result):
        report = verify_recipe(*module, evaluator=evaluator)
        assert report["error"] <= TOLERANCE[precision], report
        errors.append(report["error"])
    if evaluator == "reference":  # (floor/ceil of an fp16 input can be exact; the case as a whole cannot)
        assert max(errors) > 1e-5, "no fp16 rounding at all: is the recipe really fp16?"


def test_every_exported_op_is_exercised():
    used = {n.op for case in CASES.values() for n in _ops(case)}
    assert set(EXPORTS) - used == set()


def _ops(case):
    g, x, _ = _graph()
    case(g, x)
    return g.nodes


def test_fp16_recipe_has_fp16_weights_and_casts_at_the_boundary():
    weight = RNG.standard_normal((16, 3, 3, 3)).astype(np.float32)
    graph = conv_relu_graph(weight)
    model = write_recipe(graph, "fp16")
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [1]  # float32 in
    assert [o.type.tensor_type.elem_type for o in model.graph.output] == [1]  # float32 out
    assert {t.data_type for t in model.graph.initializer} == {10}  # float16 weights
    ops = [n.op_type for n in model.graph.node]
    assert ops[0] == "Cast" and ops[-1] == "Cast" and "Conv" in ops


@pytest.mark.parametrize("name", TENSORRT_ZOO)
def test_zoo_model_with_tensorrt_runs_on_this_cpu_and_its_recipes_are_right(name):
    """Acceptance: --target tensorrt and --target npu --target tensorrt bundles run here, as ORT computes.

    A TensorRT build holds the weights three times (graph, host fallback, recipe) and needs about
    five while it runs: each build is dropped (and its cycles collected, tests/memory.py) before
    the next step takes more, and the two biggest models (VGG-19 548 MB, ZFNet-512 333 MB), with
    AOT_TEST_LARGE_ZOO=1, run in their own process.
    """
    model = load_zoo_model(name, random_weights=True, logits=True)
    feeds = zoo_input(model)
    expected = onnxruntime_outputs(model, feeds, threads=2)
    host = build_and_load(model).run(feeds)
    for targets in (["tensorrt"], ["npu", "tensorrt"]):
        bundle = build(model, targets=targets).to_bytes()
        release_memory()
        ours = runtime_lite.load(bundle, backend_options={"tensorrt": {"allow_engine_build": False}}).run(feeds)
        del bundle
        for a, b, e in zip(ours, host, expected):
            np.testing.assert_array_equal(a, b)  # the fallback is the host plan: exactly the host's result
            assert relative_l2(a, e) <= 1e-4
    result = build(model, targets=["tensorrt"])
    assert result.regions == {"host": 0, "tensorrt": len(result.partitioned.nodes)}
    del result
    for precision in ("fp32", "fp16"):
        options = TensorRTOptions(BuildSettings(precision=precision))
        modules = list(_modules(build(model, targets=["tensorrt"], backend_options={"tensorrt": options})))
        release_memory()
        for module in modules:
            report = verify_recipe(*module, feeds)
            assert report["ok"], report
        del modules, module


def test_a_region_past_protobufs_2_gib_is_a_one_line_build_error(monkeypatch):
    """RegNet-Y-128GF's one region holds 2.6 GB: protobuf refused it with a bare EncodeError (a 1 KiB limit stands in)."""
    from aot.compiler.backends.tensorrt import codegen

    monkeypatch.setattr(codegen, "RECIPE_LIMIT_BYTES", 1024)
    weight = RNG.standard_normal((16, 3, 3, 3)).astype(np.float32)  # 1.7 KB
    with pytest.raises(BuildError, match=r"^tensorrt: region \S+ holds 0\.00 GiB of weights, past the 2 GiB") as e:
        build(conv_relu_graph(weight), targets=["tensorrt"], min_region_size=1)
    assert "\n" not in str(e.value)
    monkeypatch.setattr(codegen, "RECIPE_LIMIT_BYTES", 4096)
    assert build(conv_relu_graph(weight), targets=["tensorrt"], min_region_size=1).regions["tensorrt"] == 2


def test_tiny_regions_stay_on_the_host_unless_asked():
    weight = RNG.standard_normal((16, 3, 3, 3)).astype(np.float32)
    assert build(conv_relu_graph(weight), targets=["tensorrt"]).regions == {"host": 2}
    assert build(conv_relu_graph(weight), targets=["tensorrt"], min_region_size=1).regions == {"host": 0, "tensorrt": 2}


def _single(op_builder, x_shape=(2, 4, 6, 6), dtype="float32"):
    g = Graph("case")
    x = g.add_input("x", TensorType(x_shape, dtype))
    g.outputs = [op_builder(g, x)]
    return partition(g, ["tensorrt"], min_region_size=1).op_counts()


@pytest.mark.parametrize(
    "reason, builder, x_shape, dtype",
    [
        ("int32 tensors", lambda g, x: g.op("relu", x), (2, 4), "int32"),
        ("float64 tensors", lambda g, x: g.op("relu", x), (2, 4), "float64"),
        ("a symbolic dim beyond the batch", lambda g, x: g.op("relu", x), ("N", "C"), "float32"),
        ("dilated pooling", lambda g, x: g.op("max_pool2d", x, kernel_shape=[2, 2], strides=[1, 1],
                                              pads=[0, 0, 0, 0], dilations=[2, 2]), (1, 2, 8, 8), "float32"),
        ("a run-time reshape target", lambda g, x: g.op("reshape", x, g.op("shape", x)), (2, 4), "float32"),
        ("weights computed at run time", lambda g, x: g.op("conv2d", x, g.op("relu", x), strides=[1, 1],
                                                           pads=[0, 0, 0, 0], dilations=[1, 1]), (1, 1, 3, 3), "float32"),
        ("a non-zero zero point", lambda g, x: g.op("quantize", x, g.constant(np.float32(0.1)),
                                                   g.constant(np.int8(3)), dtype="int8"), (2, 4), "float32"),
        ("uint8 quantization", lambda g, x: g.op("quantize", x, g.constant(np.float32(0.1)), dtype="uint8"),
         (2, 4), "float32"),
    ],
)  # fmt: skip
def test_tensorrt_checks_reject_what_it_cannot_build(reason, builder, x_shape, dtype):
    counts = _single(builder, x_shape, dtype)
    root = "quantize" if "zero" in reason or "uint8" in reason else None
    assert counts.get("tensorrt", 0) == 0 or (root is None and counts["host"] > 0), (reason, counts)


def test_a_symbolic_batch_is_fine_and_spans_the_profile():
    counts = _single(lambda g, x: g.op("relu", x), ("N", 4), "float32")
    assert counts == {"host": 0, "tensorrt": 1}


def test_unknown_precision_is_a_clear_error():
    with pytest.raises(ValueError, match="precision 'int4'"):
        BuildSettings(precision="int4")
    weight = RNG.standard_normal((16, 3, 3, 3)).astype(np.float32)
    with pytest.raises(BuildError, match="precision 'bf16'"):
        write_recipe(conv_relu_graph(weight), "bf16")


def test_without_a_gpu_the_region_runs_on_the_host_and_says_so_once(caplog):
    weight = RNG.standard_normal((16, 3, 3, 3)).astype(np.float32)
    result = build(conv_relu_graph(weight), targets=["tensorrt"], min_region_size=1)
    assert any("no engine built" in note for note in result.notes)
    with caplog.at_level(logging.INFO):
        module = runtime_lite.load(result.to_bytes())
        data = RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)
        for _ in range(3):
            out = module.run({"data": data})[0]
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("runtime_lite")]
    assert len(messages) == 1 and "runs on the host" in messages[0], messages  # the placement warning, once
    (described,) = module.modules
    assert described["backend"] == "tensorrt" and described["placement"].startswith("on the host")
    expected = build_and_load(conv_relu_graph(weight)).run({"data": data})[0]
    np.testing.assert_array_equal(out, expected)
    profile = module.profile({"data": data})
    assert any(e.get("backend") == "tensorrt" and e.get("placement") == "host" for e in profile.events)


def test_an_invalid_recipe_is_reported_under_its_region_name_not_a_weights():
    from onnx import helper as onnx_helper

    from aot.compiler.backends.recipe import RecipeWriter, _check

    w = RecipeWriter("fp32")
    w.initializers.append(("weight_z", np.zeros((32, 32), np.float32)))  # large: stood in by an input
    w.initializers.append(("bias_z", np.zeros(2, np.float32)))
    w.nodes.append(onnx_helper.make_node("Add", ["x", "undefined"], ["y"]))
    x = onnx_helper.make_tensor_value_info("x", 1, [2])
    y = onnx_helper.make_tensor_value_info("y", 1, [2])
    with pytest.raises(BuildError, match="recipe for 'tensorrt_0' is not valid ONNX"):
        _check(w, "tensorrt_0", [x], [y])
