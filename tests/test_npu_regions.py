"""Region formation on the NPU: host islands with their reasons, transitions, the bytes they move, their cost."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
from onnx import helper

import aot
from aot.compiler.backends.npu import DEFAULT_PROFILE
from aot.compiler.backends.npu.transitions import host_islands, transitions
from aot.ir.graph import Graph
from aot.ir.types import TensorType
from tests.helpers import make_model, rand

CONV = dict(strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1])


def _sandwich(middle: str) -> Graph:
    """conv -> <middle> -> conv: the middle op, if the NPU cannot run it, is a host island."""
    g = Graph("sandwich")
    x = g.add_input("x", TensorType((1, 4, 8, 8), "float32"))
    w = g.constant(np.ones((4, 4, 3, 3), np.float32), "w")
    c = g.op("conv2d", x, w, name="c1", **CONV)
    if middle == "exp":
        m = g.op("exp", c, name="island")
    else:  # a reduce_mean the NPU's POOLING engine declines (over channels), broadcast back by the add
        m = g.op("add", c, g.op("reduce_mean", c, axes=[1], keepdims=1, name="island"), name="back")
    g.outputs = [g.op("conv2d", m, w, name="c2", **CONV)]
    return g


def test_a_host_island_between_two_regions_is_reported_with_its_reason():
    result = aot.build(_sandwich("exp"), targets=["npu"], log=None)
    (islands,) = [host_islands(result.partitioned)]
    assert [[n.name for n in i.nodes] for i in islands] == [["island"]]
    lines = result.reports["npu"]
    assert "host island npu_0 -> npu_1: exp 'island' (no npu pattern for exp)" in lines
    printed = str(result.partitioned)  # what --print-graph shows under the op
    assert "# stays on the host: npu: no npu pattern for exp: a host island between npu_0 and npu_1" in printed


def test_an_island_a_check_refused_gives_the_checks_reason():
    result = aot.build(_sandwich("reduce"), targets=["npu"], log=None)
    (line,) = [line for line in result.reports["npu"] if line.startswith("host island")]
    assert "reduce_mean 'island'" in line and "averages over the spatial axes (2..) only" in line


def test_transitions_count_the_activation_bytes_and_their_cost():
    result = aot.build(_sandwich("exp"), targets=["npu"], log=None)
    t = transitions(result.partitioned, DEFAULT_PROFILE)
    tensor = 4 * 8 * 8 * 4  # every activation crossing is a float32[1,4,8,8]
    # npu_0 takes x, gives c1; npu_1 takes the island's result, gives the output; weights stay resident
    assert (t.calls, t.switches, t.to_device, t.to_host) == (2, 4, 2 * tensor, 2 * tensor)
    assert t.cycles == 4 * DEFAULT_PROFILE.switch_cycles + 4 * tensor // 32
    assert result.reports["npu"][0] == (
        f"4 host<->npu transitions (2 backend calls) move 2,048 B in and 2,048 B out: est. {t.cycles:,} cycles "
        "(5,000 per switch + bytes / 32 B/cycle of DRAM)"
    )
    cheap = aot.build(_sandwich("exp"), targets=["npu"], log=None, backend_options={"npu": {"switch_cycles": 1}})
    assert f"est. {4 + 4 * tensor // 32} cycles (1 per switch" in cheap.reports["npu"][0]  # the profile it was given


def test_the_build_summary_and_print_graph_show_transitions_and_islands(tmp_path):
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Exp", ["c"], ["e"]),
        helper.make_node("Conv", ["e", "w"], ["y"], pads=[1, 1, 1, 1]),
    ]
    model = make_model(nodes, {"x": rand(1, 4, 8, 8)}, ["y"], {"w": rand(4, 4, 3, 3)})
    path = tmp_path / "island.onnx"
    onnx.save(model, path)
    result = subprocess.run(
        [sys.executable, "-m", "aot.cli.build", str(path), "--target", "npu", "--print-graph",
         "--backend-option", "npu.switch_cycles=100"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    out = result.stdout
    assert "# stays on the host: npu: no npu pattern for exp: a host island between npu_0 and npu_1" in out
    assert "  npu      4 host<->npu transitions (2 backend calls) move 2,048 B in and 2,048 B out" in out
    assert "100 per switch" in out
    assert "  npu      host island npu_0 -> npu_1: exp" in out
