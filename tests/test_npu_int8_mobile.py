"""int8 on the NPU beyond products: hard-swish/hard-sigmoid tables, average pooling, requantizing concat, moves.

The table and the move are exact with the host's float Q/DQ graph (the table is
filled by the host's own kernels); the mean and the concat compute in integers
(int32 sums, Q31 requantization, rounding half away from zero) and are checked
against the independent integer reference in tests/int8_reference.py, and are
within one int8 step of the float graph (which rounds half to even).
"""

from __future__ import annotations

import numpy as np
import pytest

import aot
import aot.compiler.backends.npu  # noqa: F401  (registers the NPU patterns)
import runtime_lite
from aot.compiler.quantize import QuantizeConfig
from aot.ir.graph import Graph
from aot.ir.types import TensorType
from tests import int8_reference

SHAPE = (1, 8, 6, 6)


def _q(seed: int, shape=SHAPE) -> np.ndarray:
    return np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)


def _dq(g: Graph, x, scale: float, zero: int = 0):
    return g.op("dequantize", x, g.constant(np.float32(scale)), g.constant(np.int8(zero)))


def _quant(g: Graph, x, scale: float, zero: int = 0):
    return g.op("quantize", x, g.constant(np.float32(scale)), g.constant(np.int8(zero)), dtype="int8", name="out")


def _graph(case: str) -> Graph:
    g = Graph(case)
    x = g.add_input("q", TensorType(SHAPE, "int8"))
    if case == "hard_swish":  # asymmetric on both sides: the table takes any zero point
        out = _quant(g, g.op("hard_swish", _dq(g, x, 0.05, 3)), 0.037, -5)
    elif case == "hard_sigmoid":
        out = _quant(g, g.op("hard_sigmoid", _dq(g, x, 0.08), alpha=0.2, beta=0.5), 1 / 127)
    elif case == "global_avg_pool":
        out = _quant(g, g.op("reduce_mean", _dq(g, x, 0.05), axes=[2, 3], keepdims=1), 0.011)
    elif case == "concat":  # three scales, the first equal to the output's (an exact copy)
        b = g.add_input("b", TensorType(SHAPE, "int8"))
        c = g.add_input("c", TensorType((1, 3, 6, 6), "int8"))
        joined = g.op("concat", _dq(g, x, 0.05), _dq(g, b, 0.1), _dq(g, c, 0.0173), axis=1)
        out = _quant(g, joined, 0.05)
    elif case == "transpose":
        out = _quant(g, g.op("transpose", _dq(g, x, 0.05, 2), perm=[0, 2, 3, 1]), 0.05, 2)
    elif case == "reshape":
        out = _quant(g, g.op("reshape", _dq(g, x, 0.05), shape=[1, 288]), 0.05)
    elif case == "slice":
        out = _quant(g, g.op("slice", _dq(g, x, 0.05), starts=[1], ends=[5], axes=[2], steps=[2]), 0.05)
    else:  # pragma: no cover
        raise AssertionError(case)
    g.outputs = [out]
    return g


COMPOSITE = {"hard_swish": "int8_lut", "hard_sigmoid": "int8_lut", "global_avg_pool": "int8_global_avg_pool",
             "concat": "int8_concat", "transpose": "int8_move", "reshape": "int8_move", "slice": "int8_move"}  # fmt: skip
KERNEL = {"int8_lut": "int8_lut", "int8_global_avg_pool": "int8_mean", "int8_concat": "int8_concat"}


def _inputs(case: str) -> list[np.ndarray]:
    return [_q(1), _q(2), _q(3, (1, 3, 6, 6))] if case == "concat" else [_q(1)]


@pytest.mark.parametrize("case", sorted(COMPOSITE))
def test_int8_composites_are_integer_kernels(case):
    inputs = _inputs(case)
    result = aot.build(_graph(case), targets=["npu"], log=None)
    assert [c.name for c in result.partitioned.composites] == [f"npu.{COMPOSITE[case]}"]
    bundle = result.to_bytes()
    module = runtime_lite.load(bundle)
    (got,) = module.run(inputs)
    (want,) = runtime_lite.load(aot.build(_graph(case), log=None).to_bytes()).run(inputs)  # float Q/DQ on the host
    assert got.dtype == np.int8 and got.shape == want.shape
    (event,) = module.profile(inputs).dispatches
    assert event["precision"] == "int8"
    if COMPOSITE[case] in ("int8_lut", "int8_move"):
        np.testing.assert_array_equal(got, want)  # exact with the float graph
    else:
        assert np.abs(got.astype(int) - want).max() <= 1  # integer rounding vs the float graph's half-to-even
    if COMPOSITE[case] in KERNEL:
        checked, elements = int8_reference.replay_npu_int8(bundle, inputs)
        assert (checked, elements) == (1, got.size)
    if COMPOSITE[case] == "int8_move":
        assert event["engine"] == "DMA" and event.get("view", False) == (case == "reshape")


def test_the_table_is_independent_of_runtime_lite():
    """hard-swish's definition in float64, quantized by hand, gives the same 256 entries the build computed."""
    q = np.arange(-128, 128)
    x = (q - 3) * 0.05
    expected = np.clip(np.rint(x * np.clip(x + 3, 0, 6) / 6 / 0.037) - 5, -128, 127).astype(np.int8)
    result = aot.build(_graph("hard_swish"), targets=["npu"], log=None)
    module = runtime_lite.load(result.to_bytes())
    every = np.resize(q.astype(np.int8), SHAPE)  # all 256 int8 values, then the first 32 again
    (got,) = module.run([every])
    np.testing.assert_array_equal(got, int8_reference.lut(every, expected))


def test_a_mean_requantizes_once_with_rounding_half_away_from_zero():
    """All 36 values 1 at scale 1 into scale 2: mean 1 -> 0.5 in output units, which rounds to 1 (half to even: 0)."""
    g = Graph()
    x = g.add_input("q", TensorType(SHAPE, "int8"))
    g.outputs = [_quant(g, g.op("reduce_mean", _dq(g, x, 1.0), axes=[-2, -1], keepdims=0), 2.0)]
    (got,) = runtime_lite.load(aot.build(g, targets=["npu"], log=None).to_bytes()).run([np.ones(SHAPE, np.int8)])
    assert got.shape == (1, 8) and (got == 1).all()


@pytest.mark.parametrize(
    "case, reason",
    [
        ("rescaled move", "that differ: not a pure move"),
        ("asymmetric pool", "non-zero zero point"),
        ("per-axis concat", "per-axis scale"),
    ],
)
def test_int8_chains_the_kernels_cannot_take_stay_float_with_a_reason(case, reason):
    def graph() -> Graph:
        g = Graph()
        x = g.add_input("q", TensorType(SHAPE, "int8"))
        if case == "rescaled move":
            out = _quant(g, g.op("reshape", _dq(g, x, 0.05), shape=[1, 288]), 0.1)
        elif case == "asymmetric pool":
            out = _quant(g, g.op("reduce_mean", _dq(g, x, 0.05, 1), axes=[2, 3]), 0.01)
        else:
            scales, zeros = g.constant(np.full(8, 0.05, np.float32)), g.constant(np.zeros(8, np.int8))
            out = _quant(g, g.op("concat", g.op("dequantize", x, scales, zeros), _dq(g, x, 0.05), axis=1), 0.05)
        g.outputs = [out]
        return g

    result = aot.build(graph(), targets=["npu"], log=None)
    assert not any(c.name.startswith("npu.int8") for c in result.partitioned.composites)
    reasons = [r.reason for rs in result.partitioned.refusals.values() for r in rs]
    assert any(reason in r for r in reasons), reasons
    x_q = _q(4)
    (got,) = runtime_lite.load(result.to_bytes()).run([x_q])  # still on the NPU, in float between Q/DQ
    np.testing.assert_array_equal(got, runtime_lite.load(aot.build(graph(), log=None).to_bytes()).run([x_q])[0])


def test_a_calibrated_build_runs_hard_swish_between_quantized_convs_as_a_table():
    """--precision int8: conv -> hard_swish -> conv -> reshape -> dense; the hard-swish and reshape stay int8."""

    def graph() -> Graph:
        rng = np.random.default_rng(0)
        g = Graph("mobile")
        x = g.add_input("x", TensorType((1, 3, 8, 8), "float32"))
        c1 = g.op("conv2d", x, g.constant(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3),
                  strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1])  # fmt: skip
        c2 = g.op("conv2d", g.op("hard_swish", c1), g.constant(rng.standard_normal((4, 8, 1, 1)).astype(np.float32)),
                  strides=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1])  # fmt: skip
        flat = g.op("reshape", c2, shape=[1, 64])
        g.outputs = [g.op("dense", flat, g.constant(rng.standard_normal((10, 64)).astype(np.float32) * 0.1))]
        return g

    samples = [{"x": np.random.default_rng(s).standard_normal((1, 3, 8, 8)).astype(np.float32)} for s in range(12)]
    result = aot.build(graph(), targets=["npu"], quantize=QuantizeConfig(samples, holdout=0.25), log=None)
    names = [c.name for c in result.partitioned.composites]
    assert "npu.int8_lut" in names and "npu.int8_move" in names and names.count("npu.int8_conv") == 2
    checked, _ = int8_reference.replay_npu_int8(result.to_bytes(), samples[0])
    assert checked == 4  # two convs, the dense and the table


@pytest.mark.parametrize(
    "case, change, message",
    [
        ("global_avg_pool", {"multiplier": -1}, r"multipliers must be integers in \[0, 2147483647\]"),
        ("global_avg_pool", {"shift": 99}, r"shifts must be integers in \[1, 62\]"),
        ("global_avg_pool", {"axes": [2, 8]}, "axis 8 is out of range"),
        ("global_avg_pool", {"act_min": 5, "act_max": 1}, "act_min 5 and act_max 1"),
        ("concat", {"multipliers": [1 << 30], "shifts": [30]}, "3 inputs need 3 multipliers, got 1"),
        ("concat", {"multipliers": [1 << 30]}, "1 multipliers but 3 shifts"),
        ("concat", {"shifts": [30, 0, 30]}, r"shifts must be integers in \[1, 62\]"),
        ("concat", {"axis": 4}, "axis 4 is out of range"),
        ("hard_swish", "table of 128", r"an int8\[256\] table"),
    ],
)
def test_int8_attributes_out_of_range_are_refused_at_load(case, change, message):
    import json

    from runtime_lite.backends import BackendContext
    from runtime_lite.backends.npu import NpuBackend

    result = aot.build(_graph(case), targets=["npu"], log=None)
    payloads = {key: memoryview(bytes(result.blobs.payloads[blob]))
                for key, blob in result.header["modules"][0]["payloads"].items()}  # fmt: skip
    graph = json.loads(bytes(payloads["graph"]))
    kernel = next(n for n in graph["nodes"] if n["op"] == "kernel")
    if change == "table of 128":
        table = graph["nodes"][kernel["inputs"][1][0]]
        table["attrs"].update(shape=[[128]], nbytes=128)  # a consistent record, of the wrong size
    else:
        kernel["attrs"]["body"][0]["attrs"].update(change)
    with pytest.raises(runtime_lite.BundleError, match=message) as caught:
        NpuBackend().init(BackendContext(), {**payloads, "graph": memoryview(json.dumps(graph).encode())}, {})
    assert "\n" not in str(caught.value) and "bundle field 'npu.graph" in str(caught.value)


def test_mobilenet_v3_small_at_int8_is_one_region_bit_exact_to_the_reference():
    """Calibrated on random images: hard-swish tables and pooling in integers, every kernel checked."""
    import collections

    import torch

    from tests.torch_models import randomize_batch_norm
    from tests.torchvision_compat import import_torchvision

    torchvision = import_torchvision()
    if torchvision is None:
        pytest.skip("torchvision is not installed")
    torch.manual_seed(0)
    model = randomize_batch_norm(torchvision.models.get_model("mobilenet_v3_small", weights=None).eval())
    samples = [{"x": np.random.default_rng(s).standard_normal((1, 3, 64, 64)).astype(np.float32)} for s in range(6)]
    program = torch.export.export(model, (torch.from_numpy(samples[0]["x"]),))
    result = aot.build(program, targets=["npu"], quantize=QuantizeConfig(samples, holdout=0.34), log=None)
    assert len(result.partitioned.regions) == 1 and result.regions["host"] == 0
    kinds = collections.Counter(c.name for c in result.partitioned.composites)
    assert kinds["npu.int8_conv"] > 40 and kinds["npu.int8_lut"] > 5
    checked, _ = int8_reference.replay_npu_int8(result.to_bytes(), [samples[-1]["x"]])
    assert checked == sum(n for k, n in kinds.items() if k in ("npu.int8_conv", "npu.int8_dense", "npu.int8_lut",
                                                             "npu.int8_global_avg_pool", "npu.int8_concat"))  # fmt: skip
