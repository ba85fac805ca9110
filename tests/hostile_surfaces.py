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
from typing import Any

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


def unread_parameters(seed: Seed) -> set[str]:
    """The int8 parameters no NPU kernel reads: a weight's scale folded into its integer kernel, or the scales
    around a layout op that moves int8 values as they are (docs/npu.md). Changing one cannot change the output."""
    unread = set()
    for module in seed.header["modules"]:
        if module["backend"] != "npu":
            continue
        nodes = json.loads(seed.payloads[module["payloads"]["graph"]])["nodes"]
        read = {edge[0] for node in nodes if node["op"] == "kernel" for edge in node.get("inputs") or []}
        unread |= {f"{module['id']}.{n['name']}" for i, n in enumerate(nodes) if n["op"] == "input" and i not in read}
    return unread & set(int8_parameters(seed))


def own_blob(record: dict, payloads: list[bytes]) -> int:
    """Give a header constant a blob of its own (the writer shares equal ones: x's and r1's zero points)."""
    payloads.append(payloads[record["blob"]])
    record["blob"] = len(payloads) - 1
    return record["blob"]


#: The outcome a case must have: refused at load, or run computing exactly what the seed does.
REFUSED, IDENTICAL, EITHER = "rejected at load", "identical", "either"


def _expected(name: str, value, shift: int, unread: set[str]) -> str:
    """The oracle, from docs/quantization.md: a parameter no kernel reads (a weight's scale and zero point, folded
    into its integer kernel) changes nothing; activation scales finite and positive; zero points beside integer
    kernels 0; Q31 multipliers."""
    parameter = name.split(".", 1)[1]
    if name in unread:
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
    return what, seed.pack(header, payloads), _expected(name, value, shift, unread_parameters(seed))


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


# -- plans whose outputs outgrow the signature -------------------------------------------------------

#: Instructions appended after a plan's output, each making something other than what the signature declares.
OUTGROWERS = [
    ("tile", {"repeats": [2**14, 2**14]}),
    ("tile", {"repeats": [1, 3]}),
    ("expand", {"shape": [2**16, 1, 1]}),
    ("pad", {"pads": [0, 10**5, 0, 10**5], "mode": "constant", "value": 0.0}),
    ("resize", {"mode": "nearest", "scales": [1.0, 4096.0], "sizes": None,
                "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}),
    ("concat", {"axis": 0}),
    ("reshape", {"shape": [-1, 1], "allowzero": 0}),
    ("unsqueeze", {"axes": [0]}),
]  # fmt: skip


def outgrow_signature(rng: random.Random, seed: Seed) -> tuple[str, bytes, str]:
    """``seed``'s first output rewritten by one of ``OUTGROWERS``; returns what, the bundle, its expected outcome:
    refused at load where every shape up to the output is static (host and NPU plans), else refused at run."""
    header = copy.deepcopy(seed.header)
    plan = header["plan"]
    op, attrs = rng.choice(OUTGROWERS)
    out = plan["outputs"][0]
    operands = [out, out] if op == "concat" else [out]
    fresh = plan["num_slots"]
    plan["num_slots"] += 1
    plan["instructions"].append({"op": op, "name": f"outgrow_{op}", "in": operands, "out": [fresh], "attrs": attrs})
    plan["outputs"][0] = fresh
    static = all(m["backend"] == "npu" for m in header.get("modules", []))
    return f"{seed.name}: output through {op} {attrs}", seed.pack(header), REFUSED if static else EITHER


def classify_signature(data: bytes, job: tuple) -> str:
    """Never run; where the plan is static, never computed first and refused after (the run's output check)."""
    import runtime_lite

    inputs, expected = job
    outcome = hostile._classify(data, inputs)
    if outcome == "ran":
        return "FAIL a plan whose output differs from its signature ran"
    if expected == REFUSED and outcome == "refused at run":
        try:
            runtime_lite.load(data, max_memory=hostile.CASE_MAX_MEMORY).run(inputs)
        except runtime_lite.ExecutionError as e:
            if "the signature declares" in str(e):  # the output was computed, then refused
                return f"FAIL a static plan outgrowing its signature was not refused at load: {e}"
    return outcome


hostile.CLASSIFIERS["signature"] = classify_signature


def signature_cases(seeds: list[Seed], count: int, rng: random.Random) -> Iterator[tuple[str, bytes, tuple, str]]:
    for _ in range(count):
        seed = rng.choice(seeds)
        what, data, expected = outgrow_signature(rng, seed)
        yield what, data, (seed.inputs, expected), "signature"


# -- device arrays handed to Module.run ------------------------------------------------------------------
#
# Objects that claim to be GPU arrays: a lying ``__cuda_array_interface__`` or a DLPack capsule whose
# struct lies (rank, NULL pointers, dims, dtype, device, version). Every one must end as an InputError
# (or a run, where the host can read it), never a crash or a foreign exception. What the capsule's
# pointers point at is the caller's (docs/RELIABILITY.md, the trust boundary of run() inputs): the
# fakes keep their shape and strides arrays as long as the rank they declare, up to the 64 dims read.


class FakeCudaArray:
    """An object exporting ``__cuda_array_interface__`` with whatever fields a spec says (test double)."""

    def __init__(self, interface: Any):
        self._interface = interface

    @property
    def __cuda_array_interface__(self):
        return self._interface


class FakeDLPackArray:
    """An object whose ``__dlpack__`` returns a capsule built from a spec's struct fields (test double)."""

    def __init__(self, spec: dict):
        self.spec = spec
        self._keep: list = []

    def __dlpack_device__(self):
        return tuple(self.spec.get("claimed_device", (2, 0)))

    def __dlpack__(self, **_):
        import ctypes

        from runtime_lite.execution import dlpack

        spec = self.spec
        shape = spec["shape"]
        room = max(len(shape), min(max(spec["ndim"], 0), dlpack.MAX_DIMS), 1)
        shape_array = (ctypes.c_int64 * room)(*shape)
        strides = spec.get("strides")
        strides_array = (ctypes.c_int64 * room)(*strides) if isinstance(strides, list) else None
        managed = dlpack._ManagedVersioned() if spec.get("versioned") else dlpack._Managed()
        if spec.get("versioned"):
            managed.version = dlpack._Version(spec.get("major", 1), 0)
        tensor = managed.dl_tensor
        tensor.data = spec.get("data", 0x1000)
        tensor.device = dlpack._Device(*spec.get("device", (2, 0)))
        tensor.ndim = spec["ndim"]
        tensor.dtype = dlpack._DataType(*spec.get("dtype", (2, 32, 1)))
        if spec.get("shape_pointer", True):
            tensor.shape = ctypes.cast(shape_array, ctypes.POINTER(ctypes.c_int64))
        if strides_array is not None:
            tensor.strides = ctypes.cast(strides_array, ctypes.POINTER(ctypes.c_int64))
        self._keep += [shape_array, strides_array, managed]
        name = dlpack._VERSIONED if spec.get("versioned") else dlpack._LEGACY
        return dlpack._new_capsule(ctypes.addressof(managed), name, None)


def device_object(spec: dict) -> Any:
    return FakeCudaArray(spec["interface"]) if spec["kind"] == "cai" else FakeDLPackArray(spec)


def _hostile_dims(rng: random.Random, rank: int) -> list:
    return [rng.choice([0, 1, 3, 8, -1, 2**31, 2**62, 2**63 - 1]) for _ in range(rank)]


def device_spec(rng: random.Random, shape: tuple[int, ...]) -> dict:
    """One lying GPU array for an input of ``shape``, drawn to hurt the readers in runtime_lite/execution."""
    good = list(shape)
    if rng.random() < 0.4:
        interface: dict[str, Any] = {"shape": good, "typestr": "<f4", "data": (0x1000, False), "version": 2}
        key = rng.choice(["shape", "typestr", "data", "strides", "version", "stream", "missing"])
        interface[key] = rng.choice({
            "shape": [["a"], [1.5], None, "1,2", [-1, 3], [2**63] * 2, [1] * 65, _hostile_dims(rng, len(good)),
                      [True, 3], {"a": 1}],
            "typestr": ["", "O", "V8", "<f16", "zz", None, 3, "|b1", "<U4", "<c8"],
            "data": [None, (0, False), (-1, False), (2**64, False), ("x", False), 5, (0x1000,), [0x1000, True]],
            "strides": [[4], [-4, 4, 4, 4], ["a"], [2**63] * len(good), "x", [0] * len(good)],
            "version": [3, 1, "3", None],
            "stream": ["s", 1.5, -1, 2**70, None],
            "missing": [None],
        }[key])  # fmt: skip
        if key == "stream":
            interface["version"] = 3
        if key == "missing":
            interface.pop(rng.choice(["shape", "typestr", "data"]))
        return {"kind": "cai", "interface": interface, "what": f"__cuda_array_interface__ {key}={interface.get(key)!r}"}
    spec: dict[str, Any] = {"kind": "dlpack", "ndim": len(good), "shape": good, "versioned": rng.random() < 0.5}
    key = rng.choice(["ndim", "shape_pointer", "shape", "strides", "data", "dtype", "device", "major", "claimed"])
    if key == "ndim":
        spec["ndim"] = rng.choice([2**31 - 1, -1, -(2**31), 65, 1000, 64, 0])
    elif key == "shape_pointer":
        spec["shape_pointer"] = False
    elif key == "shape":
        spec["shape"] = _hostile_dims(rng, len(good))
    elif key == "strides":
        spec["strides"] = [rng.choice([0, -1, 2**62, 1]) for _ in good]
    elif key == "data":
        spec["data"] = rng.choice([0, 1, 2**64 - 1])
    elif key == "dtype":
        spec["dtype"] = rng.choice([(2, 32, 4), (2, 12, 1), (9, 32, 1), (2, 0, 1), (0, 256 - 8, 1), (4, 16, 1)])
    elif key == "device":
        spec["device"] = rng.choice([(1, 0), (3, 0), (99, 0), (2, -1)])
    elif key == "major":
        spec["versioned"], spec["major"] = True, rng.choice([0, 2, 2**32 - 1])
    else:
        spec["claimed_device"] = rng.choice([(2,), (1, 0), (2, 0, 0), ()])
    spec["what"] = f"DLPack {key}: {spec.get(key, spec.get('claimed_device'))!r}"
    return spec


def classify_device(data: bytes, job: tuple) -> str:
    """Run with a lying GPU array: an InputError (or ExecutionError) with one line, or a run; nothing else."""
    import runtime_lite

    spec, others = job
    module = runtime_lite.load(data)
    try:
        module.run([device_object(spec), *others])
    except (runtime_lite.InputError, runtime_lite.ExecutionError) as e:
        return "refused at run" if "\n" not in str(e) else "FAIL a multi-line message"
    except BaseException as e:  # noqa: BLE001 - every other exception is a finding
        return f"FAIL run raised {type(e).__name__}: {str(e)[:200]}"
    return "ran"


hostile.CLASSIFIERS["device"] = classify_device


def device_cases(seed: Seed, count: int, rng: random.Random) -> Iterator[tuple[str, bytes, tuple, str]]:
    data = seed.pack(seed.header)
    first = seed.inputs[0]
    for _ in range(count):
        spec = device_spec(rng, first.shape)
        yield f"{seed.name}: {spec['what']}", data, (spec, seed.inputs[1:]), "device"


# -- onnxruntime recipes the footprint must size: Resize's attributes, graph outputs never fetched --------


def onnxruntime_relu_seed() -> Seed:
    """An onnxruntime bundle of one Relu over x[1, 1, 8, 8], whose recipe the cases replace."""
    import aot
    from tests.helpers import make_model

    x = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, ["y"])
    result = aot.build(model, targets=["onnxruntime"], min_region_size=1, log=None)
    return Seed("relu-onnxruntime", copy.deepcopy(result.header), [bytes(p) for p in result.blobs.payloads], [x])


def _recipe(seed: Seed, nodes: list, extra_outputs: list[str], inits: dict, opset: int = 18):
    """An ONNX model from the seed's input to its output, with ``extra_outputs`` as graph outputs too."""
    from onnx import TensorProto

    recipe_index = seed.header["modules"][0]["payloads"]["recipe"]
    import onnx

    original = onnx.load_from_string(seed.payloads[recipe_index])
    x, y = original.graph.input[0].name, original.graph.output[0].name
    rename = {"x": x, "y": y}
    for node in nodes:
        node.input[:] = [rename.get(n, n) for n in node.input]
        node.output[:] = [rename.get(n, n) for n in node.output]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in [y, *extra_outputs]]
    graph = helper.make_graph(
        nodes, "hostile", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 1, 8, 8])], outputs,
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9), recipe_index


def _graph_output_bytes(model) -> int | None:
    """What onnxruntime holds at the end of a run at least: every graph output, sized by onnx's own shape
    inference (independent of runtime_lite's walk); None where it cannot say."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - a model onnx refuses: no oracle
        return None
    known = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    total = 0
    for output in model.graph.output:
        info = known.get(output.name)
        dims = info.type.tensor_type.shape.dim if info is not None else []
        if (
            info is None
            or not info.type.tensor_type.HasField("shape")
            or any(not d.HasField("dim_value") for d in dims)
        ):
            return None
        total += math.prod(d.dim_value for d in dims) * 4
    return total


def ort_shape_case(rng: random.Random, seed: Seed) -> tuple[str, bytes, int | None]:
    """A Resize with drawn axes, policy, sizes or scales; or Tiles of the input kept as extra graph outputs."""
    inits: dict[str, np.ndarray] = {}
    extras: list[str] = []
    if rng.random() < 0.6:
        axes = rng.choice([None, [1], [3], [2, 3], [-1], [0, 1, 2, 3], [1, 1], [4]])
        rank = 4 if axes is None else len(axes)
        attrs: dict[str, Any] = {"mode": "nearest"}
        if axes is not None:
            attrs["axes"] = axes
        if rng.random() < 0.6:
            inits["sizes"] = np.array([rng.choice([0, 1, 8, 256, 4096, 2**20, 2**22]) for _ in range(rank)], np.int64)
            attrs["keep_aspect_ratio_policy"] = rng.choice(["stretch", "not_larger", "not_smaller", "bogus"])
            node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
        else:
            inits["scales"] = np.array(
                [rng.choice([0.5, 1.0, 2.0, 64.0, 1024.0, -1.0]) for _ in range(rank)], np.float32
            )
            node = helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)
        nodes, what = [node], f"Resize {attrs} {next(iter(inits.values())).tolist()}"
    else:
        count = rng.randint(1, 40)
        inits["reps"] = np.array([1, 1, rng.choice([1, 16, 64, 128]), rng.choice([1, 16, 64, 128, 256])], np.int64)
        nodes, previous = [helper.make_node("Relu", ["x"], ["y"])], "x"
        for i in range(count):
            source = previous if rng.random() < 0.3 else "x"  # some outputs are read again as well
            nodes.append(
                helper.make_node(
                    "Relu" if source != "x" else "Tile", [source] + ([] if source != "x" else ["reps"]), [f"t{i}"]
                )
            )
            extras.append(f"t{i}")
            previous = f"t{i}"
        what = f"{count} extra outputs, Tile {inits['reps'].tolist()}"
    model, index = _recipe(seed, nodes, extras, inits)
    payloads = list(seed.payloads)
    payloads[index] = model.SerializeToString()
    return f"{seed.name}: {what}", seed.pack(seed.header, payloads), _graph_output_bytes(model)


def classify_ort_shape(data: bytes, job: tuple) -> str:
    """``hostile._classify``; a failure too if the run went through although onnxruntime must have held
    more than the budget (its graph outputs alone, by onnx's shape inference)."""
    inputs, held = job
    outcome = hostile._classify(data, inputs)
    if outcome == "ran" and held is not None and held > hostile.CASE_MAX_MEMORY:
        return f"FAIL onnxruntime held at least {held:,} bytes under max_memory = {hostile.CASE_MAX_MEMORY:,}"
    return outcome


hostile.CLASSIFIERS["ortshape"] = classify_ort_shape


def ort_shape_cases(seed: Seed, count: int, rng: random.Random) -> Iterator[tuple[str, bytes, tuple, str]]:
    for _ in range(count):
        what, data, held = ort_shape_case(rng, seed)
        yield what, data, (seed.inputs, held), "ortshape"
