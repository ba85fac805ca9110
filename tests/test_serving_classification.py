"""Triton's classification extension (``class_count``) as tritonclient asks for it, over HTTP and gRPC.

The requests are tritonclient's own (``InferRequestedOutput(..., class_count=k)``) and the answers
are read back by its ``InferResult``; the expected strings come from the module's own scores.
gRPC goes through the service as the endpoints call it, with tritonclient's message classes
(the server's own cannot share a process with them: both register ``inference.*``).
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from onnx import helper

import aot
import runtime_lite
from runtime_lite.serving.classification import ClassificationError, classify
from runtime_lite.serving.grpc_api.codec import decode_infer_request, encode_infer_response
from runtime_lite.serving.protocol import ProtocolError
from runtime_lite.serving.service import InferenceService, served_model
from tests.helpers import make_model, rand

tritonclient_http = pytest.importorskip("tritonclient.http")
tritonclient_grpc = pytest.importorskip("tritonclient.grpc")


@pytest.fixture(scope="module")
def module() -> runtime_lite.Module:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["scores"]),
        helper.make_node("ArgMax", ["scores"], ["label"], axis=1),
    ]
    model = make_model(nodes, {"x": rand(1, 4)}, ["scores", "label"], {"w": rand(4, 10, seed=3)},
                       input_shapes={"x": ["N", 4]})  # fmt: skip
    return runtime_lite.load(aot.build(model, log=None).to_bytes())


def expected_top(scores: np.ndarray, k: int) -> list[list[bytes]]:
    return [[f"{row[i]:f}:{i}".encode() for i in np.argsort(-row, kind="stable")[:k]] for row in scores]


def grpc_infer(service: InferenceService, request):
    """What GrpcEndpoints._ModelInfer does, answering in tritonclient's ModelInferResponse."""
    model = service.model(request.model_name)
    return asyncio.run(service.infer(
        model,
        lambda specs: decode_infer_request(request, specs, service.max_request_bytes),
        lambda decoded, chosen, outputs: encode_infer_response(
            tritonclient_grpc.service_pb2.ModelInferResponse(), model.name, model.version, decoded,
            model.module.outputs, outputs, chosen),
    ))  # fmt: skip


def http_infer(service: InferenceService, x: np.ndarray, outputs: list) -> tuple[int, bytes]:
    inputs = tritonclient_http.InferInput("x", list(x.shape), "FP32")
    inputs.set_data_from_numpy(x, binary_data=False)
    body = {"inputs": [inputs._get_tensor()], "outputs": [o._get_tensor() for o in outputs]}
    response = asyncio.run(service.handle("POST", "/v2/models/m/infer", {}, json.dumps(body).encode()))
    return response.status, response.body, response.headers


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("max_batch_size", [1, 4])
def test_class_count_over_http_answers_the_top_k_as_triton_does(module, binary, max_batch_size):
    service = InferenceService({"m": served_model("m", module, max_batch_size=max_batch_size)})
    x = rand(2, 4, seed=5)
    requested = [tritonclient_http.InferRequestedOutput("scores", binary_data=binary, class_count=3)]
    status, body, headers = http_infer(service, x, requested)
    assert status == 200, body
    length = headers.get("inference-header-content-length")
    result = tritonclient_http.InferResult.from_response_body(
        body, header_length=None if length is None else int(length)
    )
    # tritonclient reads JSON strings as str and binary ones as bytes, as it does from Triton
    top = np.vectorize(lambda v: v if isinstance(v, bytes) else v.encode(), otypes=[object])(result.as_numpy("scores"))
    scores = module.run([x])[0]
    if max_batch_size > 1:  # a batching model ranks each row: [batch, k]
        assert top.shape == (2, 3)
        assert top.tolist() == expected_top(scores, 3)
    else:  # a model served without batching ranks the whole tensor: [k], as Triton does for max_batch_size 0
        assert top.shape == (3,)
        assert top.tolist() == expected_top(scores.reshape(1, -1), 3)[0]
    assert result.get_output("scores")["datatype"] == "BYTES"


def test_class_count_over_grpc_answers_the_top_k_and_other_outputs_stay_raw(module):
    service = InferenceService({"m": served_model("m", module, max_batch_size=4)})
    x = rand(3, 4, seed=6)
    request = tritonclient_grpc.service_pb2.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=[3, 4])
    request.raw_input_contents.append(x.tobytes())
    request.outputs.extend([tritonclient_grpc.InferRequestedOutput("scores", class_count=20)._get_tensor(),
                            tritonclient_grpc.InferRequestedOutput("label")._get_tensor()])  # fmt: skip
    response = grpc_infer(service, request)
    result = tritonclient_grpc.InferResult(response)
    scores, label = module.run([x])
    top = result.as_numpy("scores")
    assert top.shape == (3, 10)  # 20 asked, 10 classes: clamped, as Triton does
    assert top.tolist() == expected_top(scores, 10)
    assert [int(row[0].split(b":")[1]) for row in top] == label.ravel().tolist()
    np.testing.assert_array_equal(result.as_numpy("label"), label)


def test_the_server_says_it_speaks_the_extension(module):
    service = InferenceService({"m": served_model("m", module, max_batch_size=1)})
    metadata = json.loads(asyncio.run(service.handle("GET", "/v2", {}, b"")).body)
    assert "classification" in metadata["extensions"]


@pytest.mark.parametrize("count", [0, -2, 1.5, True, "3", None])
def test_a_class_count_that_is_not_a_positive_integer_is_400(module, count):
    service = InferenceService({"m": served_model("m", module, max_batch_size=1)})
    x = rand(1, 4)
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": x.ravel().tolist()}],
            "outputs": [{"name": "scores", "parameters": {"classification": count}}]}  # fmt: skip
    response = asyncio.run(service.handle("POST", "/v2/models/m/infer", {}, json.dumps(body).encode()))
    assert response.status == 400
    message = json.loads(response.body)["error"]
    assert "output 'scores': classification must be a positive integer" in message and "\n" not in message


def test_a_grpc_class_count_of_the_wrong_kind_is_refused(module):
    service = InferenceService({"m": served_model("m", module, max_batch_size=1)})
    request = tritonclient_grpc.service_pb2.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(rand(1, 4).tobytes())
    request.outputs.add(name="scores").parameters["classification"].string_param = "3"
    with pytest.raises(ProtocolError, match="classification must be a positive integer, got '3'") as refused:
        grpc_infer(service, request)
    assert refused.value.status == 400


def test_ranking_keeps_the_lower_index_first_among_equals_nan_last_and_integers_exact():
    scores = np.array([[1.0, np.nan, 3.0, 3.0]], np.float32)
    assert classify(scores, 4, True, "s").tolist() == [[b"3.000000:2", b"3.000000:3", b"1.000000:0", b"nan:1"]]
    counts = np.array([[5, -7, 9]], np.int64)
    assert classify(counts, 2, True, "c").tolist() == [[b"9:2", b"5:0"]]
    assert classify(np.float32(2.5), 3, False, "scalar").tolist() == [b"2.500000:0"]
    with pytest.raises(ClassificationError, match="output 'mask' is bool: classification needs numeric scores"):
        classify(np.array([True]), 1, False, "mask")
