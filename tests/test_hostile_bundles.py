"""Hostile bundles: well-formed, correctly checksummed, and written to hurt (issue 15, docs/RELIABILITY.md).

Cases that could crash, hang or exhaust memory on a regression run in a forked
child under an address-space cap and a timeout (``tests/hostile.py``), so the
test fails instead of taking CI down.
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runtime_lite
from runtime_lite import BundleError, ExecutionError, InputError
from tests import hostile


@pytest.fixture(scope="module")
def seeds() -> dict[str, hostile.Seed]:
    return {seed.name: seed for seed in hostile.seeds()}


@pytest.fixture(scope="module")
def harness():
    h = hostile.Harness(workers=2)
    yield h
    h.close()


def _outcome(seed: hostile.Seed, header: dict, payloads: list[bytes] | None = None) -> str:
    """Load and run a re-packed bundle in an isolated child; its outcome (see hostile._classify)."""
    kind, value = hostile.isolated(hostile._classify, seed.pack(header, payloads), seed.inputs, timeout=30)
    return value if kind == "returned" else f"FAIL {kind}: {value}"


def _with_instruction(seed: hostile.Seed, op: str, attrs: dict, operands: list[int]) -> dict:
    header = copy.deepcopy(seed.header)
    plan = header["plan"]
    plan["instructions"].insert(
        0, {"op": op, "name": "hostile", "in": operands, "out": [plan["num_slots"]], "attrs": attrs}
    )
    plan["num_slots"] += 1
    return header


# -- the structure-aware campaign, drawn by hypothesis ------------------------------------------------


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.randoms(use_true_random=False))
def test_mutated_bundles_are_rejected_refused_or_run_never_worse(seeds, harness, rng):
    """Ten mutated bundles per example (300 in all): every outcome is BundleError, ExecutionError/InputError
    or a run with outputs the caller owns; never a crash, hang, foreign exception or allocation past the budget."""
    before = len(harness.failures)
    harness.run(hostile.cases(list(seeds.values()), 10, random.Random(rng.getrandbits(64))))
    new = harness.failures[before:]
    assert not new, "\n".join(f"{what}: {outcome}" for what, outcome, _ in new)


@pytest.mark.parametrize(
    "op, attrs", hostile.AMPLIFIERS, ids=[f"{op}-{i}" for i, (op, _) in enumerate(hostile.AMPLIFIERS)]
)
def test_hostile_geometry_is_refused_on_host_npu_and_tensorrt_fallback(seeds, harness, op, attrs):
    """Strides of 10^6, negative dilations, gigantic pads: the 648-byte SIGSEGV class, on every path."""
    cases = []
    for seed in seeds.values():
        for rng_seed in range(2):
            header, payloads = copy.deepcopy(seed.header), list(seed.payloads)
            rng = random.Random(rng_seed)
            plan, store = hostile._pick_plan(rng, header, payloads)
            defined = list(plan["inputs"]) + [pair[0] for pair in plan["constants"]]
            operands = [rng.choice(defined) for _ in range(2 if op.startswith("conv") else 1)]
            plan["instructions"].insert(
                0, {"op": op, "name": "amp", "in": operands, "out": [plan["num_slots"]], "attrs": dict(attrs)}
            )
            plan["num_slots"] += 1
            store(plan)
            cases.append((f"{seed.name}: {op}", seed.pack(header, payloads), seed.inputs))
    before = len(harness.failures)
    harness.run(iter(cases))
    assert not harness.failures[before:], harness.failures[before:]


def test_negative_dilation_conv_is_refused_before_touching_memory(seeds):
    seed = seeds["cnn-host"]
    attrs = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [-(10**6), 1], "groups": 1}
    with pytest.raises(BundleError, match="dilations"):  # attributes alone already prove it: refused at load
        runtime_lite.load(seed.pack(_with_instruction(seed, "conv2d", attrs, [0, 1])))


def test_hostile_npu_kernel_geometry_is_refused(seeds, harness):
    """The same geometry inside an NPU JSON graph's kernel body."""
    cases = []
    for name in ("cnn-npu", "geometry-npu"):
        seed = seeds[name]
        payloads = list(seed.payloads)
        for graph, store in hostile._npu_graphs(seed.header, payloads):
            for node in graph["nodes"]:
                for op in node["attrs"].get("body", []):
                    for key in ("strides", "dilations", "pads", "kernel_shape"):
                        if key in op.get("attrs", {}):
                            for value in (10**6, -(10**6), 0, 2**63 - 1):
                                op["attrs"][key] = [value] * len(op["attrs"][key])
                                store(graph)
                                cases.append((f"{name}: {key}={value}", seed.pack(seed.header, payloads), seed.inputs))
                                graph = json.loads(json.dumps(graph))
    assert cases
    before = len(harness.failures)
    harness.run(iter(cases))
    assert not harness.failures[before:], harness.failures[before:]


# -- the bundle file changing under a loaded Module --------------------------------------------------


def _two_bundles(seeds) -> tuple[bytes, bytes, hostile.Seed]:
    seed = seeds["cnn-host"]
    other = [bytes(b ^ 0x01 for b in p) if i == 0 else p for i, p in enumerate(seed.payloads)]
    return seed.pack(seed.header), seed.pack(seed.header, other), seed


def test_a_loaded_module_survives_truncation_and_overwrite_of_its_file(seeds, tmp_path):
    good, different, seed = _two_bundles(seeds)
    path = tmp_path / "model.bundle"
    path.write_bytes(good)

    def scenario():
        module = runtime_lite.load(path)
        expected = module.run(seed.inputs)[0]
        with open(path, "r+b") as f:  # rsync --inplace / cp over the old version
            f.truncate(100)
        truncated = module.run(seed.inputs)[0]
        path.write_bytes(different)
        overwritten = module.run(seed.inputs)[0]
        return bool(np.array_equal(expected, truncated) and np.array_equal(expected, overwritten))

    assert hostile.isolated(scenario) == ("returned", True)
    assert not np.array_equal(
        runtime_lite.load(path).run(seed.inputs)[0], runtime_lite.load(good).run(seed.inputs)[0]
    ), "the overwrite must change the weights, or the test proves nothing"


def test_map_file_detects_a_file_changed_in_place(seeds, tmp_path):
    good, different, seed = _two_bundles(seeds)
    path = tmp_path / "model.bundle"
    path.write_bytes(good)

    def scenario():
        module = runtime_lite.load(path, map_file=True)
        module.run(seed.inputs)
        with open(path, "r+b") as f:
            f.truncate(100)
        try:
            module.run(seed.inputs)
        except ExecutionError as e:
            return str(e)
        return "ran"

    kind, message = hostile.isolated(scenario)
    assert kind == "returned" and "changed on disk" in message


def test_a_fifo_or_device_as_bundle_path_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "bundle.fifo"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero", tmp_path):
        kind, message = hostile.isolated(runtime_lite.load, path, timeout=20)
        assert kind == "raised" and message.startswith("BundleError"), (path, kind, message)


# -- resource bounds ----------------------------------------------------------------------------------


def _repacked(seed: hostile.Seed, change) -> bytes:
    """The seed with its blob-table header changed by ``change`` (offsets kept valid)."""
    from aot.packager.writer import encode_preamble
    from runtime_lite.format.reader import read_bundle

    bundle = seed.pack(seed.header)
    header = read_bundle(bundle, verify=False).header
    data = bundle[len(encode_preamble(header)) :]
    change(header)
    return encode_preamble(header) + data


def test_overlapping_blob_records_are_refused_before_hashing(seeds):
    seed = seeds["geometry-host"]

    def many_records(header):
        biggest = max(header["blobs"], key=lambda r: r["size"])
        header["blobs"] = header["blobs"] + [dict(biggest)] * 100_000

    kind, message = hostile.isolated(runtime_lite.load, _repacked(seed, many_records), timeout=20)
    assert kind == "raised" and message.startswith("BundleError") and "overlap" in message


@pytest.mark.parametrize("count", [10**5, 2 * 10**6])
def test_a_header_of_empty_maps_is_refused_within_bounded_memory(seeds, count):
    seed = seeds["cnn-host"]
    data = _repacked(seed, lambda header: header.__setitem__("padding", [{}] * count))
    kind, message = hostile.isolated(runtime_lite.load, data, timeout=20)
    if count > runtime_lite.format.reader.MAX_DECODED_ITEMS:
        assert kind == "raised" and message.startswith("BundleError"), message
    else:
        assert kind in ("returned", "raised") and not message.startswith(("MemoryError", "RecursionError"))


def test_an_oversized_npu_json_graph_is_refused(seeds):
    seed = seeds["cnn-npu"]
    payloads = list(seed.payloads)
    for graph, store in hostile._npu_graphs(seed.header, payloads):
        graph["padding"] = [[0]] * 3_000_000
        store(graph)
    kind, message = hostile.isolated(runtime_lite.load, seed.pack(seed.header, payloads), timeout=60)
    assert kind == "raised" and message.startswith("BundleError"), message


def test_a_deeply_nested_header_is_a_bundle_error(seeds):
    seed = seeds["cnn-host"]

    def nest(header):
        nested = "x"
        for _ in range(1000):
            nested = [nested]
        header["model"] = {"name": nested}

    kind, message = hostile.isolated(runtime_lite.load, _repacked(seed, nest))
    assert kind == "raised" and message.startswith("BundleError") and "\n" not in message


def test_max_memory_refuses_an_amplifying_plan_and_can_be_raised(seeds):
    seed = seeds["cnn-host"]
    data = seed.pack(_with_instruction(seed, "tile", {"repeats": [1, 1, 64, 64]}, [0]))  # 3 MB of 3 kB
    with pytest.raises(ExecutionError, match="max_memory") as caught:
        runtime_lite.load(data, max_memory=1 << 20).run(seed.inputs)
    assert isinstance(caught.value.__cause__, MemoryError)
    runtime_lite.load(data, max_memory=64 << 20).run(seed.inputs)  # the caller raised the limit


def test_live_activations_are_bounded_not_only_single_allocations(seeds):
    seed = seeds["cnn-host"]
    header = copy.deepcopy(seed.header)
    plan = header["plan"]
    clones = [
        {"op": "tile", "name": f"t{k}", "in": [0], "out": [plan["num_slots"] + k], "attrs": {"repeats": [1, 1, 8, 8]}}
        for k in range(64)
    ]  # 64 kept-alive results of 48 kB: each fits 1 MiB, together they do not
    plan["instructions"] = clones + plan["instructions"]
    plan["num_slots"] += 64
    with pytest.raises(ExecutionError, match="live activations"):
        runtime_lite.load(seed.pack(header), max_memory=1 << 20).run(seed.inputs)


def test_max_run_seconds_stops_a_long_plan(seeds):
    seed = seeds["geometry-host"]
    header = copy.deepcopy(seed.header)
    plan = header["plan"]
    first = {k: v for k, v in plan["instructions"][0].items() if k not in ("free", "inplace")}
    plan["instructions"] = [dict(first, out=[plan["num_slots"]]) for _ in range(20_000)] + plan["instructions"]
    plan["num_slots"] += 1
    module = runtime_lite.load(seed.pack(header), max_run_seconds=0.2)
    kind, message = hostile.isolated(module.run, seed.inputs, timeout=30)
    assert kind == "raised" and message.startswith("ExecutionError") and "max_run_seconds" in message


def test_invalid_limits_are_refused(seeds):
    data = seeds["cnn-host"].pack(seeds["cnn-host"].header)
    for options in ({"max_memory": 0}, {"max_memory": -5}, {"max_run_seconds": float("nan")}):
        with pytest.raises((BundleError, ValueError, TypeError)):
            runtime_lite.load(data, **options)


def test_the_average_pool_divisor_cache_is_bounded():
    from runtime_lite.kernels import pool

    pool._avg_divisor.cache_clear()
    for size in range(4, 304):
        x = np.ones((1, 1, size, 5), np.float32)
        pool.avg_pool(
            x,
            kernel_shape=[3, 3],
            strides=[1, 1],
            pads=[1, 1, 1, 1],
            dilations=[1, 1],
            ceil_mode=0,
            count_include_pad=0,
        )
    assert pool._avg_divisor.cache_info().currsize <= pool._avg_divisor.cache_info().maxsize < 300


# -- meaning-level validation of plans -------------------------------------------------------------


def test_in_place_into_an_input_or_constant_slot_is_refused_at_load(seeds):
    seed = seeds["cnn-host"]
    for slot in (0, 1):  # the input, a weight
        header = copy.deepcopy(seed.header)
        header["plan"]["instructions"].insert(
            0, {"op": "relu", "name": "r", "in": [slot], "out": [slot], "attrs": {}, "inplace": 0}
        )
        with pytest.raises(BundleError, match="would write into slot"):
            runtime_lite.load(seed.pack(header))


def test_run_never_writes_the_callers_arrays_and_outputs_are_fresh(seeds):
    seed = seeds["cnn-host"]
    header = copy.deepcopy(seed.header)
    header["plan"]["instructions"] = []
    header["plan"]["outputs"] = [0, 0]  # the input itself, twice
    header["signature"]["outputs"] = [dict(header["signature"]["inputs"][0], name=n) for n in ("a", "b")]
    x = seed.inputs[0].copy()
    a, b = runtime_lite.load(seed.pack(header)).run([x])
    assert np.array_equal(a, x) and np.array_equal(b, x)
    assert not np.shares_memory(a, x) and not np.shares_memory(a, b)
    assert a.flags.writeable and b.flags.writeable


def test_outputs_are_checked_against_the_signature(seeds):
    """Shapes the plan makes from static inputs are checked at load (runtime_lite/execution/plan_shapes.py);
    a dtype, and a shape the walk cannot follow (a symbolic input), at the end of the run."""
    seed = seeds["cnn-host"]
    for change in ({"shape": [2, 10]}, {"shape": [1, 10, 1]}, {"shape": [10]}, {"shape": ["N", 11]}):
        header = copy.deepcopy(seed.header)
        header["signature"]["outputs"][0].update(change)
        with pytest.raises(BundleError, match="the plan makes output 'probs' .1, 10. from the signature's inputs"):
            runtime_lite.load(seed.pack(header))
    for change, inputs_shape in (({"dtype": "int64"}, [1, 3, 8, 8]), ({"shape": [2, 10]}, ["N", 3, 8, 8])):
        header = copy.deepcopy(seed.header)
        header["signature"]["outputs"][0].update(change)
        header["signature"]["inputs"][0]["shape"] = inputs_shape
        with pytest.raises(ExecutionError, match="output 'probs' is float32.1, 10., the signature declares"):
            runtime_lite.load(seed.pack(header)).run(seed.inputs)


def test_a_dtype_attribute_naming_object_is_refused(seeds):
    seed = seeds["cnn-host"]
    header = _with_instruction(seed, "cast", {"to": "object"}, [0])
    with pytest.raises(BundleError, match="object"):
        runtime_lite.load(seed.pack(header))


def test_a_tensorrt_fallback_weight_source_is_never_written(seeds):
    seed = seeds["cnn-tensorrt"]
    source = bytearray(seed.pack(seed.header))
    before = bytes(source)
    runtime_lite.load(source).run(seed.inputs)
    assert bytes(source) == before


# -- smaller breaks: exception types and one-line messages ------------------------------------------


def test_constant_shapes_that_overflow_are_bundle_errors(seeds):
    seed = seeds["cnn-host"]
    for shape in ([0, 2**63], [2**40, 0], [2**63 - 1, 2**63 - 1]):
        header = copy.deepcopy(seed.header)
        header["constants"][0]["shape"] = shape
        with pytest.raises(BundleError):
            runtime_lite.load(seed.pack(header))


def test_a_tensorrt_input_with_two_symbolic_dims_is_a_bundle_error(seeds):
    seed = seeds["cnn-tensorrt"]
    header = copy.deepcopy(seed.header)
    header["modules"][0]["compile_specs"]["inputs"][0]["shape"] = ["N", "M", 8, 8]
    header["signature"]["inputs"][0]["shape"] = ["N", "M", 8, 8]
    with pytest.raises(BundleError, match="symbolic"):
        runtime_lite.load(seed.pack(header))


@pytest.mark.parametrize("where", ["signature name", "region name", "payload key"])
def test_messages_from_bundle_strings_stay_on_one_line(seeds, where):
    seed = seeds["cnn-npu"]
    header = copy.deepcopy(seed.header)
    if where == "signature name":
        header["signature"]["inputs"][0]["name"] = "x\nFAKE LOG LINE"
        header["signature"]["inputs"][0]["shape"] = [1, 2]  # so that the load fails and names it
    elif where == "region name":
        header["modules"][0]["name"] = "npu_0\r\nFAKE"
        header["modules"][0]["backend"] = "no-such-backend\n"
    else:
        header["modules"][0]["payloads"] = {"graph\nFAKE": 99}
    with pytest.raises(runtime_lite.RuntimeLiteError) as caught:
        module = runtime_lite.load(seed.pack(header))
        module.run(seed.inputs)
    assert "\n" not in str(caught.value) and "\r" not in str(caught.value)


def test_unknown_backend_names_the_backend_and_scans_entry_points_once(seeds, monkeypatch):
    import importlib.metadata

    from runtime_lite import backends

    calls = []
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: calls.append(kw) or real(**kw))
    backends._installed_entry_points.cache_clear()
    seed = seeds["cnn-npu"]
    header = copy.deepcopy(seed.header)
    header["modules"][0]["backend"] = "acme_npu"
    for _ in range(3):
        with pytest.raises(BundleError, match="acme_npu"):
            runtime_lite.load(seed.pack(header))
    assert len(calls) == 1 and all("group" in kw for kw in calls)
    backends._installed_entry_points.cache_clear()


@pytest.mark.parametrize(
    "value, match",
    [(10**400, "x"), ([2**70], "x"), (np.ma.masked_array([1.0], mask=[True]), "masked")],
    ids=["huge-int", "huge-list", "masked"],
)
def test_unconvertible_inputs_are_input_errors(seeds, value, match):
    seed = seeds["cnn-host"]
    with pytest.raises(InputError, match=match):
        runtime_lite.load(seed.pack(seed.header)).run([value])


def test_matrix_inputs_give_ndarray_outputs_and_noncontiguous_views_load(seeds):
    seed = seeds["cnn-host"]
    bundle = seed.pack(seed.header)
    strided = memoryview(bytes(np.repeat(np.frombuffer(bundle, np.uint8), 2)))[::2]
    module = runtime_lite.load(strided)
    header = copy.deepcopy(seed.header)
    header["signature"]["inputs"][0]["shape"] = [1, 10]
    header["plan"]["instructions"] = []
    header["plan"]["outputs"] = header["plan"]["inputs"]
    header["signature"]["outputs"][0]["shape"] = [1, 10]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        matrix = np.matrix(np.ones((1, 10), np.float32))
    out = runtime_lite.load(seed.pack(header)).run([matrix])[0]
    assert type(out) is np.ndarray
    assert module.run(seed.inputs)[0].shape == (1, 10)


# -- the CLI ------------------------------------------------------------------------------------------


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runtime_lite", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_cli_run_writes_colliding_output_names_to_distinct_files(seeds, tmp_path):
    seed = seeds["cnn-host"]
    header = copy.deepcopy(seed.header)
    out_spec = header["signature"]["outputs"][0]
    header["signature"]["outputs"] = [dict(out_spec, name=n) for n in ("a/b", "a_b", "A_B", "..")]
    header["plan"]["outputs"] = header["plan"]["outputs"] * 4
    bundle = tmp_path / "m.bundle"
    bundle.write_bytes(seed.pack(header))
    result = _cli("run", str(bundle), "--random-inputs", "--output-dir", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(written) == 4, written
    assert not (tmp_path / "a").exists()


def test_cli_refuses_random_inputs_beyond_a_gigabyte_in_one_line(seeds, tmp_path):
    seed = seeds["cnn-host"]
    header = copy.deepcopy(seed.header)
    header["signature"]["inputs"][0]["shape"] = [1, 3, 8, 2**30]  # legal, and 96 GiB of random data
    bundle = tmp_path / "m.bundle"
    bundle.write_bytes(seed.pack(header))
    result = _cli("run", str(bundle), "--random-inputs")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_cli_info_on_a_deeply_nested_producer_is_one_line(seeds, tmp_path):
    seed = seeds["cnn-host"]

    def nest(header):
        nested = "aot"
        for _ in range(1000):
            nested = {"x": nested}
        header["producer"] = nested

    bundle = tmp_path / "m.bundle"
    bundle.write_bytes(_repacked(seed, nest))
    result = _cli("info", str(bundle))
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# -- onnxruntime recipes (issue 27) ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnxruntime_seeds() -> list[hostile.Seed]:
    return hostile.onnxruntime_seeds()


def test_mutated_onnxruntime_recipes_are_rejected_refused_or_run_never_worse(onnxruntime_seeds, harness):
    """Recipes with external-data paths, custom domains, other ops, opsets, attributes, dims, flipped bytes
    and broken weight references: each is refused by the recipe check, refused by onnxruntime as a one-line
    error, or runs; never a crash, a hang, a file read or a foreign exception."""
    before = len(harness.failures)
    harness.run(hostile.onnxruntime_cases(onnxruntime_seeds, 120, random.Random(27)))
    new = harness.failures[before:]
    assert not new, "\n".join(f"{what}: {outcome}" for what, outcome, _ in new)


# -- issue 29: bundles and options ----------------------------------------------------------------------


def test_an_empty_constant_with_huge_dims_is_a_bundle_error(seeds):
    """float32[0, 2**40, 2**40] holds no element, yet numpy refuses the dims ("array is too big")."""
    seed = seeds["cnn-host"]
    header = copy.deepcopy(seed.header)
    header["constants"][0]["shape"] = [0, 2**40, 2**40]
    payloads = list(seed.payloads)
    payloads[header["constants"][0]["blob"]] = b""
    with pytest.raises(BundleError, match=r"constants\[0\]"):
        runtime_lite.load(seed.pack(header, payloads))


@pytest.mark.parametrize("op, outs", [("relu", 2), ("split", 3), ("topk", 1)])
def test_an_instruction_names_exactly_as_many_result_slots_as_its_op_returns(seeds, op, outs):
    seed = seeds["cnn-host"]
    header = copy.deepcopy(seed.header)
    plan = header["plan"]
    attrs = {"relu": {}, "split": {"axis": 1, "sizes": [1, 2]}, "topk": {"k": 1, "axis": 1, "largest": 1, "sorted": 1}}
    slots = list(range(plan["num_slots"], plan["num_slots"] + outs))
    plan["instructions"].insert(0, {"op": op, "name": "hostile", "in": [0], "out": slots, "attrs": attrs[op]})
    plan["num_slots"] += outs
    with pytest.raises(BundleError, match=r"instructions\[0\]\.out.*hostile.*returns"):
        runtime_lite.load(seed.pack(header))


def test_two_modules_with_one_id_are_refused(seeds):
    seed = seeds["cnn-npu"]
    header = copy.deepcopy(seed.header)
    if len(header["modules"]) == 1:  # the whole CNN is one NPU region: a second module to clash with
        header["modules"].append(copy.deepcopy(header["modules"][0]))
    header["modules"][1]["id"] = header["modules"][0]["id"]
    with pytest.raises(BundleError, match=r"modules\[1\]\.id.*repeats"):
        runtime_lite.load(seed.pack(header))


@pytest.mark.parametrize(
    "options, match",
    [
        ({"cache_dir": 123}, "cache_dir"),
        ({"cache_dir": b"/tmp/x"}, "cache_dir"),
        ({"cache_dir": "/tmp/a\0b"}, "NUL"),
        ({"allow_engine_build": [1]}, "allow_engine_build"),
        ({"allow_engine_build": "maybe"}, "allow_engine_build"),
        ({"allow_version_compatible": 1}, "allow_version_compatible"),
    ],
)
def test_every_declared_option_checks_its_type(seeds, options, match):
    from runtime_lite.errors import OptionError

    seed = seeds["cnn-tensorrt"]
    with pytest.raises(OptionError, match=match) as caught:
        runtime_lite.load(seed.pack(seed.header), backend_options={"tensorrt": options})
    assert "\n" not in str(caught.value)


def test_options_given_as_python_values_of_the_right_type_are_accepted(seeds, tmp_path):
    import pathlib

    seed = seeds["cnn-tensorrt"]
    module = runtime_lite.load(
        seed.pack(seed.header),
        backend_options={"tensorrt": {"cache_dir": pathlib.Path(tmp_path), "allow_engine_build": False}},
    )
    module.run(seed.inputs)


# -- issue 29: the budget and cache families of the campaign, at CI size -------------------------------


def test_the_budget_family_never_allocates_past_the_budget(seeds, harness):
    """Amplifying chains of every kernel (tests/hostile.py: insert_budget_chain), run under tracemalloc."""
    before = len(harness.failures)
    harness.run(hostile.budget_cases(list(seeds.values()), 60, random.Random(29)))
    assert not harness.failures[before:], [(what, outcome) for what, outcome, _ in harness.failures[before:]]


def test_the_cache_family_never_serves_a_planted_engine_or_writes_outside(harness):
    """An engine cache in use while someone with write access to its directory attacks it."""
    before = len(harness.failures)
    harness.run(hostile.cache_cases(80, random.Random(29)))
    assert not harness.failures[before:], [(what, outcome) for what, outcome, _ in harness.failures[before:]]
