"""The v2 inference protocol and the service behind it, without Ray: codec, routing, errors, batching."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib

import numpy as np
import pytest
from onnx import helper

import aot
import runtime_lite
from runtime_lite.format.signature import TensorSpec
from runtime_lite.serving.batching import batch_axis, run_batched
from runtime_lite.serving.protocol import ProtocolError, decode_infer_request
from runtime_lite.serving.service import InferenceService, served_model
from tests.helpers import make_model, rand


def mlp_bundle(seed: int = 1, batch: object = "N", targets: tuple[str, ...] = ()) -> bytes:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    model = make_model(nodes, {"x": rand(1, 4)}, ["y"], {"w": rand(4, 8, seed=seed)}, input_shapes={"x": [batch, 4]})
    return aot.build(model, targets=list(targets)).to_bytes()


@pytest.fixture(scope="module")
def module() -> runtime_lite.Module:
    return runtime_lite.load(mlp_bundle())


@pytest.fixture
def service(module) -> InferenceService:
    return InferenceService({"mlp": served_model("mlp", module, max_batch_size=1)})


def call(service, method, path, body=b"", headers=None):
    return asyncio.run(service.handle(method, path, headers or {}, body))


def infer_json(x: np.ndarray, **extra) -> bytes:
    request = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
    return json.dumps({**request, **extra}).encode()


def infer_binary(x: np.ndarray, outputs=None) -> tuple[bytes, dict[str, str]]:
    request = {
        "inputs": [
            {"name": "x", "shape": list(x.shape), "datatype": "FP32", "parameters": {"binary_data_size": x.nbytes}}
        ],
        "parameters": {"binary_data_output": True},
    }
    if outputs is not None:
        request["outputs"] = outputs
    header = json.dumps(request).encode()
    return header + x.tobytes(), {"inference-header-content-length": str(len(header))}


def error_of(response) -> str:
    message = json.loads(response.body)["error"]
    assert "\n" not in message
    return message


def test_json_infer_matches_direct_run(service, module):
    x = rand(3, 4, seed=5)
    response = call(service, "POST", "/v2/models/mlp/infer", infer_json(x, id="r1"))
    assert response.status == 200 and response.headers["content-type"] == "application/json"
    answer = json.loads(response.body)
    assert answer["id"] == "r1" and answer["model_name"] == "mlp" and answer["model_version"] == module.digest[:12]
    (output,) = answer["outputs"]
    assert output["shape"] == [3, 8] and output["datatype"] == "FP32"
    np.testing.assert_array_equal(np.array(output["data"], np.float32).reshape(3, 8), module.run([x])[0])


def test_bool_masks_empty_batches_and_scalar_outputs_keep_their_shapes():
    """A BOOL mask, an empty batch (``"data": []``, which numpy reads as float64) and a 0-d output (a sum over
    everything), as JSON and as binary: each shape and datatype as the model gives them."""
    nodes = [
        helper.make_node("Where", ["mask", "x", "zero"], ["y"]),
        helper.make_node("ReduceSum", ["y"], ["total"], keepdims=0),
    ]
    feeds = {"x": rand(2, 3), "mask": np.array([[True, False, True], [False, True, True]])}
    model = make_model(
        nodes, feeds, ["y", "total"], {"zero": np.array(0, np.float32)}, opset=17,
        input_shapes={"x": ["N", 3], "mask": ["N", 3]},
    )  # fmt: skip
    module = runtime_lite.load(aot.build(model, targets=["onnxruntime"], log=None).to_bytes())
    service = InferenceService({"m": served_model("m", module, max_batch_size=1)})
    for x, mask in ((feeds["x"], feeds["mask"]), (feeds["x"][:0], feeds["mask"][:0])):
        inputs = [
            {"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()},
            {"name": "mask", "shape": list(mask.shape), "datatype": "BOOL", "data": mask.ravel().tolist()},
        ]
        expected = module.run({"x": x, "mask": mask})
        for binary in (False, True):
            body = json.dumps({"inputs": inputs, "parameters": {"binary_data_output": binary}}).encode()
            response = call(service, "POST", "/v2/models/m/infer", body)
            assert response.status == 200, response.body
            n = int(response.headers.get("inference-header-content-length", len(response.body)))
            outputs, blobs = json.loads(response.body[:n])["outputs"], response.body[n:]
            for output, want in zip(outputs, expected, strict=True):
                assert (output["shape"], output["datatype"]) == (list(want.shape), "FP32"), output
                if binary:
                    size = output["parameters"]["binary_data_size"]
                    got, blobs = np.frombuffer(blobs[:size], np.float32).reshape(want.shape), blobs[size:]
                else:
                    got = np.array(output["data"], np.float32).reshape(want.shape)
                np.testing.assert_array_equal(got, want)


def test_binary_infer_round_trips_bytes_exactly(service, module):
    x = rand(2, 4, seed=6)
    body, headers = infer_binary(x)
    response = call(service, "POST", "/v2/models/mlp/infer", body, headers)
    assert response.status == 200
    n = int(response.headers["inference-header-content-length"])
    header = json.loads(response.body[:n])
    assert header["outputs"][0]["parameters"]["binary_data_size"] == 2 * 8 * 4
    y = np.frombuffer(response.body[n:], np.float32).reshape(2, 8)
    np.testing.assert_array_equal(y, module.run([x])[0])


def test_output_chosen_as_json_inside_a_binary_request(service, module):
    x = rand(1, 4, seed=7)
    body, headers = infer_binary(x, outputs=[{"name": "y", "parameters": {"binary_data": False}}])
    response = call(service, "POST", "/v2/models/mlp/infer", body, headers)
    assert response.status == 200 and "inference-header-content-length" not in response.headers
    assert len(json.loads(response.body)["outputs"][0]["data"]) == 8


def test_gzip_request_body_is_read(service, module):
    x = rand(2, 4, seed=8)
    response = call(service, "POST", "/v2/models/mlp/infer", gzip.compress(infer_json(x)), {"content-encoding": "gzip"})
    assert response.status == 200


def test_a_gzip_body_of_several_members_is_their_concatenation(service, module):
    """RFC 1952 allows a gzip file of several members (``cat a.gz b.gz``, pigz's blocks); a deflate stream has one."""
    x = rand(2, 4, seed=9)
    body = infer_json(x)
    members = gzip.compress(body[:10]) + gzip.compress(body[10:-5]) + gzip.compress(body[-5:])
    response = call(service, "POST", "/v2/models/mlp/infer", members, {"content-encoding": "gzip"})
    assert response.status == 200, response.body
    whole = call(service, "POST", "/v2/models/mlp/infer", gzip.compress(body), {"content-encoding": "gzip"})
    assert json.loads(response.body)["outputs"] == json.loads(whole.body)["outputs"]
    garbage = call(
        service, "POST", "/v2/models/mlp/infer", gzip.compress(body) + b"\0\0junk", {"content-encoding": "gzip"}
    )
    assert garbage.status == 400
    deflated = zlib.compress(body)
    extra = call(service, "POST", "/v2/models/mlp/infer", deflated + deflated, {"content-encoding": "deflate"})
    assert extra.status == 400 and b"after the end of its deflate stream" in extra.body


def test_metadata_says_symbolic_dims_version_and_batching(service, module):
    response = call(service, "GET", "/v2/models/mlp")
    meta = json.loads(response.body)
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert meta["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 8]}]
    assert meta["versions"] == [module.digest[:12]] and meta["parameters"]["bundle_digest"] == module.digest
    assert meta["parameters"]["dynamic_batching"] is False


@pytest.mark.parametrize("max_batch_size", [1, 8])
def test_model_config_is_tritons_with_the_batch_dim_left_out_where_the_model_batches(module, max_batch_size):
    """What tritonclient's get_model_config and perf_analyzer read to size their requests."""
    service = InferenceService({"mlp": served_model("mlp", module, max_batch_size=max_batch_size)})
    response = call(service, "GET", "/v2/models/mlp/config")
    assert response.status == 200
    config = json.loads(response.body)
    batched = max_batch_size > 1
    assert config["max_batch_size"] == (8 if batched else 0)
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [4] if batched else [-1, 4]}]
    assert config["output"] == [{"name": "y", "data_type": "TYPE_FP32", "dims": [8] if batched else [-1, 8]}]
    assert ("dynamic_batching" in config) is batched
    assert call(service, "POST", "/v2/models/mlp/config").status == 405


def test_health_server_metadata_and_versions(service, module):
    assert call(service, "GET", "/v2/health/live").status == 200
    assert call(service, "GET", "/v2/health/ready").status == 200
    assert call(service, "GET", "/v2/models/mlp/ready").status == 200
    assert json.loads(call(service, "GET", "/v2").body)["extensions"] == [
        "binary_tensor_data",
        "classification",
        "model_configuration",
    ]
    version = module.digest[:12]
    assert call(service, "GET", f"/v2/models/mlp/versions/{version}/ready").status == 200
    stale = call(service, "GET", "/v2/models/mlp/versions/0000/ready")
    assert stale.status == 404 and version in error_of(stale)


def test_not_ready_until_models_are_loaded():
    empty = InferenceService()
    assert call(empty, "GET", "/v2/health/live").status == 200
    response = call(empty, "GET", "/v2/health/ready")
    assert response.status == 503 and "not ready" in error_of(response)


@pytest.mark.parametrize(
    ("method", "path", "status", "words"),
    [
        ("GET", "/v2/models/resnet", 404, "unknown model 'resnet' (serving: mlp)"),
        ("POST", "/v2/models/resnet/infer", 404, "unknown model 'resnet'"),
        ("GET", "/v2/models/mlp/infer", 405, "use POST"),
        ("POST", "/v2/health/live", 405, "use GET"),
        ("GET", "/v1/models/mlp", 404, "/v2"),
        ("GET", "/v2/models/mlp/stats", 404, "no route"),
    ],
)
def test_routes_refused_with_status_and_one_line(service, method, path, status, words):
    response = call(service, method, path)
    assert response.status == status and words in error_of(response)


X_OK = {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}


@pytest.mark.parametrize(
    ("request_body", "words"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "JSON object"),
        (b'{"inputs": []}', "non-empty 'inputs'"),
        (json.dumps({"inputs": [{**X_OK, "name": "z"}]}), "unknown input 'z'"),
        (json.dumps({"inputs": [{**X_OK, "datatype": "FP64"}]}), "datatype FP64 but the model takes FP32"),
        (json.dumps({"inputs": [{**X_OK, "datatype": "BYTES"}]}), "datatype 'BYTES'"),
        (json.dumps({"inputs": [{**X_OK, "shape": [1, 5], "data": [0] * 5}]}), "input 'x': expected shape [N,4]"),
        (json.dumps({"inputs": [{**X_OK, "shape": [2, 4]}]}), "4 values for shape [2, 4] (needs 8)"),
        (json.dumps({"inputs": [{**X_OK, "shape": [-1, 4]}]}), "non-negative integers"),
        (json.dumps({"inputs": [{**X_OK, "data": ["a", "b", "c", "d"]}]}), "not FP32 values"),
        (json.dumps({"inputs": [X_OK, X_OK]}), "given twice"),
        (json.dumps({"inputs": [{k: v for k, v in X_OK.items() if k != "data"}]}), "neither 'data'"),
        (json.dumps({"inputs": [X_OK], "outputs": [{"name": "logits"}]}), "unknown output 'logits'"),
        (json.dumps({"inputs": [X_OK], "parameters": []}), "parameters must be an object"),
    ],
)
def test_bad_requests_are_400_naming_the_problem(service, request_body, words):
    body = request_body.encode() if isinstance(request_body, str) else request_body
    response = call(service, "POST", "/v2/models/mlp/infer", body)
    assert response.status == 400 and words in error_of(response)


@pytest.mark.parametrize(
    ("binary_size", "header_length", "extra", "words"),
    [
        (16, "9999", b"", "not a length inside"),
        (16, "abc", b"", "not a length inside"),
        (12, None, b"", "12 binary bytes for shape [1, 4] of FP32 (needs 16)"),
        (64, None, b"", "runs past the binary section"),
        (16, None, b"tail", "4 bytes no input claims"),
    ],
)
def test_bad_binary_sections_are_400(service, binary_size, header_length, extra, words):
    request = {"inputs": [{**X_OK, "parameters": {"binary_data_size": binary_size}}]}
    del request["inputs"][0]["data"]
    header = json.dumps(request).encode()
    body = header + np.arange(4, dtype=np.float32).tobytes() + extra
    length = header_length if header_length is not None else str(len(header))
    response = call(service, "POST", "/v2/models/mlp/infer", body, {"inference-header-content-length": length})
    assert response.status == 400 and words in error_of(response)


def test_compression_errors_and_bombs_are_refused(module):
    service = InferenceService({"mlp": served_model("mlp", module, 1)}, max_request_bytes=1000)
    bomb = gzip.compress(b" " * 100_000)
    assert call(service, "POST", "/v2/models/mlp/infer", bomb, {"content-encoding": "gzip"}).status == 413
    assert call(service, "POST", "/v2/models/mlp/infer", b"xx", {"content-encoding": "gzip"}).status == 400
    assert call(service, "POST", "/v2/models/mlp/infer", b"xx", {"content-encoding": "br"}).status == 415


def test_a_model_failure_is_500_with_one_line(module):
    async def broken(arrays):
        raise RuntimeError("kernel exploded\nsecond line")

    service = InferenceService({"mlp": served_model("mlp", module, 1, infer=broken)})
    response = call(service, "POST", "/v2/models/mlp/infer", infer_json(rand(1, 4)))
    assert response.status == 500 and "model 'mlp' failed: RuntimeError: kernel exploded" in error_of(response)


def test_swapping_models_changes_the_version_answered(module):
    service = InferenceService({"mlp": served_model("mlp", module, 1)})
    newer = runtime_lite.load(mlp_bundle(seed=2))
    service.replace_models({"mlp": served_model("mlp", newer, 1)})
    answer = json.loads(call(service, "POST", "/v2/models/mlp/infer", infer_json(rand(1, 4))).body)
    assert answer["model_version"] == newer.digest[:12] != module.digest[:12]


def test_decoding_without_a_spec_match_names_missing_inputs():
    specs = (TensorSpec("a", (2,), np.dtype("float32")), TensorSpec("b", (2,), np.dtype("float32")))
    body = json.dumps({"inputs": [{"name": "a", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}).encode()
    with pytest.raises(ProtocolError, match="missing input 'b'"):
        decode_infer_request(body, None, specs)


def spec(name, *shape):
    return TensorSpec(name, shape, np.dtype("float32"))


def test_batch_axis_needs_one_leading_symbol_everywhere():
    assert batch_axis([spec("x", "N", 4)], [spec("y", "N", 8)]).symbol == "N"
    assert "fixed first dim 1" in batch_axis([spec("x", 1, 4)], [spec("y", 1, 8)]).reason
    assert "does not have the batch dim" in batch_axis([spec("x", "N", 4)], [spec("y", 8)]).reason
    assert "beyond its first dim" in batch_axis([spec("x", "N", "N")], [spec("y", "N")]).reason
    assert not batch_axis([spec("x", "N", 4), spec("m", "B", 4)], [spec("y", "N")]).enabled


def test_run_batched_splits_rows_back_and_groups_other_dims(module):
    calls = []

    def run(arrays):
        calls.append(arrays[0].shape)
        return [arrays[0] * 2, arrays[0].sum(axis=1)]

    requests = [[rand(1, 4, seed=1)], [rand(3, 4, seed=2)], [rand(2, 5, seed=3)], [rand(2, 4, seed=4)]]
    results = run_batched(run, requests)
    assert sorted(calls) == [(2, 5), (6, 4)]  # one run per group of equal trailing dims
    for (x,), (double, total) in zip(requests, results):
        np.testing.assert_array_equal(double, x * 2)
        np.testing.assert_array_equal(total, x.sum(axis=1))


def test_run_batched_keeps_a_failure_inside_its_group():
    def run(arrays):
        if arrays[0].shape[1] == 5:
            raise ValueError("bad group")
        return [arrays[0]]

    results = run_batched(run, [[rand(1, 4)], [rand(1, 5)], [rand(2, 4)]])
    assert isinstance(results[1], ValueError)
    assert results[0][0].shape == (1, 4) and results[2][0].shape == (2, 4)


def test_batched_service_answers_each_request_with_its_own_rows(module):
    """The service with a batcher in front: concurrent requests come back identical to direct runs."""
    queue: list = []

    async def batching_infer(arrays):
        future = asyncio.get_running_loop().create_future()
        queue.append((arrays, future))
        await asyncio.sleep(0.01)
        if queue:
            batch, queue[:] = list(queue), []
            for (_, f), result in zip(batch, run_batched(module.run, [a for a, _ in batch])):
                f.set_result(result)
        return await future

    service = InferenceService({"mlp": served_model("mlp", module, 8, infer=batching_infer)})
    xs = [rand(k, 4, seed=k) for k in (1, 2, 3, 1)]

    async def all_requests():
        return await asyncio.gather(*(service.handle("POST", "/v2/models/mlp/infer", {}, infer_json(x)) for x in xs))

    for x, response in zip(xs, asyncio.run(all_requests())):
        data = json.loads(response.body)["outputs"][0]["data"]
        # rows of a larger GEMM may round differently in the last bit: batching promises closeness, not bits
        np.testing.assert_allclose(
            np.array(data, np.float32).reshape(len(x), 8), module.run([x])[0], rtol=1e-6, atol=1e-7
        )


def test_fixed_batch_bundle_says_batching_is_off():
    fixed = runtime_lite.load(mlp_bundle(batch=1))
    model = served_model("fixed", fixed, max_batch_size=8)
    assert not model.batching and "fixed first dim 1" in model.metadata()["parameters"]["batching"]


class OverlapRecorder:
    """Test double of a module: records how many runs overlap in time (a real run takes a while)."""

    def __init__(self, module):
        import threading

        self.module, self.inputs, self.outputs, self.digest = module, module.inputs, module.outputs, module.digest
        self.running = self.most = 0
        self.lock = threading.Lock()

    def run(self, arrays):
        import time

        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.02)
        with self.lock:
            self.running -= 1
        return self.module.run(arrays)


def test_concurrent_requests_run_the_model_one_at_a_time(module):
    """A run already uses every thread of the replica: concurrent runs would only fight over the cores."""
    recorder = OverlapRecorder(module)
    service = InferenceService({"mlp": served_model("mlp", recorder, max_batch_size=1)})
    xs = [rand(1, 4, seed=k) for k in range(8)]

    async def all_requests():
        return await asyncio.gather(*(service.handle("POST", "/v2/models/mlp/infer", {}, infer_json(x)) for x in xs))

    responses = asyncio.run(all_requests())
    assert [r.status for r in responses] == [200] * 8
    assert recorder.most == 1


# --- hostile requests (issue 29): every one a 4xx with one line, none a 500, none allocating past its bound ---

DEEP = 100_000


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def hostile_input(**fields) -> bytes:
    return json.dumps({"inputs": [{**X_OK, **fields}]}).encode()


HOSTILE = [
    (b"[" * DEEP, "nested too deeply"),
    (b'{"inputs": ' + b"[" * DEEP + b"]" * DEEP + b"}", "nested too deeply"),
    (
        b'{"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": ' + nested(600).encode() + b"}]}",
        "not FP32",
    ),
    (b'{"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": ' + nested(990).encode() + b"}]}", ""),
    (b'{"id": ' + nested(990, "").encode() + b', "inputs": []}', "nested too deeply"),
    (hostile_input(shape=[0, 2**70], data=[]), "over the 268435456-byte limit"),
    (hostile_input(shape=[2**62, 2**62], data=[]), "over the 268435456-byte limit"),
    (hostile_input(shape=[0] * 100, data=[]), "has 100 dims; the model takes 2"),
    (hostile_input(shape=[4], data=[1, 2, 3, 4]), "has 1 dims; the model takes 2"),
    (hostile_input(datatype=[]), "datatype [] is not one"),
    (hostile_input(datatype={}), "datatype {} is not one"),
    (hostile_input(datatype=None), "datatype None is not one"),
    (hostile_input(data=[None, 1, 2, 3]), "data holds null, not FP32 values"),
    (hostile_input(data=[1, 2, 3, [4]]), "not FP32 values"),
    (hostile_input(data=[1, 2, 3, {"a": 1}]), "not FP32 values"),
    (hostile_input(data=[1, 2, 3, 2**70]), "not FP32 values"),
    (hostile_input(data=[1, 2, 3, 1e300]), "FP32 cannot represent exactly"),
    (hostile_input(data=[[1, 2], [3]]), "not FP32 values"),
    (hostile_input(data=1.0), "1 values for shape [1, 4] (needs 4)"),
    (hostile_input(shape=[True, 4]), "non-negative integers"),
    (json.dumps({"id": ["a"], "inputs": [X_OK]}).encode(), "'id' must be a string"),
    (json.dumps({"inputs": [X_OK], "outputs": [{"name": ["y"]}]}).encode(), "outputs[0]"),
    (
        b'{"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 1' + b"9" * 5000 + b"]}]}",
        "JSON",
    ),
    ('{"inputs": ["\udcff"]}'.encode("utf-8", "surrogatepass"), "inputs[0]"),
    (b"\xff\xfe\x00", "JSON"),
]


@pytest.mark.parametrize(("request_body", "words"), HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_requests_are_400_with_one_line(service, request_body, words):
    response = call(service, "POST", "/v2/models/mlp/infer", request_body)
    assert response.status == 400, response.body[:300]
    assert words in error_of(response)


@pytest.mark.parametrize(
    ("datatype", "values", "accepted"),
    [
        ("INT32", [1, 2], True),
        ("INT32", [1.0, 2.0], True),
        ("INT32", [1.5, 2], False),
        ("INT8", [300, 1], False),
        ("UINT8", [-1, 1], False),
        ("BOOL", [True, False], True),
        ("BOOL", [2, 0], False),
        ("INT64", [None, 1], False),
        ("FP16", [70000.0, 1], False),
        ("FP64", [float("nan"), 1], True),  # an explicit NaN is a value; null is not
    ],
)
def test_json_values_a_cast_would_change_are_refused(datatype, values, accepted):
    from runtime_lite.serving.protocol import DATATYPES

    specs = (TensorSpec("t", ("N",), DATATYPES[datatype]),)
    body = json.dumps({"inputs": [{"name": "t", "shape": [2], "datatype": datatype, "data": values}]}).encode()
    if accepted:
        decoded = decode_infer_request(body, None, specs).inputs["t"]
        np.testing.assert_array_equal(decoded, np.array(values, DATATYPES[datatype]))
    else:
        with pytest.raises(ProtocolError) as refused:
            decode_infer_request(body, None, specs)
        assert refused.value.status == 400 and "input 't'" in str(refused.value)


def traced_peak(fn) -> tuple[object, int]:
    import tracemalloc

    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "text",
    [
        b"[" + b"0," * 200_000 + b"0]",
        b"[" + b"1.5," * 100_000 + b"1.5]",
        b"[" + b"1000000," * 50_000 + b"1]",
        b"[" + b"[]," * 100_000 + b"[]]",
        b"[" + b"[1.5]," * 100_000 + b"[1.5]]",
        b"[" + b"{}," * 100_000 + b"{}]",
        b'[' + b'{"a":1.5},' * 50_000 + b'{"a":1.5}]',
        b'{' + b",".join(b'"k%d":1.5' % i for i in range(50_000)) + b"}",
        b"[" + b",".join(b'"%d"' % i for i in range(100_000)) + b"]",
        "[" + '"\U0001F600",' * 50_000 + '"x"]',
        '["' + "\U0001F600" * 50_000 + '"]',
        b"[" * 900 + b"]" * 900,
    ],
    ids=["zeros", "floats", "ints", "empty-lists", "one-float-lists", "empty-dicts", "small-dicts", "wide-dict",
         "strings", "emoji-strings", "one-emoji-string", "nesting"],
)  # fmt: skip
def test_json_cost_bounds_what_parsing_allocates(text):
    """The estimate json_cost makes from bytes alone is never below what json.loads and numpy really allocate."""
    from runtime_lite.serving.protocol import json_cost

    data = text.encode() if isinstance(text, str) else text

    def parse_and_build():
        parsed = json.loads(data)
        try:
            array = np.asarray(parsed)
            return parsed, array, array.astype(np.float32) if array.dtype.kind in "biuf" else None
        except (ValueError, TypeError):
            return parsed, None, None

    _, peak = traced_peak(parse_and_build)
    assert peak <= json_cost(data), (peak, json_cost(data), peak / len(data))


def bomb(size: int, pattern: bytes = b"0,") -> bytes:
    """gzip of a JSON request whose data list is ``size`` bytes of ``pattern``: a few hundred kB on the wire."""
    import zlib

    head = b'{"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": ['
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [deflate.compress(head)]
    block = pattern * ((1 << 20) // len(pattern))
    for _ in range(size // len(block)):
        parts.append(deflate.compress(block))
    parts.append(deflate.compress(b"0]}]}"))
    parts.append(deflate.flush())
    return b"".join(parts)


def test_a_gzip_bomb_under_the_size_cap_is_refused_within_bounded_memory(service):
    """~200 kB of gzip inflating to 200 MiB of JSON (under the 256 MiB cap) was parsed whole: ~1.5 GB of peak."""
    body = bomb(200 << 20)
    assert len(body) < 400_000
    response, peak = traced_peak(
        lambda: call(service, "POST", "/v2/models/mlp/infer", body, {"content-encoding": "gzip"})
    )
    assert response.status == 413 and "binary tensor extension" in error_of(response)
    assert peak < 40 << 20, f"peak {peak >> 20} MiB"


def test_a_binary_section_bomb_is_refused_one_step_past_what_the_header_declares(service):
    import zlib

    header = json.dumps(
        {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}]}
    ).encode()
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    body = deflate.compress(header) + b"".join(deflate.compress(bytes(1 << 20)) for _ in range(200)) + deflate.flush()
    headers = {"content-encoding": "gzip", "inference-header-content-length": str(len(header))}
    response, peak = traced_peak(lambda: call(service, "POST", "/v2/models/mlp/infer", body, headers))
    assert response.status == 400 and "more bytes than its inputs claim" in error_of(response)
    assert peak < 8 << 20, f"peak {peak >> 20} MiB"


def test_gzip_binary_request_streams_into_its_tensor(service, module):
    x = rand(3, 4, seed=9)
    body, headers = infer_binary(x)
    response = call(
        service, "POST", "/v2/models/mlp/infer", gzip.compress(body), {**headers, "content-encoding": "gzip"}
    )
    assert response.status == 200
    n = int(response.headers["inference-header-content-length"])
    np.testing.assert_array_equal(np.frombuffer(response.body[n:], np.float32).reshape(3, 8), module.run([x])[0])


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (gzip.compress(infer_json(rand(1, 4)))[:-12], "ends early"),
        (gzip.compress(infer_json(rand(1, 4))) + b"junk", "after the end of its gzip stream"),
        (gzip.compress(b'{"inputs": [1]'), "not valid JSON"),
    ],
)
def test_damaged_gzip_bodies_are_400(service, body, words):
    response = call(service, "POST", "/v2/models/mlp/infer", body, {"content-encoding": "gzip"})
    assert response.status == 400 and words in error_of(response)


def test_a_json_request_past_its_parse_budget_is_413_before_parsing(module):
    service = InferenceService({"mlp": served_model("mlp", module, 1)}, max_json_cost=1 << 20)
    body = json.dumps({"inputs": [{**X_OK, "shape": [50_000, 4], "data": [0.5] * 200_000}]}).encode()
    response, peak = traced_peak(lambda: call(service, "POST", "/v2/models/mlp/infer", body))
    assert response.status == 413 and "binary tensor extension" in error_of(response)
    assert peak < len(body) + (1 << 20)


async def trickle(parts, pause_s=0.0):
    """Test double of a client's body on the wire: ``parts`` with a pause before each."""
    for part in parts:
        await asyncio.sleep(pause_s)
        yield part


def test_read_body_times_out_a_stalled_body_and_bounds_its_size():
    from runtime_lite.serving.service import read_body

    assert asyncio.run(read_body(trickle([b"ab", b"cd"]), "4", 100, 5.0)) == b"abcd"
    with pytest.raises(ProtocolError) as slow:
        asyncio.run(read_body(trickle([b"ab"] * 100, pause_s=0.05), "200", 1000, 0.3))
    assert slow.value.status == 408 and "did not arrive within 0.3 s" in str(slow.value)
    with pytest.raises(ProtocolError) as big:
        asyncio.run(read_body(trickle([b"x" * 60] * 3), None, 100, 5.0))
    assert big.value.status == 413

    async def never_read():
        raise AssertionError("a body declared over the cap must not be read")
        yield b""  # pragma: no cover

    with pytest.raises(ProtocolError) as declared:
        asyncio.run(read_body(never_read(), str(10**12), 100, 5.0))
    assert declared.value.status == 413 and "Content-Length" in str(declared.value)


def test_end_descendants_finds_and_ends_orphans_a_child_left_behind(tmp_path):
    """What Ray's raylet leaves when it dies first (its agents): orphans, adopted by the subreaper and ended."""
    import subprocess
    import sys

    script = tmp_path / "orphans.py"
    script.write_text(
        "import subprocess, time\n"
        "from runtime_lite.serving import processes\n"
        "assert processes.adopt_orphans()\n"
        "subprocess.run(['sh', '-c', 'sleep 300 & sleep 300 & exit 0'], check=True)\n"  # the parent exits at once
        "time.sleep(0.3)\n"
        "left = [processes.command_name(p) for p in processes.descendants()]\n"
        "assert left == ['sleep', 'sleep'], left\n"
        "assert sorted(processes.end_descendants(grace_s=2.0)) == ['sleep', 'sleep']\n"
        "assert processes.descendants() == []\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "ok", result.stderr


# --- the bundle's batch bounds, runs a request makes impossible, non-finite JSON, serve's options ---


def bounded_mlp(bounds: str) -> runtime_lite.Module:
    """The MLP with bounds on its batch dim, declared at build as ``aot-build --input x:1..4x4`` declares them."""
    from aot.compiler import parse_input_shapes

    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    model = make_model(nodes, {"x": rand(1, 4)}, ["y"], {"w": rand(4, 8, seed=1)}, input_shapes={"x": ["N", 4]})
    shapes = parse_input_shapes([f"x:{bounds}x4"])
    return runtime_lite.load(aot.build(model, input_shapes=shapes, log=None).to_bytes())


def test_batching_never_exceeds_the_bundles_declared_maximum():
    """N in 1..4 served with --max-batch-size 8: batches of 8 rows were refused whole, each request a 400."""
    from runtime_lite.errors import InputError

    module = bounded_mlp("1..4")
    model = served_model("b4", module, max_batch_size=8)
    parameters = model.metadata()["parameters"]
    assert model.max_batch_size == 4 and parameters["max_batch_size"] == 4 and parameters["dynamic_batching"]
    assert "'N' in 1..4 caps --max-batch-size 8" in parameters["batching"]
    sizes = []

    def run(arrays):
        sizes.append(len(arrays[0]))
        return module.run(arrays)

    requests = [[rand(1, 4, seed=k)] for k in range(4)] + [[rand(5, 4, seed=9)]]
    results = run_batched(run, requests, model.axis.fits)
    assert sizes == [4, 5]  # the four rows merged; the request over the bound alone, refused as its own
    for (x,), result in zip(requests, results[:4]):
        np.testing.assert_allclose(result[0], module.run([x])[0], rtol=1e-6, atol=1e-7)
    assert isinstance(results[4], InputError) and "above its maximum 4" in str(results[4])


def test_requests_below_the_bundles_minimum_are_never_merged_into_a_batch_it_accepts():
    """N in 2..8: two 1-row requests would make a valid batch, but each alone is refused, so each is refused."""
    from runtime_lite.errors import InputError

    module = bounded_mlp("2..8")
    model = served_model("m", module, max_batch_size=8)
    assert model.batching and model.max_batch_size == 8
    requests = [[rand(1, 4, seed=1)], [rand(1, 4, seed=2)], [rand(2, 4, seed=3)], [rand(2, 4, seed=4)]]
    results = run_batched(module.run, requests, model.axis.fits)
    assert all(isinstance(r, InputError) and "below its minimum 2" in str(r) for r in results[:2]), results[:2]
    for (x,), result in zip(requests[2:], results[2:]):
        np.testing.assert_allclose(result[0], module.run([x])[0], rtol=1e-6, atol=1e-7)
    # N in 3..4: no two requests the bundle accepts fit in 4 rows, so batching is off and says why
    off = served_model("m", bounded_mlp("3..4"), max_batch_size=8)
    assert not off.batching and off.metadata()["parameters"]["max_batch_size"] == 0
    assert "no room for two requests" in off.batching_note()


def test_a_merged_run_that_fails_is_run_again_request_by_request():
    """A merged batch over the run's budget, or one request's values the model refuses, fails no neighbour."""

    def run(arrays):
        x = arrays[0]
        if np.isnan(x).any():
            raise ValueError("a row the model refuses")
        if len(x) > 2:
            raise MemoryError("over the run's budget")
        return [x * 2]

    requests = [[rand(1, 4, seed=1)], [np.full((1, 4), np.nan, np.float32)], [rand(1, 4, seed=3)]]
    results = run_batched(run, requests)
    assert isinstance(results[1], ValueError)
    np.testing.assert_array_equal(results[0][0], requests[0][0] * 2)
    np.testing.assert_array_equal(results[2][0], requests[2][0] * 2)


@pytest.fixture(scope="module")
def pool_bundle() -> bytes:
    """A 2x2 max pool over images of any height and width: the client picks a geometry the kernel may refuse."""
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])]
    model = make_model(nodes, {"x": rand(1, 1, 4, 4)}, ["y"], input_shapes={"x": ["N", 1, "h", "w"]})
    return aot.build(model, log=None).to_bytes()


def test_a_run_the_request_makes_impossible_is_400_not_500(pool_bundle):
    """A 1x1 image under a 2x2 window, and an image whose run passes the memory budget: the client's to change."""
    module = runtime_lite.load(pool_bundle, max_memory=1 << 20)
    service = InferenceService({"pool": served_model("pool", module, 1)})
    for shape, words in (
        ((1, 1, 1, 1), "ValueError: pool: dim 2 (spatial axis 0): a window spans 2"),
        ((1, 1, 600, 600), "BudgetExceeded"),
    ):
        body, headers = infer_binary(rand(*shape))
        response = call(service, "POST", "/v2/models/pool/infer", body, headers)
        assert response.status == 400, response.body
        assert "model 'pool' cannot run on this input" in error_of(response) and words in error_of(response)
    assert call(service, "POST", "/v2/models/pool/infer", *infer_binary(rand(1, 1, 4, 4))).status == 200


def test_a_run_failing_for_the_servers_own_reasons_stays_500(pool_bundle):
    from runtime_lite.errors import BundleError, ExecutionError
    from runtime_lite.execution.limits import BudgetExceeded
    from runtime_lite.serving.service import refused_for_the_request

    def failure(cause: BaseException, nesting: int = 1) -> ExecutionError:
        error: BaseException = cause
        for k in range(nesting):
            wrapper = ExecutionError(f"instruction {k} failed")
            wrapper.__cause__ = error
            error = wrapper
        return error

    assert refused_for_the_request(failure(ValueError("window"), nesting=2))  # a backend's plan inside the host's
    assert refused_for_the_request(failure(BudgetExceeded("over max_memory")))
    for cause in (MemoryError(), TimeoutError("max_run_seconds"), BundleError("field"), RuntimeError("kernel")):
        assert not refused_for_the_request(failure(cause)), cause
    assert not refused_for_the_request(ExecutionError("no cause"))

    async def broken(arrays):
        raise failure(MemoryError("the machine is out of memory"))

    module = runtime_lite.load(pool_bundle)
    service = InferenceService({"pool": served_model("pool", module, 1, infer=broken)})
    response = call(service, "POST", "/v2/models/pool/infer", *infer_binary(rand(1, 1, 4, 4)))
    assert response.status == 500 and "model 'pool' failed" in error_of(response)


@pytest.fixture(scope="module")
def log_module() -> runtime_lite.Module:
    model = make_model([helper.make_node("Log", ["x"], ["y"])], {"x": rand(1, 3)}, ["y"], input_shapes={"x": ["N", 3]})
    return runtime_lite.load(aot.build(model, log=None).to_bytes())


def strict_json(body: bytes) -> dict:
    """JSON as RFC 8259 has it (JavaScript's JSON.parse, Go): no NaN or Infinity tokens."""

    def refuse(token: str) -> None:
        raise ValueError(f"{token} is not JSON")

    return json.loads(body, parse_constant=refuse)


def test_non_finite_outputs_are_valid_json_that_tritonclient_reads_back(log_module):
    tritonclient_http = pytest.importorskip("tritonclient.http")
    service = InferenceService({"logm": served_model("logm", log_module, 1)})
    x = np.array([[-1.0, 0.0, 1.0]], np.float32)
    response = call(service, "POST", "/v2/models/logm/infer", infer_json(x))
    assert response.status == 200
    assert strict_json(response.body)["outputs"][0]["data"] == ["NaN", "-Infinity", 0.0]
    result = tritonclient_http.InferResult.from_response_body(response.body)
    np.testing.assert_array_equal(result.as_numpy("y"), log_module.run([x])[0])  # NaN where NaN, -inf where -inf


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ('["NaN", "Infinity", 1]', [np.nan, np.inf, 0.0]),  # what responses write, sent back
        ("[NaN, Infinity, 1]", [np.nan, np.inf, 0.0]),  # the tokens Python's json and Triton write
        ('["nan", 1, 2]', "data holds 'nan', not FP32 values (non-finite values are spelled NaN"),
        ('["1.5", 1, 2]', "data holds '1.5', not FP32"),
    ],
)
def test_non_finite_inputs_are_read_in_both_spellings(log_module, data, expected):
    service = InferenceService({"logm": served_model("logm", log_module, 1)})
    body = b'{"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": ' + data.encode() + b"}]}"
    response = call(service, "POST", "/v2/models/logm/infer", body)
    if isinstance(expected, str):
        assert response.status == 400 and expected in error_of(response)
        return
    assert response.status == 200, response.body
    values = [float(v) for v in strict_json(response.body)["outputs"][0]["data"]]
    np.testing.assert_array_equal(values, expected)


def test_an_empty_outputs_list_asks_for_every_output(service, module):
    """As in Triton, and as over gRPC here: ``"outputs": []`` is every output, not none."""
    x = rand(2, 4, seed=11)
    answer = json.loads(call(service, "POST", "/v2/models/mlp/infer", infer_json(x, outputs=[])).body)
    assert [o["name"] for o in answer["outputs"]] == ["y"]
    np.testing.assert_array_equal(np.array(answer["outputs"][0]["data"], np.float32).reshape(2, 8), module.run([x])[0])
    body, headers = infer_binary(x, outputs=[])
    response = call(service, "POST", "/v2/models/mlp/infer", body, headers)
    n = int(response.headers["inference-header-content-length"])
    assert json.loads(response.body[:n])["outputs"][0]["parameters"]["binary_data_size"] == 2 * 8 * 4


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("cpus_per_replica", float("nan"), "--cpus-per-replica must be a finite number >= 0, got nan"),
        ("cpus_per_replica", -1.0, "--cpus-per-replica must be a finite number >= 0"),
        ("batch_wait_ms", -1.0, "--batch-wait-ms must be a finite number >= 0"),
        ("batch_wait_ms", float("nan"), "--batch-wait-ms must be a finite number >= 0, got nan"),
        ("batch_wait_ms", float("inf"), "--batch-wait-ms must be a finite number"),
        ("port", 70000, "--port 70000 is not a TCP port"),
        ("grpc_port", 70000, "--grpc-port 70000 is not a TCP port"),
        ("grpc_port", 8000, "is the HTTP port too"),
        ("metrics_port", 0, "--metrics-port 0 is not a TCP port"),
        ("replicas", 0, "--replicas must be a whole number >= 1"),
        ("host", "999.1.1.1", "--host '999.1.1.1' is not an address this machine can listen on"),
        ("host", "192.0.2.1", "--host '192.0.2.1' is not an address this machine can listen on"),  # TEST-NET
    ],
)
def test_serve_options_are_checked_in_one_line_before_anything_starts(option, value, words):
    from runtime_lite.errors import RuntimeLiteError
    from runtime_lite.serving.server import ServeConfig, check_config

    config = ServeConfig(models=[], **{option: value})
    with pytest.raises(RuntimeLiteError) as refused:
        check_config(config)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_serve_command_refuses_a_bad_option_in_one_line(capsys, monkeypatch, tmp_path, pool_bundle):
    """Through the CLI, with a bundle that loads: exit status 1 and one line on stderr, before Ray is even
    imported (a traceback from Ray, or HAProxy's sixty lines of alerts, before)."""
    from runtime_lite.serving import server
    from runtime_lite.tools.cli import main

    def no_ray() -> None:
        raise AssertionError("Ray was reached with an option serve cannot start with")

    monkeypatch.setattr(server, "_import_ray", no_ray)
    bundle = tmp_path / "pool.aotb"
    bundle.write_bytes(pool_bundle)
    for flags in (
        ["--cpus-per-replica", "nan"],
        ["--batch-wait-ms", "nan"],
        ["--port", "70000"],
        ["--host", "999.1.1.1"],
    ):
        assert main(["serve", str(bundle), *flags]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err


def test_a_start_that_fails_before_ray_leaves_no_haproxy_wrapper(monkeypatch):
    """``stop`` removes the wrapper ``start`` wrote before ray.init, also when Ray never came up."""
    import os
    from pathlib import Path

    from runtime_lite.serving import server

    class RayNeverStarted:
        @staticmethod
        def is_initialized() -> bool:
            return False

    monkeypatch.setattr(server, "_haproxy_binary", lambda: "/bin/true")
    monkeypatch.setattr(server, "_import_ray", lambda: (RayNeverStarted, None))
    monkeypatch.delenv("RAY_SERVE_HAPROXY_BINARY_PATH", raising=False)
    config = server.ServeConfig(models=[])
    server._harden_haproxy(config)
    wrapper = Path(os.environ["RAY_SERVE_HAPROXY_BINARY_PATH"])
    try:
        assert wrapper.is_file()
        server.stop(config)
        assert not wrapper.parent.exists() and "RAY_SERVE_HAPROXY_BINARY_PATH" not in os.environ
    finally:
        server._unharden_haproxy()


@pytest.mark.parametrize("given", ["a?b=m.aotb", "a b=m.aotb", ".hidden=m.aotb", "x/y=m.aotb", "%41=m.aotb"])
def test_a_model_name_a_url_cannot_carry_is_refused_in_one_line(given):
    from runtime_lite.errors import RuntimeLiteError
    from runtime_lite.serving.server import model_sources

    with pytest.raises(RuntimeLiteError, match=r"cannot be part of a URL path \(/v2/models/NAME/infer\)") as info:
        model_sources([given], None)
    assert "\n" not in str(info.value)
    assert [s.name for s in model_sources(["resnet-50_v1.2=m.aotb", "m.aotb"], None)] == ["resnet-50_v1.2", "m"]
