"""Hostile cases for the surfaces of issue 40: int8 NPU parameters, plans that outgrow their signature.

Each family draws well-formed, correctly checksummed bundles from a real seed (as
``tests/hostile.py`` does) and each case must end as one of ``hostile.CLEAN``: refused
with one line at load or at run, or run computing what the bundle declares. Used by
``tests/test_hostile_surfaces.py`` (a bounded number in CI) and
``benchmarks/fuzz_campaign.py --family int8|signature`` (the campaign).
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Iterator

import numpy as np
from onnx import helper, numpy_helper

from tests import hostile
from tests.hostile import Seed

# -- int8 NPU parameters -------------------------------------------------------------------------------

#: Values a hostile bundle writes into a scale, a zero point and a multiplier.
HOSTILE_SCALES = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, -0.5, -1e-30, 1e-45, 3.4e38]
HOSTILE_ZERO_POINTS = [5, -128, 127, 1, -1]
HOSTILE_MULTIPLIERS = [0, 1, 2**29, 2**30 - 1, -1, -(2**31), 2**31 - 1, 2**30]
HOSTILE_SHIFTS = [0, -1, 63, 64, 1, 62, 2**31 - 1]


def int8_npu_seed() -> Seed:
    """A calibrated int8 model on the NPU: conv+relu and dense as integer kernels, with every parameter."""
    import aot
    from aot.compiler.quantize import QuantizeConfig

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((3, 64)).astype(np.float32), "w3"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Flatten", ["r1"], ["f"]),
        helper.make_node("Gemm", ["f", "w3"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "int8", [helper.make_tensor_value_info("x", 1, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", 1, [1, 3])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    calibration = [{"x": rng.standard_normal((1, 1, 4, 4)).astype(np.float32)} for _ in range(8)]
    result = aot.build(model, targets=["npu"], quantize=QuantizeConfig(calibration), log=None)
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    return Seed("int8-npu", copy.deepcopy(result.header), [bytes(p) for p in result.blobs.payloads], [x])


def int8_parameters(seed: Seed) -> dict[str, tuple]:
    """Each int8 parameter of the seed by name: ("constant", header constant index) for what the host
    plan passes to an NPU region, ("npu", graph blob, weights blob, offset, dtype) for the payload's own."""
    header = seed.header
    slot_to_constant = {slot: index for slot, index in header["plan"]["constants"]}
    found: dict[str, tuple] = {}
    calls = [ins for ins in header["plan"]["instructions"] if ins["op"] == "call_module"]
    for ins in calls:
        module = header["modules"][ins["attrs"]["module"]]
        for name, slot in zip(module["summary"]["inputs"], ins["in"]):
            if slot in slot_to_constant and name.endswith(("_scale", "_zero_point")):
                found[f"{module['id']}.{name}"] = ("constant", slot_to_constant[slot])
        graph_blob, weights_blob = module["payloads"]["graph"], module["payloads"].get("weights")
        for node in json.loads(seed.payloads[graph_blob])["nodes"]:
            if node["op"] == "const" and node["name"].endswith(("_multiplier", "_shift")):
                found[f"{module['id']}.{node['name']}"] = ("npu", weights_blob, node["attrs"]["offset"], "<i4")
    return found


def own_blob(record: dict, payloads: list[bytes]) -> int:
    """Give a header constant a blob of its own (the writer shares equal ones: x's and r1's zero points)."""
    payloads.append(payloads[record["blob"]])
    record["blob"] = len(payloads) - 1
    return record["blob"]


#: The outcome a case must have: refused at load, or run computing exactly what the seed does.
REFUSED, IDENTICAL, EITHER = "rejected at load", "identical", "either"


def _expected(name: str, value, shift: int) -> str:
    """The oracle, from docs/quantization.md: weight scales and zero points are folded into the integer kernels
    (never read at run); activation scales finite and positive; zero points beside them 0; Q31 multipliers."""
    parameter = name.split(".", 1)[1]
    if parameter.startswith(("w1_", "w3_")):
        return IDENTICAL
    if parameter.endswith("_scale"):
        return EITHER if math.isfinite(value) and value > 0 else REFUSED
    if parameter.endswith("_zero_point"):
        return EITHER if value == 0 else REFUSED
    if parameter.endswith("_shift"):
        return EITHER if 1 <= value <= 62 else REFUSED
    return EITHER if 2**30 <= value < 2**31 or value == 0 or (shift == 62 and 0 < value < 2**30) else REFUSED


def mutate_int8(rng: random.Random, seed: Seed) -> tuple[str, bytes, str]:
    """One int8 parameter of ``seed`` (``int8_npu_seed``) given a hostile value, at one channel or all of them;
    returns what was done, the bundle and the outcome it must have (``_expected``)."""
    header, payloads = copy.deepcopy(seed.header), list(seed.payloads)
    name, where = rng.choice(sorted(int8_parameters(seed).items()))
    kind = name.rsplit("_", 1)[-1] if not name.endswith("_zero_point") else "zero_point"
    pool = {"scale": HOSTILE_SCALES, "point": HOSTILE_ZERO_POINTS, "zero_point": HOSTILE_ZERO_POINTS,
            "multiplier": HOSTILE_MULTIPLIERS, "shift": HOSTILE_SHIFTS}[kind]  # fmt: skip
    value = rng.choice(pool)
    if where[0] == "constant":
        record = header["constants"][where[1]]
        blob = own_blob(record, payloads)
        data = np.frombuffer(payloads[blob], record["dtype"]).copy()
    else:
        _, blob, offset, dtype = where
        data = np.frombuffer(payloads[blob], dtype).copy()
        data = data[offset // 4 :]  # the constant starts here; it runs to the next one
    everywhere = rng.random() < 0.5
    with np.errstate(all="ignore"):
        if data.dtype.kind == "f":
            cast = np.array(value, data.dtype)
        else:
            cast = np.array(value).astype(data.dtype) if isinstance(value, int) else np.array(0, data.dtype)
    raw = bytearray(payloads[blob])
    start = 0 if where[0] == "constant" else where[2]
    count = 1 if not everywhere or where[0] != "constant" else len(data)
    np.frombuffer(raw, cast.dtype, count, start)[:] = cast
    payloads[blob] = bytes(raw)
    # the first channel's shift: 64 bytes (16 words) after its multiplier, the writer's alignment
    shift = int(np.frombuffer(seed.payloads[where[1]], "<i4")[where[2] // 4 + 16]) if name.endswith("plier") else 0
    what = f"{seed.name}: {name} = {value!r}{' (every channel)' if count > 1 else ''}"
    return what, seed.pack(header, payloads), _expected(name, value, shift)


def classify_int8(data: bytes, job: tuple) -> str:
    """``hostile._classify``, then the oracle: an illegal parameter must not run, an unread one change nothing."""
    inputs, expected, reference = job
    outcome = hostile._classify(data, inputs)
    if expected == REFUSED and outcome != REFUSED:
        return f"FAIL an illegal int8 parameter was not refused at load: {outcome}"
    if expected == IDENTICAL and outcome == "ran":
        import runtime_lite

        got = runtime_lite.load(data).run(inputs)
        if not all(np.array_equal(a, b) for a, b in zip(got, reference)):
            return "FAIL a parameter no kernel reads changed the outputs"
    return outcome


hostile.CLASSIFIERS["int8"] = classify_int8


def int8_cases(seed: Seed, count: int, rng: random.Random) -> Iterator[tuple[str, bytes, tuple, str]]:
    import runtime_lite

    reference = runtime_lite.load(seed.pack(seed.header)).run(seed.inputs)
    for _ in range(count):
        what, data, expected = mutate_int8(rng, seed)
        yield what, data, (seed.inputs, expected, reference), "int8"
