"""The gRPC codec without a server: Triton's own message classes in, tritonclient's InferResult reading what comes out.

The codec reads and fills messages by field name, so tritonclient.grpc's generated classes
(Triton's grpc_service.proto) stand for what a client sends: were a field number or name of
ours different, the end-to-end tests in test_serving_ray.py would fail; here each refusal is
checked for its status and line, in milliseconds.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from tritonclient.grpc import InferResult, service_pb2

from runtime_lite.format.signature import TensorSpec
from runtime_lite.serving.grpc_api import STATUS_CODES
from runtime_lite.serving.grpc_api.codec import CONTENTS_FIELDS, decode_infer_request, encode_infer_response
from runtime_lite.serving.protocol import DATATYPES, ProtocolError

SPECS = (TensorSpec("x", ("N", 4), np.dtype(np.float32)), TensorSpec("k", ("N",), np.dtype(np.int8)))
X = np.arange(8, dtype=np.float32).reshape(2, 4)
K = np.array([-3, 7], np.int8)


def raw_request(**tensors: np.ndarray) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="m", id="req-1")
    for name, array in tensors.items():
        datatype = {np.float32: "FP32", np.int8: "INT8", np.float64: "FP64"}[array.dtype.type]
        request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        request.raw_input_contents.append(array.tobytes())
    return request


def refusal(request, max_bytes: int = 1 << 20) -> ProtocolError:
    with pytest.raises(ProtocolError) as refused:
        decode_infer_request(request, SPECS, max_bytes)
    assert "\n" not in str(refused.value)
    return refused.value


def test_raw_inputs_decode_to_the_arrays_sent():
    decoded = decode_infer_request(raw_request(x=X, k=K), SPECS, 1 << 20)
    np.testing.assert_array_equal(decoded.inputs["x"], X)
    np.testing.assert_array_equal(decoded.inputs["k"], K)
    assert (decoded.id, decoded.outputs) == ("req-1", None)


def test_typed_contents_decode_exactly_and_refuse_what_a_cast_would_change():
    request = service_pb2.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=[2, 4]).contents.fp32_contents.extend(X.ravel().tolist())
    k = request.inputs.add(name="k", datatype="INT8", shape=[2])
    k.contents.int_contents.extend(K.tolist())
    decoded = decode_infer_request(request, SPECS, 1 << 20)
    np.testing.assert_array_equal(decoded.inputs["x"], X)
    assert decoded.inputs["k"].dtype == np.int8 and decoded.inputs["k"].tolist() == K.tolist()
    k.contents.int_contents[0] = 300
    assert "input 'k': data holds values INT8 cannot represent exactly" in str(refusal(request))
    k.contents.int_contents[0] = 1
    k.contents.int_contents.append(2)
    assert "input 'k': 3 values in contents.int_contents for shape [2] (needs 2)" in str(refusal(request))


@pytest.mark.parametrize(
    "spoil, status, line",
    [
        (lambda r: r.raw_input_contents.pop(), 400, "raw_input_contents holds 1 tensors for 2 inputs"),
        (lambda r: r.inputs[0].contents.fp32_contents.append(1.0), 400, "input 'x' has contents, but the request"),
        (lambda r: r.inputs[0].shape.pop(), 400, "input 'x': shape [2] has 1 dims; the model takes 2"),
        (lambda r: r.inputs[0].shape.__setitem__(0, 3), 400, "input 'x': 32 raw_input_contents bytes for shape [3, 4]"),
        (lambda r: r.inputs[0].shape.__setitem__(0, -1), 400, "input 'x': shape must be a list of non-negative"),
        (lambda r: r.inputs[0].shape.__setitem__(0, 2**40), 400, "is over the 1048576-byte limit"),
        (lambda r: setattr(r.inputs[1], "datatype", "FP16"), 400, "input 'k': datatype FP16 but the model takes INT8"),
        (lambda r: setattr(r.inputs[1], "datatype", "BYTES"), 400, "datatype 'BYTES' is not one this server reads"),
        (lambda r: setattr(r.inputs[1], "name", "x"), 400, "input 'x': datatype INT8 but the model takes FP32"),
        (lambda r: setattr(r.inputs[1], "name", "q"), 400, "unknown input 'q'; the model takes x FP32[-1, 4]"),
        (lambda r: r.inputs[0].parameters["shared_memory_region"].string_param, 400, "shared-memory inputs"),
        (lambda r: (r.inputs.pop(), r.raw_input_contents.pop()), 400, "missing input 'k'"),
        (lambda r: r.raw_input_contents.append(bytes(1 << 20)), 413, "request tensors are over 1048576 bytes"),
    ],
    ids=lambda v: v if isinstance(v, (int, str)) else "",
)
def test_refusals_name_the_problem_with_the_rest_paths_status(spoil, status, line):
    request = raw_request(x=X, k=K)
    spoil(request)
    refused = refusal(request)
    assert refused.status == status and line in str(refused), str(refused)


def test_fp16_has_no_typed_contents_and_an_input_twice_is_refused():
    specs = (TensorSpec("h", ("N",), np.dtype(np.float16)),)
    request = service_pb2.ModelInferRequest()
    request.inputs.add(name="h", datatype="FP16", shape=[1]).contents.fp32_contents.append(1.0)
    with pytest.raises(ProtocolError, match="FP16 has no typed contents; send it in raw_input_contents"):
        decode_infer_request(request, specs, 1 << 20)
    twice = raw_request(x=X[:1], k=K[:1])
    twice.inputs[1].CopyFrom(twice.inputs[0])
    twice.raw_input_contents[1] = twice.raw_input_contents[0]
    assert "input 'x' is given twice" in str(refusal(twice))


def test_the_response_reads_back_through_tritonclients_infer_result():
    request = raw_request(x=X, k=K)
    request.outputs.add(name="k")
    decoded = decode_infer_request(request, SPECS, 1 << 20)
    assert decoded.outputs == ["k"]
    response = encode_infer_response(
        service_pb2.ModelInferResponse(), "m", "0123456789ab", decoded, SPECS, [X * 2, K], [1, 0]
    )
    result = InferResult(response)
    np.testing.assert_array_equal(result.as_numpy("k"), K)
    np.testing.assert_array_equal(result.as_numpy("x"), X * 2)
    assert [o.name for o in response.outputs] == ["k", "x"] and response.id == "req-1"
    assert result.get_output("x").datatype == "FP32" and list(result.get_output("x").shape) == [2, 4]


def test_a_scalar_output_and_an_empty_batch_keep_their_shapes():
    """A 0-d output (a sum over everything) is answered with shape [], not [1]; an empty batch as sent."""
    specs = (*SPECS, TensorSpec("total", (), np.dtype(np.float32)))
    decoded = decode_infer_request(raw_request(x=X[:0], k=K[:0]), SPECS, 1 << 20)
    assert decoded.inputs["x"].shape == (0, 4) and decoded.inputs["k"].shape == (0,)
    total = np.array(X.sum(), np.float32)
    response = encode_infer_response(
        service_pb2.ModelInferResponse(), "m", "0123456789ab", decoded, specs, [X[:0], K[:0], total], [2, 0]
    )
    result = InferResult(response)
    assert list(result.get_output("total").shape) == [] and result.as_numpy("total").shape == ()
    assert result.as_numpy("total") == total and result.as_numpy("x").shape == (0, 4)


def test_every_refusal_status_has_a_grpc_code_and_every_typed_field_exists():
    assert {getattr(grpc.StatusCode, name) for name in STATUS_CODES.values()}
    statuses = {400, 404, 408, 413, 415, 500, 503}  # every ProtocolError status protocol.py and service.py raise
    assert statuses <= set(STATUS_CODES)
    contents = service_pb2.InferTensorContents()
    for datatype, (field, kept_as) in CONTENTS_FIELDS.items():
        assert datatype in DATATYPES and len(getattr(contents, field)) == 0
        assert np.can_cast(DATATYPES[datatype], kept_as)  # protobuf's field holds every value of the datatype
