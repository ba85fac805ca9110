"""A constant zero pad of the spatial axes folds into the convolution (or count-including average pool) after it.

Each case is an ONNX model checked against onnxruntime and by its ops after the build: the pad gone, or kept
where folding it would change the result (other modes and values, crops, batch or channel pads, max pooling,
average pooling that does not count padding). A crepe-like stack (torchcrepe pads 31/32 before every conv)
builds for the NPU as one region.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from onnx import helper

import aot
import runtime_lite
from aot.ir import Graph, TensorType
from aot.passes import fold_pads
from tests.helpers import assert_matches_onnxruntime, evaluate_graph, make_model, rand


def _pad_nodes(pads: list[int], opset: int, mode: str = "constant", value: float = 0.0) -> tuple[list, dict]:
    """A Pad of ``x`` into ``p`` as the opset writes it: attributes before 11, inputs since."""
    if opset < 11:
        return [helper.make_node("Pad", ["x"], ["p"], pads=pads, mode=mode, value=value)], {}
    inits = {"pads": np.array(pads, np.int64), "value": np.array(value, np.float32)}
    return [helper.make_node("Pad", ["x", "pads", "value"], ["p"], mode=mode)], inits


def _pad_then(
    op: str, shape: tuple, pads: list[int], opset: int = 13, mode: str = "constant", value: float = 0.0, attrs=None
):
    """x -> Pad -> ``op`` (Conv with a weight of 3 taps per spatial axis, or a pool; its ``attrs``) -> y."""
    attrs = attrs or {}
    nodes, inits = _pad_nodes(pads, opset, mode, value)
    rank = len(shape)
    if op == "Conv":  # the weight takes the padded channels, per group
        channels = (shape[1] + pads[1] + pads[rank + 1]) // attrs.get("group", 1)
        inits["w"], inits["b"] = rand(4, channels, *[3] * (rank - 2), seed=1), rand(4, seed=2)
        nodes.append(helper.make_node("Conv", ["p", "w", "b"], ["y"], **attrs))
    else:
        nodes.append(helper.make_node(op, ["p"], ["y"], **attrs))
    return make_model(nodes, {"x": rand(*shape, seed=3)}, ["y"], inits, opset=opset)


def _ops_after_build(model, **options) -> list[str]:
    result = aot.build(model, log=None, **options)
    nodes = result.partitioned.nodes if result.partitioned else result.graph.nodes
    return [n.op for n in nodes]


FOLDED = {
    "conv1d asymmetric": ("Conv", (1, 2, 10), [0, 0, 3, 0, 0, 1], 13, {}),
    "conv2d asymmetric, with pads of its own and stride 2": (
        "Conv",
        (1, 2, 7, 6),
        [0, 0, 2, 1, 0, 0, 0, 3],
        13,
        {"pads": [1, 0, 0, 1], "strides": [2, 2]},
    ),
    "conv2d, pads as attributes (opset 9)": ("Conv", (2, 3, 5, 5), [0, 0, 1, 0, 0, 0, 1, 2], 9, {}),
    "conv2d dilated, one axis padded": ("Conv", (1, 2, 9, 9), [0, 0, 0, 4, 0, 0, 0, 4], 13, {"dilations": [2, 2]}),
    "conv2d grouped, pads wider than the kernel": ("Conv", (1, 4, 4, 4), [0, 0, 5, 0, 0, 0, 6, 1], 13, {"group": 2}),
    "average pool counting padding": (
        "AveragePool",
        (1, 2, 6, 6),
        [0, 0, 1, 0, 0, 0, 1, 1],
        13,
        {"kernel_shape": [3, 3], "count_include_pad": 1, "pads": [1, 1, 0, 0]},
    ),
}


@pytest.mark.parametrize("case", FOLDED)
def test_a_zero_spatial_pad_folds_into_its_reader(case):
    op, shape, pads, opset, attrs = FOLDED[case]
    model = _pad_then(op, shape, pads, opset, attrs=attrs)
    ops = _ops_after_build(model)
    assert "pad" not in ops and len(ops) == 1, ops
    assert_matches_onnxruntime(model, {"x": rand(*shape, seed=4)}, rtol=1e-5, atol=1e-5)


def test_opset_18_pads_for_listed_axes_fold():
    """Opset 18's ``axes`` input: pads for the listed axes only (here the last one, counted from the end)."""
    nodes = [
        helper.make_node("Pad", ["x", "pads", "", "axes"], ["p"]),
        helper.make_node("Conv", ["p", "w"], ["y"]),
    ]
    inits = {"pads": np.array([2, 5], np.int64), "axes": np.array([-1], np.int64), "w": rand(3, 2, 1, 4, seed=1)}
    model = make_model(nodes, {"x": rand(1, 2, 3, 6)}, ["y"], inits, opset=18)
    ops = _ops_after_build(model)
    assert ops == ["conv2d"], ops
    assert_matches_onnxruntime(model, {"x": rand(1, 2, 3, 6, seed=5)}, rtol=1e-5, atol=1e-5)


def test_the_folded_conv_carries_the_sum_of_both_pads():
    g = Graph("g")
    x = g.add_input("x", TensorType((1, 2, 8, 8), "float32"))
    p = g.op("pad", x, pads=[0, 0, 1, 2, 0, 0, 3, 4])
    w = g.constant(rand(3, 2, 3, 3, seed=1), "w")
    g.outputs = [g.op("conv2d", p, w, strides=[1, 1], pads=[1, 1, 0, 0], dilations=[1, 1])]
    data = rand(1, 2, 8, 8, seed=2)
    before = evaluate_graph(g, [data])
    assert fold_pads(g) == 1
    (conv,) = g.nodes
    assert conv.inputs[0] is x and conv.attrs["pads"] == [2, 3, 3, 4]
    np.testing.assert_allclose(evaluate_graph(g, [data])[0], before[0], rtol=1e-5, atol=1e-5)


LEFT_ALONE = {
    "reflect": ("Conv", (1, 2, 6, 6), [0, 0, 1, 1, 0, 0, 1, 1], {"mode": "reflect"}, {}),
    "edge": ("Conv", (1, 2, 6, 6), [0, 0, 1, 1, 0, 0, 1, 1], {"mode": "edge"}, {}),
    "a non-zero value": ("Conv", (1, 2, 6, 6), [0, 0, 1, 1, 0, 0, 1, 1], {"value": 0.5}, {}),
    "a negative pad (a crop)": ("Conv", (1, 2, 6, 6), [0, 0, -1, 1, 0, 0, 1, 1], {}, {}),
    "the channel axis": ("Conv", (1, 2, 6, 6), [0, 1, 1, 1, 0, 1, 1, 1], {}, {}),
    "the batch axis": ("Conv", (1, 2, 6, 6), [1, 0, 1, 1, 0, 0, 1, 1], {}, {}),
    "max pooling (pads with -inf)": ("MaxPool", (1, 2, 6, 6), [0, 0, 1, 1, 0, 0, 1, 1], {}, {"kernel_shape": [3, 3]}),
    "average pooling without the padding counted": (
        "AveragePool",
        (1, 2, 6, 6),
        [0, 0, 1, 1, 0, 0, 1, 1],
        {},
        {"kernel_shape": [3, 3]},
    ),
    "average pooling with ceil_mode": (
        "AveragePool",
        (1, 2, 6, 6),
        [0, 0, 1, 1, 0, 0, 1, 1],
        {},
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "count_include_pad": 1},
    ),
    "average pooling whose pads would reach its kernel": (
        "AveragePool",
        (1, 2, 6, 6),
        [0, 0, 2, 0, 0, 0, 0, 0],
        {},
        {"kernel_shape": [2, 2], "count_include_pad": 1},
    ),
}


@pytest.mark.parametrize("case", LEFT_ALONE)
def test_a_pad_that_does_not_fold_is_left_alone(case):
    op, shape, pads, pad_options, attrs = LEFT_ALONE[case]
    model = _pad_then(op, shape, pads, **pad_options, attrs=attrs)
    ops = _ops_after_build(model)
    assert "pad" in ops, ops
    assert_matches_onnxruntime(model, {"x": rand(*shape, seed=4)}, rtol=1e-5, atol=1e-5)


def test_a_pad_read_elsewhere_stays_for_that_reader_only():
    """The conv reads x with the pads folded in; the relu and the graph output still read the padded value."""
    nodes, inits = _pad_nodes([0, 0, 1, 2, 0, 0, 2, 1], 13)
    nodes += [
        helper.make_node("Conv", ["p", "w"], ["y"]),
        helper.make_node("Relu", ["p"], ["r"]),
    ]
    inits["w"] = rand(3, 2, 3, 3, seed=1)
    model = make_model(nodes, {"x": rand(1, 2, 5, 5)}, ["y", "r", "p"], inits)
    result = aot.build(model, log=None)
    conv = next(n for n in result.graph.nodes if n.op == "conv2d")
    assert conv.inputs[0] is result.graph.inputs[0] and conv.attrs["pads"] == [1, 2, 2, 1]
    assert [n.op for n in result.graph.nodes].count("pad") == 1
    assert_matches_onnxruntime(model, {"x": rand(1, 2, 5, 5, seed=4)})


def test_folded_pads_build_for_onnxruntime_too():
    """The folded conv and average pool go into onnxruntime's recipe as they are (pads wider than the conv's
    kernel, asymmetric): the region computes what onnxruntime computes on the original model."""
    model = _pad_then("Conv", (1, 2, 4, 4), [0, 0, 5, 0, 0, 0, 6, 1], attrs={"pads": [1, 0, 0, 2]})
    assert "pad" not in _ops_after_build(model, targets=["onnxruntime"])
    assert_matches_onnxruntime(model, {"x": rand(1, 2, 4, 4, seed=4)}, targets=["onnxruntime"])


def _crepe_like(layers: int = 4) -> tuple:
    """torchcrepe's structure, scaled down: frames [N, 64] -> [N, 1, 64, 1], then per layer a zero pad along
    time (the first wider), a conv with no padding of its own, relu, batch norm and a 2x1 max pool; a dense
    layer and a sigmoid on top."""
    nodes = [helper.make_node("Reshape", ["x", "image"], ["a0"])]
    inits = {"image": np.array([-1, 1, 64, 1], np.int64)}
    channels, length = 1, 64
    for i in range(layers):
        kernel, stride = (8, 2) if i == 0 else (4, 1)
        pad = [0, 0, 3, 0, 0, 0, 4, 0] if i == 0 else [0, 0, 1, 0, 0, 0, 2, 0]
        inits[f"pads{i}"] = np.array(pad, np.int64)
        inits[f"w{i}"] = rand(8, channels, kernel, 1, seed=10 + i)
        inits[f"b{i}"] = rand(8, seed=20 + i)
        for j, name in enumerate("smtv"):
            low, high = (0.5, 1.5) if name in "sv" else (-0.5, 0.5)
            inits[f"{name}{i}"] = rand(8, seed=30 + 4 * i + j, low=low, high=high)
        nodes += [
            helper.make_node("Pad", [f"a{i}", f"pads{i}"], [f"p{i}"]),
            helper.make_node("Conv", [f"p{i}", f"w{i}", f"b{i}"], [f"c{i}"], strides=[stride, 1]),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
            helper.make_node("BatchNormalization", [f"r{i}", *(f"{n}{i}" for n in "stmv")], [f"n{i}"]),
            helper.make_node("MaxPool", [f"n{i}"], [f"a{i + 1}"], kernel_shape=[2, 1], strides=[2, 1]),
        ]
        channels, length = 8, (length + sum(pad) - kernel) // stride + 1
        length //= 2
    nodes += [
        helper.make_node("Flatten", [f"a{layers}"], ["f"]),
        helper.make_node("Gemm", ["f", "gw", "gb"], ["g"], transB=1),
        helper.make_node("Sigmoid", ["g"], ["y"]),
    ]
    inits["gw"], inits["gb"] = rand(16, channels * length, seed=50), rand(16, seed=51)
    return make_model(nodes, {"x": rand(1, 64)}, ["y"], inits), layers


def test_a_crepe_like_stack_runs_on_the_npu_as_one_region():
    """Before the fold every pad was a host island: ``layers`` regions, 2 * ``layers`` transitions."""
    model, layers = _crepe_like()
    result = aot.build(model, targets=["npu"], log=None)
    npu_regions = [r for r in result.partitioned.regions if r.backend == "npu"]
    assert len(npu_regions) == 1, [r.id for r in result.partitioned.regions]
    assert result.op_counts.get("pad", 0) == 0 and result.op_counts["conv2d"] == layers
    assert not any("pad" in note for note in result.notes), result.notes
    assert_matches_onnxruntime(model, {"x": rand(1, 64, seed=6)}, rtol=1e-4, atol=1e-5, targets=["npu"])


class _PadConv(torch.nn.Module):
    """torchcrepe's layer: ``F.pad`` (zero, along time) then a conv with no padding of its own."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 4, (8, 1), stride=(2, 1))
        self.conv2 = torch.nn.Conv2d(4, 4, (4, 1))

    def forward(self, x):
        x = x[:, None, :, None]
        x = F.max_pool2d(torch.relu(self.conv1(F.pad(x, (0, 0, 3, 4)))), (2, 1), (2, 1))
        return torch.relu(self.conv2(F.pad(x, (0, 0, 1, 2))))


def test_torch_pads_fold_and_match_pytorch():
    torch.manual_seed(0)
    model = _PadConv().eval()
    x = torch.randn(2, 64)
    program = torch.export.export(model, (x,))
    result = aot.build(program, targets=["npu"], log=None)
    assert result.op_counts.get("pad", 0) == 0, result.op_counts
    assert len([r for r in result.partitioned.regions if r.backend == "npu"]) == 1
    with torch.no_grad():
        want = model(x).numpy()
    got = runtime_lite.load(result.to_bytes()).run([x.numpy()])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
