"""One schema per record: what aot writes is what runtime_lite declares and reads back."""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import re
from pathlib import Path

import msgpack
import numpy as np
import pytest

import runtime_lite
from aot.compiler import build
from aot.compiler.backends.weights import constant_record
from aot.compiler.host_plan import LoweredPlan, lower_to_host_plan
from runtime_lite import format as fmt
from runtime_lite.backends import BackendContext, IncompatiblePayload, context_for
from runtime_lite.backends.npu import NpuBackend
from runtime_lite.backends.tensorrt.spec import BuildSettings, EngineRecord, FallbackRecord, TensorRTSpecs
from runtime_lite.execution.plan import _parse_instruction, _parse_instruction_naming_the_field
from runtime_lite.format.npu_records import NpuGraph
from runtime_lite.format.records import ConstantRecord, Instruction, PlanRecord
from runtime_lite.format.signature import TensorSpec
from tests.source_tree import python_sources
from tests.test_partition import conv_relu

ROOT = Path(__file__).resolve().parents[1]


def _npu_graph() -> dict:
    result = build(conv_relu(), targets=["npu"])
    return json.loads(bytes(result.blobs.payloads[result.header["modules"][0]["payloads"]["graph"]]))


def test_records_round_trip():
    graph = _npu_graph()
    assert NpuGraph.from_record(graph, "g").to_record() == graph
    lowered = lower_to_host_plan(conv_relu())
    assert isinstance(lowered, LoweredPlan)
    assert PlanRecord.from_record(lowered.record, "plan") == lowered.plan
    for raw in lowered.record["instructions"]:
        assert Instruction.from_record(raw, "i").to_record() == raw
    weights = bytearray(b"x")
    record = constant_record(weights, np.arange(6, dtype=np.int16).reshape(2, 3))
    assert record.to_record() == {"shape": [2, 3], "dtype": "int16", "offset": 64, "nbytes": 12}
    assert ConstantRecord.from_record(record.to_record(), "c") == record
    np.testing.assert_array_equal(record.view(memoryview(bytes(weights)), "c"), np.arange(6).reshape(2, 3))
    specs = TensorRTSpecs(
        region="r",
        inputs=(TensorSpec("x", ("N", 3), np.dtype("float32")),),
        outputs=(TensorSpec("y", ("N",), np.dtype("float32")),),
        settings=BuildSettings(batch=(1, 2, 4)),
        engines=(EngineRecord(payload="engine/0", tags=dict.fromkeys(("tensorrt", "cuda", "gpu"), "x")),),
    )
    written = msgpack.unpackb(msgpack.packb(specs.to_record()))
    assert written["format"] == fmt.TENSORRT_RECIPE
    with pytest.raises(runtime_lite.BundleError, match=r"'s.engines\[0\].tags.compute_capability' is missing"):
        TensorRTSpecs.from_record(written, "s")
    written["engines"] = []
    assert TensorRTSpecs.from_record(written, "s") == dataclasses.replace(specs, engines=())


def test_the_fast_instruction_path_reads_what_the_declared_fields_say():
    for raw in lower_to_host_plan(conv_relu()).record["instructions"]:
        assert _parse_instruction(raw, 0, 100) == _parse_instruction_naming_the_field(raw, 0, 100)
    unnamed = {"op": "relu", "in": [0], "out": [1]}
    assert _parse_instruction(unnamed, 7, 2).name == "#7" == _parse_instruction_naming_the_field(unnamed, 7, 2).name
    declared = {f.key for f in Instruction.schema()}
    assert declared == {"op", "name", "in", "out", "attrs", "inplace", "free"}


@pytest.mark.parametrize(
    "record, message",
    [
        ({"in": [0], "out": [1]}, r"'plan.instructions\[3\].op' is missing"),
        ({"op": "relu", "in": [0], "out": [1], "free": "x"}, r"'plan.instructions\[3\].free' must be list"),
        ({"op": "relu", "in": [0], "out": [9]}, r"'plan.instructions\[3\].out\[0\]' = 9 is out of range"),
        ({"op": "relu", "in": [0], "out": []}, r"'plan.instructions\[3\].out' is empty"),
    ],
)
def test_a_malformed_instruction_names_its_field(record, message):
    with pytest.raises(runtime_lite.BundleError, match=message):
        _parse_instruction(record, 3, 2)


def test_npu_errors_name_the_field_from_the_graph():
    graph = _npu_graph()
    del graph["nodes"][2]["attrs"]["dispatch"]["engine"]
    with pytest.raises(runtime_lite.BundleError, match=r"^bundle field 'npu.graph.nodes\[2\].attrs.dispatch.engine'"):
        NpuBackend().init(BackendContext(), {"graph": memoryview(json.dumps(graph).encode())}, {})


def test_old_npu_graphs_with_tvm_fields_still_load():
    graph = _npu_graph()
    assert "node_row_ptr" not in graph and "profile" not in graph
    graph["node_row_ptr"] = list(range(len(graph["nodes"]) + 1))
    graph["profile"] = {"name": "reference"}
    program = NpuBackend().init(BackendContext(), {"graph": memoryview(json.dumps(graph).encode())}, {})
    assert len(program.kernels) == 1


def test_a_fallback_of_another_format_is_incompatible():
    lowered = lower_to_host_plan(conv_relu())
    record = FallbackRecord(plan=lowered.plan, constants=()).to_record()
    assert record["format"] == fmt.HOST_PLAN
    assert FallbackRecord.from_record(record, "f").plan == lowered.plan
    with pytest.raises(IncompatiblePayload, match="host-plan/2"):
        FallbackRecord.from_record({**record, "format": "host-plan/2"}, "f")


def test_format_tags_are_spelled_only_in_runtime_lite_format():
    tag = re.compile(r"(host-plan|call-module|npu-graph|tensorrt-recipe|onnxruntime-recipe)/\d+")
    spelled = [
        str(path.relative_to(ROOT))
        for package in ("aot", "runtime_lite")
        for path in python_sources(package)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and tag.fullmatch(node.value)
    ]
    assert spelled == ["runtime_lite/format/__init__.py"] * 5


def test_a_quick_check_never_accepts_what_the_full_check_refuses():
    from runtime_lite.format.schema import INT, SLOW, STR, Dtype, ListOf, Shape

    values = [0, 7, -1, True, 1.0, "float32", "object", "", None, [], [1, 2], [True, 2], [-1], [1 << 40, 2],
              [1 << 41], [0, 1 << 41], [1] * 33, ["N", 3], {"a": 1}]  # fmt: skip
    for kind in (INT, STR, Dtype(), Shape(), Shape(allow_symbols=True), ListOf(INT), ListOf(INT, 2)):
        for value in values:
            quick = kind.quick(value)
            try:
                full = kind.parse(value, "f")
            except runtime_lite.BundleError:
                assert quick is SLOW, (kind, value)
            else:
                assert quick is SLOW or quick == full, (kind, value)


def test_tensorrt_errors_name_the_field_from_the_module_record():
    from runtime_lite.backends.tensorrt import TensorRTBackend

    result = build(conv_relu(), targets=["tensorrt"], min_region_size=1)
    module = result.header["modules"][0]
    payloads = {key: memoryview(bytes(result.blobs.payloads[blob])) for key, blob in module["payloads"].items()}
    specs = module["compile_specs"]
    assert TensorRTSpecs.from_record(specs, "s").to_record() == specs
    backend = TensorRTBackend()
    init = functools.partial(backend.init, context_for(backend, {}))
    with pytest.raises(runtime_lite.BundleError, match=r"^bundle field 'tensorrt.compile_specs.settings.precision'"):
        init(payloads, {**specs, "settings": {**specs["settings"], "precision": 16}})
    tags = dict.fromkeys(("tensorrt", "cuda", "gpu", "compute_capability", "platform"), "x")
    with pytest.raises(runtime_lite.BundleError, match=r"^bundle field 'tensorrt.compile_specs.engines\[0\].payload'"):
        init(payloads, {**specs, "engines": [{"payload": "engine/9", "tags": tags}]})
    fallback = msgpack.unpackb(bytes(payloads["fallback"]))
    assert FallbackRecord.from_record(fallback, "f").to_record() == fallback
    fallback["constants"][0]["nbytes"] += 4
    hostile = {**payloads, "fallback": memoryview(msgpack.packb(fallback))}
    with pytest.raises(runtime_lite.BundleError, match=r"^bundle field 'tensorrt.fallback.constants\[0\].nbytes' = "):
        init(hostile, specs)
    fallback["constants"][0]["nbytes"] -= 4
    fallback["plan"]["instructions"][0]["in"] = [99]
    hostile = {**payloads, "fallback": memoryview(msgpack.packb(fallback))}
    with pytest.raises(runtime_lite.BundleError, match=r"^bundle field 'tensorrt.fallback.plan.instructions\[0\].in"):
        init(hostile, specs)
