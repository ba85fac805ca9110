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
    [("npu_0.x_scale", "x_quantize"), ("npu_0.y_scale", "y_dequantize")],
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
        ("npu_0.y_zero_point", "y_dequantize"),
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
    assert "shift must lie in [1, 62]" in _refusal(_with_value(int8_seed, "npu_0.y_shift", value))


def test_legal_int8_parameters_still_load_and_run_exactly(int8_seed):
    """The seed itself, and a legal change (a larger but finite scale) that computes what the bundle declares."""
    reference = runtime_lite.load(int8_seed.pack(int8_seed.header)).run(int8_seed.inputs)
    assert np.isfinite(reference[0]).all()
    changed = runtime_lite.load(_with_value(int8_seed, "npu_0.y_scale", 2.0)).run(int8_seed.inputs)
    assert not np.array_equal(changed[0], reference[0])  # a legal bundle computing what it says
    # the weights' own scale is folded into the integer kernel, and the flatten between the conv and the dense
    # moves int8 values as they are: parameters no kernel reads, which change nothing
    unread = hostile_surfaces.unread_parameters(int8_seed)
    assert {"npu_0.w1_scale", "npu_0.r1_scale", "npu_0.f_scale"} <= unread and "npu_0.x_scale" not in unread
    for name in ("npu_0.w1_scale", "npu_0.r1_scale"):
        same = runtime_lite.load(_with_value(int8_seed, name, np.nan)).run(int8_seed.inputs)
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


# -- a plan whose output outgrows its signature ---------------------------------------------------------


@pytest.fixture(scope="module")
def seeds() -> dict[str, hostile.Seed]:
    return {seed.name: seed for seed in hostile.seeds()}


def _through(seed: hostile.Seed, op: str, attrs: dict) -> bytes:
    header = copy.deepcopy(seed.header)
    plan = header["plan"]
    fresh = plan["num_slots"]
    plan["num_slots"] += 1
    plan["instructions"].append(
        {"op": op, "name": "outgrow", "in": [plan["outputs"][0]], "out": [fresh], "attrs": attrs}
    )
    plan["outputs"][0] = fresh
    return seed.pack(header)


@pytest.mark.parametrize("seed_name", ["cnn-host", "cnn-npu"])
@pytest.mark.parametrize(
    "op, attrs",
    [
        ("tile", {"repeats": [2**14, 2**14]}),
        ("expand", {"shape": [2**16, 1, 1]}),
        ("reshape", {"shape": [10, 1], "allowzero": 0}),
    ],
)
def test_a_plan_whose_output_outgrows_its_signature_is_refused_at_load(seeds, seed_name, op, attrs):
    """The issue's case: a tile to 1.6 GB after the output declared [1, 10] was computed, then refused."""
    message = _refusal(_through(seeds[seed_name], op, attrs))
    assert "bundle field 'plan.outputs[0]': the plan makes output 'probs'" in message
    assert "the signature declares [1,10]" in message


def test_the_signature_family_never_runs_an_output_the_signature_does_not_declare(seeds, harness):
    before = len(harness.failures)
    harness.run(hostile_surfaces.signature_cases(list(seeds.values()), 60, random.Random(40)))
    new = harness.failures[before:]
    assert not new, "\n".join(f"{what}: {outcome}" for what, outcome, _ in new)


# -- device arrays passed to Module.run --------------------------------------------------------------------


@pytest.fixture
def no_cuda(monkeypatch):
    """This host as one without cuda-python (the issue's), whatever is installed here."""
    from runtime_lite.execution import device

    def missing():
        raise device.CudaUnavailable("device arrays need cuda-python's cuda.bindings, which is not installed")

    monkeypatch.setattr(device, "cudart", missing)
    monkeypatch.setattr(device, "_cuda_usable", False)


@pytest.fixture(scope="module")
def host_module(seeds):
    return runtime_lite.load(seeds["cnn-host"].pack(seeds["cnn-host"].header))


GOOD_INTERFACE = {"shape": (1, 3, 8, 8), "typestr": "<f4", "data": (0x1000, False), "version": 2}


@pytest.mark.parametrize(
    "value, match",
    [
        (hostile_surfaces.FakeCudaArray(GOOD_INTERFACE), "is a GPU array, but this host cannot read it"),
        (hostile_surfaces.FakeCudaArray({**GOOD_INTERFACE, "shape": ["a"]}), "shape must hold ints"),
        (hostile_surfaces.FakeCudaArray({**GOOD_INTERFACE, "typestr": "O"}), "is not a number type"),
        (hostile_surfaces.FakeCudaArray({**GOOD_INTERFACE, "version": "3"}), "version must be an int"),
        (hostile_surfaces.FakeDLPackArray({"ndim": 4, "shape": [1, 3, 8, 8]}), "is a GPU array, but this host"),
        (hostile_surfaces.FakeDLPackArray({"ndim": 4, "shape": [1, 3, 8, 8], "claimed_device": (2,),
                                           "device": (1, 0)}), "its DLPack export lies on device type 1"),
    ],
)  # fmt: skip
def test_a_device_array_on_a_host_without_cuda_is_an_input_error(host_module, no_cuda, value, match):
    with pytest.raises(runtime_lite.InputError, match=match) as refused:
        host_module.run([value])
    assert "\n" not in str(refused.value)


def _run_with(module_bytes: bytes, spec: dict) -> str:
    try:
        runtime_lite.load(module_bytes).run([hostile_surfaces.device_object(spec)])
    except runtime_lite.InputError as e:
        return f"InputError: {e}"
    return "ran"


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"ndim": 2**31 - 1, "shape": [1, 3, 8, 8]}, "DLPack tensor of 2147483647 dims"),
        ({"ndim": -1, "shape": [1, 3, 8, 8]}, "DLPack tensor of -1 dims"),
        ({"ndim": 4, "shape": [1, 3, 8, 8], "shape_pointer": False}, "has a NULL shape"),
        ({"ndim": 4, "shape": [1, 3, 8, 8], "data": 0}, "NULL data pointer"),
        ({"ndim": 2, "shape": [2**62, 2**62]}, "is not a memory size"),
        ({"ndim": 4, "shape": [1, 3, 8, 8], "versioned": True, "major": 2}, "this reader knows 1.x"),
        ({"ndim": 4, "shape": [1, 3, 8, 8], "dtype": (2, 32, 4)}, "has no numpy equivalent"),
    ],
)
def test_a_lying_dlpack_capsule_is_refused_before_its_pointers_are_read(seeds, spec, match):
    """The issue's crashes (ndim 2**31 - 1, a NULL shape): in a child, so a regression fails instead of crashing."""
    kind, value = hostile.isolated(
        _run_with, seeds["cnn-host"].pack(seeds["cnn-host"].header), {"kind": "dlpack", **spec}
    )
    assert kind == "returned", f"{kind}: {value}"
    assert value.startswith("InputError") and match in value, value


def test_the_device_family_is_always_an_input_error(seeds, harness):
    before = len(harness.failures)
    harness.run(hostile_surfaces.device_cases(seeds["cnn-host"], 300, random.Random(40)))
    new = harness.failures[before:]
    assert not new, "\n".join(f"{what}: {outcome}" for what, outcome, _ in new)


# -- onnxruntime recipes the footprint must size ----------------------------------------------------------


def test_the_ortshape_family_never_runs_past_the_budget(harness):
    """A bounded draw of the campaign's ``ortshape`` family (Resize's attributes, graph outputs never fetched)."""
    pytest.importorskip("onnxruntime")
    seed = hostile_surfaces.onnxruntime_relu_seed()
    before = len(harness.failures)
    harness.run(hostile_surfaces.ort_shape_cases(seed, 80, random.Random(40)))
    new = harness.failures[before:]
    assert not new, "\n".join(f"{what}: {outcome}" for what, outcome, _ in new)


def test_the_plan_shape_walk_agrees_with_every_kernel_it_follows():
    """A shape the walk gets wrong would refuse a legitimate bundle at load: on every kernel sample
    (tests/kernel_samples.py), each op the walk follows must give exactly the shapes the kernel returns."""
    from runtime_lite.execution.plan_shapes import RULES
    from runtime_lite.kernels import KERNELS
    from tests import kernel_samples

    followed = set()
    for case, (operands, given) in kernel_samples.samples().items():
        op = kernel_samples.kernel_of(case)
        if op not in RULES:
            continue
        attrs = kernel_samples.attributes(case, given)
        found = RULES[op]([o.shape for o in operands], [o if o.size <= 64 else None for o in operands], attrs)
        result = KERNELS[op].fn(*operands, **attrs)
        results = result if isinstance(result, tuple) else (result,)
        if found is None:
            continue
        followed.add(op)
        assert [tuple(s) for s in found] == [np.shape(r) for r in results], case
    assert followed == set(RULES), sorted(set(RULES) - followed)  # every rule proved on its kernel
