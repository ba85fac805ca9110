"""The ops mobile and OCR networks are made of, on the virtual NPU: few regions, host-exact float results.

Each new op runs on the device with the host's own kernel (so float32 results are
bit-exact with the host plan), has a dispatch record from the cost model (engine,
cycles, tier, tiling; layout ops as zero-cost views or DMA copies), and a check that
says why it declines what the device cannot run.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import aot
import aot.compiler.backends.npu  # noqa: F401  (registers the NPU patterns)
import runtime_lite
from aot.compiler.partition import partition
from aot.ir.graph import Graph
from aot.ir.types import TensorType
from tests.helpers import rand
from tests.test_partition import _graph_for
from tests.torch_models import randomize_batch_norm

NEW_OPS = ["hard_swish", "hard_sigmoid", "global_avg_pool", "conv_transpose2d", "layer_norm", "resize", "reshape",
           "flatten", "squeeze", "unsqueeze", "transpose", "concat", "split", "slice"]  # fmt: skip
CONV = dict(strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1])


def _npu_and_host(graph_factory, inputs):
    npu = aot.build(graph_factory(), targets=["npu"], log=None)
    got = runtime_lite.load(npu.to_bytes())
    want = runtime_lite.load(aot.build(graph_factory(), log=None).to_bytes()).run(inputs)
    return npu, got, want


@pytest.mark.parametrize("name", NEW_OPS)
def test_each_new_op_runs_on_the_npu_bit_exact_with_the_host(name):
    x = rand(1, 4, 8, 8, seed=3) * 4  # past hard_swish's knees at -3 and 3
    npu, module, want = _npu_and_host(lambda: _graph_for(name), [x])
    assert module.modules == [{"id": "npu_0", "backend": "npu"}] and npu.regions["host"] == 0
    got = module.run([x])
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_new_ops_against_plain_numpy():
    """Independent of runtime_lite's kernels: the formulas the ops are defined by."""
    x = rand(1, 4, 8, 8, seed=1) * 5

    def graph():
        g = Graph()
        v = g.add_input("x", TensorType((1, 4, 8, 8), "float32"))
        hs = g.op("hard_swish", v)
        g.outputs = [hs, g.op("hard_sigmoid", v, alpha=1 / 6, beta=0.5), g.op("reduce_mean", hs, axes=[2, 3]),
                     g.op("transpose", v, perm=[0, 2, 3, 1])]  # fmt: skip
        return g

    _, module, _ = _npu_and_host(graph, [x])
    hs, hsig, pool, t = module.run([x])
    np.testing.assert_allclose(hs, x * np.clip(x + 3, 0, 6) / 6, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(hsig, np.clip(x / 6 + 0.5, 0, 1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(pool, hs.astype(np.float64).mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(t, x.transpose(0, 2, 3, 1))


def test_dispatch_records_for_the_new_engines():
    def graph():
        g = Graph()
        x = g.add_input("x", TensorType((1, 8, 16, 16), "float32"))
        w = g.constant(rand(8, 8, 3, 3, seed=2), "w")
        c = g.op("conv2d", x, w, name="conv", **CONV)
        hs = g.op("hard_swish", c, name="hs")
        pooled = g.op("reduce_mean", hs, axes=[2, 3], keepdims=1, name="gap")
        flat = g.op("reshape", pooled, shape=[1, 8], name="flat")
        t = g.op("transpose", hs, perm=[0, 2, 3, 1], name="nhwc")
        up = g.op("conv_transpose2d", hs, g.constant(rand(8, 4, 2, 2), "wt"), strides=[2, 2], pads=[0, 0, 0, 0],
                  dilations=[1, 1], output_padding=[0, 0], name="up")  # fmt: skip
        g.outputs = [g.op("dense", flat, g.constant(rand(10, 8), "fc"), name="fc"), t, up]
        return g

    module = runtime_lite.load(aot.build(graph(), targets=["npu"], log=None).to_bytes())
    assert len(module.modules) == 1
    events = {e["node"]: e for e in module.profile([rand(1, 8, 16, 16)]).dispatches}
    assert events["hs"]["engine"] == "ACTIVATION" and events["gap"]["engine"] == "POOLING"
    assert events["up"]["engine"] == "CONV" and events["up"]["macs"] == 8 * 16 * 16 * 4 * 2 * 2
    flat = events["flat"]
    assert flat["engine"] == "DMA" and flat["view"] and flat["cycles"] == 0
    assert flat["writes"][0]["tier"] == events["gap"]["writes"][0]["tier"]  # a view lives where its source is
    nhwc = events["nhwc"]  # a transpose that reorders data: a DMA copy, costed by the bytes it moves
    assert nhwc["engine"] == "DMA" and "view" not in nhwc and nhwc["cycles"] > 0
    assert nhwc["cycles"] == sum(-(-r["bytes"] // 256) for r in (*nhwc["reads"], *nhwc["writes"]))  # all in L1


def test_a_view_leaving_the_region_is_a_fresh_array():
    def graph():
        g = Graph()
        x = g.add_input("x", TensorType((1, 4, 2, 2), "float32"))
        g.outputs = [g.op("reshape", x, shape=[1, 16]), g.op("relu", x)]
        return g

    x = rand(1, 4, 2, 2)
    module = runtime_lite.load(aot.build(graph(), targets=["npu"], log=None).to_bytes())
    flat, _ = module.run([x])
    assert not np.shares_memory(flat, x)
    np.testing.assert_array_equal(flat, x.reshape(1, 16))


@pytest.mark.parametrize(
    "case, reason",
    [
        ("reduce over channels", "averages over the spatial axes (2..) only"),
        ("resize channels", "resizes the spatial axes of NCHW tensors only"),
        ("dilated conv_transpose", "scatters undilated kernels only"),
        ("wide layer_norm", "keeps one row in L1"),
        ("reshape to a tensor shape", "takes it as a static attribute"),
    ],
)
def test_checks_say_why_they_decline(case, reason):
    g = Graph()
    x = g.add_input("x", TensorType((1, 4, 8, 8), "float32"))
    if case == "reduce over channels":
        out = g.op("reduce_mean", x, axes=[1])
    elif case == "resize channels":
        out = g.op("resize", x, mode="nearest", scales=[1.0, 2.0, 1.0, 1.0])
    elif case == "dilated conv_transpose":
        out = g.op("conv_transpose2d", x, g.constant(rand(4, 4, 2, 2)), strides=[1, 1], pads=[0, 0, 0, 0],
                   dilations=[2, 2], output_padding=[0, 0])  # fmt: skip
    elif case == "wide layer_norm":
        v = g.add_input("v", TensorType((2, 70000), "float32"))
        out = g.op("layer_norm", v, g.constant(np.ones(70000, np.float32)), axis=-1)
    else:
        out = g.op("reshape", x, g.add_input("shape", TensorType((2,), "int64")))
    g.outputs = [out]
    pg = partition(g, ["npu"])
    assert pg.regions == []
    (refusal,) = pg.refusals[id(out.producer)]
    assert reason in refusal.reason
    assert reason in str(pg)  # --print-graph shows it under the op


@pytest.mark.parametrize("name", ["mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0"])
def test_mobile_networks_run_as_one_npu_region(name):
    """Before these ops: 30, 33 and 18 backend calls (hard-swish, SE blocks' pooling and gates on the host)."""
    from tests.torchvision_compat import import_torchvision  # imported here: it registers ops for the whole session

    torchvision = import_torchvision()
    if torchvision is None:
        pytest.skip("torchvision is not installed")
    torch.manual_seed(0)
    model = randomize_batch_norm(torchvision.models.get_model(name, weights=None).eval())
    x = torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(1))
    program = torch.export.export(model, (x,))
    npu = aot.build(program, targets=["npu"], log=None)
    module = runtime_lite.load(npu.to_bytes())
    assert len(module.modules) == 1 and npu.regions["host"] == 0
    got = module.run([x.numpy()])[0]
    want = runtime_lite.load(aot.build(program, log=None).to_bytes()).run([x.numpy()])[0]
    np.testing.assert_array_equal(got, want)  # the host's kernels on the device: bit-exact in float
    with torch.no_grad():
        expected = model(x).numpy()
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < 1e-4


def _text_recognizer() -> Graph:
    """The layout of an OCR text-line recognizer (a CRNN/SVTR head): features -> sequence -> attention-ish mix."""
    g = Graph("recognizer")
    x = g.add_input("x", TensorType((1, 3, 16, 64), "float32"))
    c = g.op("hard_swish", g.op("conv2d", x, g.constant(rand(16, 3, 3, 3, seed=4)), strides=[2, 1],
                                pads=[1, 1, 1, 1], dilations=[1, 1]))  # fmt: skip
    pooled = g.op("avg_pool2d", c, kernel_shape=[8, 1], strides=[8, 1], pads=[0, 0, 0, 0], dilations=[1, 1])
    seq = g.op("transpose", g.op("squeeze", pooled, axes=[2]), perm=[0, 2, 1])  # (1, 64, 16)
    normed = g.op("layer_norm", seq, g.constant(rand(16, seed=5)), g.constant(rand(16, seed=6)), axis=-1)
    mixed = g.op("dense", normed, g.constant(rand(32, 16, seed=7)))
    a = g.op("slice", mixed, starts=[0], ends=[16], axes=[2], steps=[1])
    b = g.op("slice", mixed, starts=[16], ends=[32], axes=[2], steps=[1])
    gate = g.op("hard_sigmoid", b, alpha=0.2, beta=0.5)
    joined = g.op("concat", g.op("multiply", a, gate), normed, axis=2)
    logits = g.op("dense", g.op("reshape", joined, shape=[64, 32]), g.constant(rand(10, 32, seed=8)))
    g.outputs = [g.op("softmax", logits, axis=-1)]
    return g


def _text_detector() -> Graph:
    """The layout of an OCR text detector (a DBNet neck/head): upsample, fuse, transposed convs."""
    g = Graph("detector")
    x = g.add_input("x", TensorType((1, 3, 32, 32), "float32"))
    c1 = g.op("hard_swish", g.op("conv2d", x, g.constant(rand(8, 3, 3, 3, seed=9)), strides=[2, 2],
                                 pads=[1, 1, 1, 1], dilations=[1, 1]))  # fmt: skip
    c2 = g.op("relu", g.op("conv2d", c1, g.constant(rand(8, 8, 3, 3, seed=10)), strides=[2, 2],
                           pads=[1, 1, 1, 1], dilations=[1, 1]))  # fmt: skip
    up = g.op("resize", c2, mode="nearest", scales=[1.0, 1.0, 2.0, 2.0], coordinate_transformation_mode="asymmetric",
              nearest_mode="floor")  # fmt: skip
    fused = g.op("concat", up, c1, axis=1)
    smooth = g.op("resize", fused, mode="linear", scales=[1.0, 1.0, 2.0, 2.0])
    head = g.op("conv_transpose2d", smooth, g.constant(rand(16, 1, 2, 2, seed=11)), strides=[2, 2], pads=[0, 0, 0, 0],
                dilations=[1, 1], output_padding=[0, 0])  # fmt: skip
    pieces = g.add_node("split", [head], {"axis": 2, "sizes": [32, 32]}).outputs
    g.outputs = [g.op("sigmoid", pieces[0]), g.op("hard_sigmoid", pieces[1], alpha=0.2, beta=0.5)]
    return g


@pytest.mark.parametrize("factory, shape", [(_text_recognizer, (1, 3, 16, 64)), (_text_detector, (1, 3, 32, 32))])
def test_ocr_shaped_networks_run_as_one_npu_region(factory, shape):
    x = rand(*shape, seed=12)
    npu, module, want = _npu_and_host(factory, [x])
    assert len(module.modules) == 1 and npu.regions["host"] == 0
    for a, b in zip(module.run([x]), want):
        np.testing.assert_array_equal(a, b)


# -- hostile bundles: every new attribute out of range is refused at load, in one line ------


def _payload_of(graph: Graph) -> dict:
    import json

    result = aot.build(graph, targets=["npu"], log=None)
    blob = result.header["modules"][0]["payloads"]["graph"]
    return json.loads(bytes(result.blobs.payloads[blob]))


HOSTILE = [
    ("transpose", {"perm": [0, 0, 1, 2]}, "repeated axis"),
    ("transpose", {"perm": [0, 1, 2, 7]}, "out of bounds"),
    ("squeeze", {"axes": [1]}, "size not equal to one"),
    ("unsqueeze", {"axes": [9]}, "out of bounds"),
    ("reshape", {"shape": [3, 7]}, "reshape"),
    ("flatten", {"axis": 2}, "declares"),  # a valid axis, but another shape than the node's
    ("slice", {"axes": [9]}, "axis 9 is out of range"),
    ("slice", {"steps": [0]}, "a step of 0"),
    ("slice", {"ends": [4]}, "declares"),
    ("concat", {"axis": 7}, "axis 7 is out of range"),
    ("global_avg_pool", {"axes": [2, 9]}, "axis 9 is out of range"),
    ("global_avg_pool", {"keepdims": 5}, "keepdims must be 0 or 1"),
    ("hard_sigmoid", {"alpha": float("nan")}, "alpha must be a finite number"),
    ("layer_norm", {"epsilon": -1.0}, "epsilon must be a finite positive number"),
    ("layer_norm", {"axis": 4}, "axis 4 is out of range"),
    ("resize", {"scales": [1.0, 2.0]}, "one entry per axis"),
    ("resize", {"scales": [1.0, 1.0, 3.0, 3.0]}, "declares"),
    ("resize", {"mode": "cubic"}, "mode must be nearest or linear"),
    ("conv_transpose2d", {"strides": [0, 2]}, "strides"),
    ("conv_transpose2d", {"output_padding": [1, 1]}, "declares"),
    ("split", {"starts": [5]}, "declares"),
]


@pytest.mark.parametrize("name, change, message", HOSTILE, ids=[f"{n}-{next(iter(c))}" for n, c, _ in HOSTILE])
def test_new_op_attributes_out_of_range_are_refused_at_load(name, change, message):
    import json

    from runtime_lite.backends import BackendContext
    from runtime_lite.backends.npu import NpuBackend

    graph = _payload_of(_graph_for(name))
    (kernel,) = [n for n in graph["nodes"] if n["op"] == "kernel"][:1]
    kernel["attrs"]["body"][0]["attrs"].update(change)
    payload = {"graph": memoryview(json.dumps(graph).encode())}
    with pytest.raises(runtime_lite.BundleError, match=message) as caught:
        NpuBackend().init(BackendContext(), payload, {})
    assert "\n" not in str(caught.value) and "bundle field 'npu.graph.nodes[" in str(caught.value)
