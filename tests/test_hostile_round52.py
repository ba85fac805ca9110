"""Hostile bundles against this round's surfaces (docs/RELIABILITY.md section 1b): the host plan's precompute of
instructions of constants, roi_align's Python loops under max_run_seconds, and ``Module.row_coupling`` reading a
region's fallback payload no backend bound."""

from __future__ import annotations

import copy
import time

import msgpack
import numpy as np
import pytest

import runtime_lite
from runtime_lite import ExecutionError
from runtime_lite.execution.plan import PRECOMPUTE_GROWTH, PRECOMPUTE_SLACK
from tests import hostile


def _seed(target: str) -> hostile.Seed:
    import aot
    from tests.conftest import small_cnn_model

    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    result = aot.build(small_cnn_model(1, 13), targets=[target], min_region_size=1)
    return hostile.Seed(target, copy.deepcopy(result.header), [bytes(p) for p in result.blobs.payloads], [x])


@pytest.fixture(scope="module")
def host_seed() -> hostile.Seed:
    return _seed("host")


def _constant(header: dict, payloads: list[bytes], array: np.ndarray) -> int:
    """A new constant of the host plan, in a slot of its own."""
    payloads.append(np.ascontiguousarray(array).tobytes())
    header["constants"].append({"dtype": array.dtype.name, "shape": list(array.shape), "blob": len(payloads) - 1})
    plan = header["plan"]
    slot = plan["num_slots"]
    plan["num_slots"] += 1
    plan["constants"].append([slot, len(header["constants"]) - 1])
    return slot


def _prepend(header: dict, op: str, operands: list[int], attrs: dict, name: str) -> int:
    plan = header["plan"]
    slot = plan["num_slots"]
    plan["num_slots"] += 1
    plan["instructions"].insert(0, {"op": op, "name": name, "in": operands, "out": [slot], "attrs": attrs})
    return slot


def test_results_precomputed_from_constants_stay_within_a_multiple_of_the_constants(host_seed):
    """Each result may hold 4x its operands, so a chain of tiles from a 10-float bias grows 4x per instruction,
    and siblings of its last result each add as much: 5 kB of bundle kept ~40 MB at the first run under
    max_memory = 64 MiB, never charged to a run (1 GB with 20 siblings). All kept results together now hold at
    most PRECOMPUTE_GROWTH times the plan's constants; the rest run, and are charged, at each run."""
    header, payloads = copy.deepcopy(host_seed.header), list(host_seed.payloads)
    bias = _constant(header, payloads, np.ones(16, np.float32))
    plan = header["plan"]
    chain = [("tile", {"repeats": [1024]})] + [("tile", {"repeats": [4]})] * 3  # 64 kB -> 4 MiB
    slots = []
    for op, attrs in chain:
        slot = plan["num_slots"]
        plan["num_slots"] += 1
        operand = slots[-1] if slots else bias
        slots.append(slot)
        plan["instructions"].insert(
            len(slots) - 1, {"op": op, "name": f"t{len(slots)}", "in": [operand], "out": [slot], "attrs": attrs}
        )
    for i in range(3):  # three siblings of 12 MiB each
        slot = plan["num_slots"]
        plan["num_slots"] += 1
        plan["instructions"].insert(
            len(chain), {"op": "tile", "name": f"s{i}", "in": [slots[-1]], "out": [slot], "attrs": {"repeats": [3]}}
        )
    module = runtime_lite.load(host_seed.pack(header, payloads), max_memory=64 << 20)
    try:
        module.run(host_seed.inputs)
    except ExecutionError as e:
        assert "max_memory" in str(e)
    constants = sum(c.nbytes for c in module._plan.constant_slots().values())
    assert 0 < module._plan.precomputed_bytes <= PRECOMPUTE_GROWTH * constants + PRECOMPUTE_SLACK


def test_the_first_runs_precompute_stops_at_max_run_seconds(host_seed):
    """4,000 reductions of a 4 MiB constant are all instructions of constants: the first run computed every one
    (2 s, 11 s for 20,000) before its deadline was first checked."""
    header, payloads = copy.deepcopy(host_seed.header), list(host_seed.payloads)
    big = _constant(header, payloads, np.ones((1024, 1024), np.float32))
    for i in range(4000):
        _prepend(header, "reduce_sum", [big], {"axes": None, "keepdims": 0}, f"r{i}")
    module = runtime_lite.load(host_seed.pack(header, payloads), max_run_seconds=0.2)
    start = time.monotonic()
    with pytest.raises(ExecutionError, match="max_run_seconds"):
        module.run(host_seed.inputs)
    assert time.monotonic() - start < 1.0


def test_roi_align_stops_at_max_run_seconds_inside_its_loops(host_seed):
    """mode max loops over sampling_ratio^2 points per ROI in Python: 1024^2 over a 256 x 256 map took 18 s under
    max_run_seconds = 1, and each ROI as long again; the deadline is now checked per row of points and per ROI."""
    header, payloads = copy.deepcopy(host_seed.header), list(host_seed.payloads)
    plane = _constant(header, payloads, np.ones((1, 1, 256, 256), np.float32))
    rois = _constant(header, payloads, np.array([[0, 0, 256, 256]] * 4, np.float32))
    batch = _constant(header, payloads, np.zeros(4, np.int64))
    attrs = {
        "mode": "max", "output_height": 1, "output_width": 1, "sampling_ratio": 1024, "spatial_scale": 1.0,
        "coordinate_transformation_mode": "half_pixel",
    }  # fmt: skip
    _prepend(header, "roi_align", [plane, rois, batch], attrs, "roi")
    module = runtime_lite.load(host_seed.pack(header, payloads), max_run_seconds=0.3)
    start = time.monotonic()
    with pytest.raises(ExecutionError, match="max_run_seconds"):
        module.run(host_seed.inputs)
    assert time.monotonic() - start < 2.0


@pytest.mark.parametrize("op", [["dynamic_quantize"], {"op": 1}])
def test_row_coupling_reads_an_unbound_fallback_payload_without_failing(op):
    """An NPU module does not bind a 'fallback' payload, so nothing checked it before ``row_coupling`` (which
    ``serve`` asks) read its ops: an op that is a list or a map was a TypeError out of the server's setup."""
    from runtime_lite.serving.service import served_model

    seed = _seed("npu")
    header, payloads = copy.deepcopy(seed.header), list(seed.payloads)
    plan = {"num_slots": 1, "inputs": [0], "outputs": [0], "constants": [], "instructions": [{"op": op, "name": "q"}]}
    payloads.append(msgpack.packb({"format": "host-plan/1", "plan": plan, "constants": []}))
    header["modules"][0]["payloads"]["fallback"] = len(payloads) - 1
    module = runtime_lite.load(seed.pack(header, payloads))
    assert module.row_coupling is None
    served_model("m", module, 8)
