"""Issue 40's surfaces: int8 NPU parameters, plans that outgrow their signature (docs/RELIABILITY.md, 1b).

The targeted cases reproduce the issue one by one; a bounded draw of each family runs
through ``tests/hostile.py``'s harness (crash, hang and memory proof), as the campaign
(``benchmarks/fuzz_campaign.py --family int8``) does at size.
"""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

import runtime_lite
from runtime_lite import BundleError
from tests import hostile, hostile_surfaces


@pytest.fixture(scope="module")
def int8_seed() -> hostile.Seed:
    return hostile_surfaces.int8_npu_seed()


@pytest.fixture(scope="module")
def harness():
    h = hostile.Harness(workers=2)
    yield h
    h.close()


def _with_value(seed: hostile.Seed, name: str, value, everywhere: bool = True) -> bytes:
    """``seed`` with int8 parameter ``name`` (``hostile_surfaces.int8_parameters``) set to ``value``."""
    header, payloads = copy.deepcopy(seed.header), list(seed.payloads)
    where = hostile_surfaces.int8_parameters(seed)[name]
    if where[0] == "constant":
        record = header["constants"][where[1]]
        blob, start, dtype = hostile_surfaces.own_blob(record, payloads), 0, np.dtype(record["dtype"])
        count = len(payloads[blob]) // dtype.itemsize if everywhere else 1
    else:
        _, blob, start, dtype = where
        dtype, count = np.dtype(dtype), 1
    raw = bytearray(payloads[blob])
    np.frombuffer(raw, dtype, count, start)[:] = value
    payloads[blob] = bytes(raw)
    return seed.pack(header, payloads)


def _refusal(data: bytes) -> str:
    with pytest.raises(BundleError) as refused:
        runtime_lite.load(data)
    message = str(refused.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 0.0, -0.5])
@pytest.mark.parametrize(
    "name, node",
    [("npu_0.x_scale", "x_quantize"), ("npu_0.r1_scale", "r1_dequantize"), ("npu_1.y_scale", "y_dequantize")],
)
def test_an_int8_scale_that_is_not_finite_and_positive_is_refused_at_load(int8_seed, name, node, value):
    """The issue's 15 silent cases, first kind: input and output scales NaN, +/-inf, 0, negative."""
    message = _refusal(_with_value(int8_seed, name, value))
    assert f"npu node {node!r} scale must be finite and positive" in message
    assert "bundle field 'npu.graph.nodes[" in message and name.split(".")[0] in message


@pytest.mark.parametrize("value", [5, -128, 127])
@pytest.mark.parametrize(
    "name, node",
    [
        ("npu_0.x_zero_point", "x_quantize"),
        ("npu_0.r1_zero_point", "r1_dequantize"),
        ("npu_1.f_zero_point", "f_quantize"),
    ],
)
def test_a_zero_point_beside_an_integer_kernel_is_refused_at_load(int8_seed, name, node, value):
    """Second kind: zero points the integer kernels would ignore (their arithmetic is symmetric)."""
    message = _refusal(_with_value(int8_seed, name, value))
    assert f"npu node {node!r} zero point must be 0 beside an integer kernel" in message


@pytest.mark.parametrize("value", [1, 2**29, 2**30 - 1, -1, -(2**31)])
def test_a_multiplier_outside_q31_is_refused_at_load(int8_seed, value):
    message = _refusal(_with_value(int8_seed, "npu_0.c1_multiplier", value))
    assert "npu node 'r1_quantize' multiplier must lie in [2**30, 2**31)" in message


@pytest.mark.parametrize("value", [0, 63, -1])
def test_a_shift_outside_its_range_is_refused_at_load(int8_seed, value):
    assert "shift must lie in [1, 62]" in _refusal(_with_value(int8_seed, "npu_1.y_shift", value))


def test_legal_int8_parameters_still_load_and_run_exactly(int8_seed):
    """The seed itself, and a legal change (a larger but finite scale) that computes what the bundle declares."""
    reference = runtime_lite.load(int8_seed.pack(int8_seed.header)).run(int8_seed.inputs)
    assert np.isfinite(reference[0]).all()
    changed = runtime_lite.load(_with_value(int8_seed, "npu_1.y_scale", 2.0)).run(int8_seed.inputs)
    assert not np.array_equal(changed[0], reference[0])  # a legal bundle computing what it says
    # the weights' own scale is folded into the integer kernel: not a parameter the region reads
    same = runtime_lite.load(_with_value(int8_seed, "npu_0.w1_scale", np.nan)).run(int8_seed.inputs)
    np.testing.assert_array_equal(same[0], reference[0])


def test_an_illegal_scale_computed_at_run_time_is_refused_at_run(int8_seed):
    """A parameter the host plan computes (not a constant) is checked before the node that reads it runs."""
    header = copy.deepcopy(int8_seed.header)
    plan = header["plan"]
    call = next(ins for ins in plan["instructions"] if ins["op"] == "call_module")
    scale_slot = call["in"][1]  # x_scale
    fresh = plan["num_slots"]
    plan["num_slots"] += 1
    plan["instructions"].insert(0, {"op": "negative", "name": "negated", "in": [scale_slot], "out": [fresh]})
    call["in"][1] = fresh
    module = runtime_lite.load(int8_seed.pack(header, int8_seed.payloads))
    with pytest.raises(runtime_lite.ExecutionError, match="npu node 'x_quantize' scale must be finite and positive"):
        module.run(int8_seed.inputs)


def test_the_int8_family_never_runs_an_illegal_parameter(int8_seed, harness):
    """A bounded draw of the campaign's int8 family: every illegal value refused at load, never run."""
    before = len(harness.failures)
    harness.run(hostile_surfaces.int8_cases(int8_seed, 150, random.Random(40)))
    new = harness.failures[before:]
    assert not new, "\n".join(f"{what}: {outcome}" for what, outcome, _ in new)
