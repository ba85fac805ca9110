"""The Open Inference Protocol (v2, KServe/Triton) over HTTP: requests in, responses out.

Only the codec lives here — bytes and JSON to numpy arrays and back — so it runs
and is tested without Ray. Tensors come as JSON ``data`` lists or in the binary
tensor data extension (the body is a JSON header of ``Inference-Header-Content-Length``
bytes followed by raw tensors), which ``tritonclient.http`` uses by default.
Every malformed request becomes a ``ProtocolError`` carrying the HTTP status and
one line naming what was wrong, because a client cannot act on a traceback.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime_lite.errors import one_line
from runtime_lite.format.signature import TensorSpec

#: v2 datatype names and numpy's. BYTES (strings) and BF16 have no runtime_lite dtype.
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}
_NAMES = {dtype: name for name, dtype in DATATYPES.items()}

#: Decompressed request bodies beyond this are refused (a gzip bomb must not fill memory).
DEFAULT_MAX_REQUEST_BYTES = 256 << 20
HEADER_LENGTH = "inference-header-content-length"


class ProtocolError(Exception):
    """A request the server refuses: ``status`` is the HTTP status, the message one line."""

    def __init__(self, status: int, message: str):
        super().__init__(one_line(message))
        self.status = status


def datatype_of(dtype: np.dtype) -> str:
    return _NAMES[np.dtype(dtype)]


def tensor_metadata(spec: TensorSpec) -> dict[str, Any]:
    """A v2 ``$metadata_tensor``: symbolic dims are -1, as Triton writes them."""
    return {
        "name": spec.name,
        "datatype": datatype_of(spec.dtype),
        "shape": [d if isinstance(d, int) else -1 for d in spec.shape],
    }


@dataclass
class InferRequest:
    """A decoded infer request: inputs by name, and how each output should come back."""

    id: str | None
    inputs: dict[str, np.ndarray]
    outputs: list[str] | None  # None: every output
    binary_outputs: set[str] = field(default_factory=set)


def decode_body(body: bytes, content_encoding: str | None, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> bytes:
    """The request body, decompressed (tritonclient's ``request_compression_algorithm``)."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        data = body
    elif encoding in ("gzip", "deflate"):
        wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
        inflater = zlib.decompressobj(wbits)
        try:
            data = inflater.decompress(body, max_bytes + 1)
        except zlib.error as e:
            raise ProtocolError(400, f"request body is not valid {encoding} data ({e})") from None
    else:
        raise ProtocolError(415, f"Content-Encoding {content_encoding!r} is not supported (use gzip or deflate)")
    if len(data) > max_bytes:
        raise ProtocolError(413, f"request body is over {max_bytes} bytes")
    return data


def decode_infer_request(
    body: bytes, header_length: str | None, specs: Sequence[TensorSpec], max_bytes: int = DEFAULT_MAX_REQUEST_BYTES
) -> InferRequest:
    """Parse an infer request against the model's inputs; raise ProtocolError(400) naming the problem."""
    if header_length is None:
        json_part, binary = body, b""
    else:
        try:
            n = int(header_length)
        except ValueError:
            n = -1
        if not 0 <= n <= len(body):
            raise ProtocolError(
                400,
                f"Inference-Header-Content-Length {header_length!r} is not a length inside the {len(body)}-byte body",
            )
        json_part, binary = body[:n], memoryview(body)[n:]
    try:
        request = json.loads(json_part)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(400, f"request is not valid JSON ({e})") from None
    if not isinstance(request, dict):
        raise ProtocolError(400, "request must be a JSON object with an 'inputs' list")
    raw_inputs = request.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise ProtocolError(400, "request needs a non-empty 'inputs' list")
    by_name = {spec.name: spec for spec in specs}
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for i, raw in enumerate(raw_inputs):
        array, used = _decode_input(raw, i, by_name, binary, offset)
        offset += used
        if raw["name"] in inputs:
            raise ProtocolError(400, f"input '{raw['name']}' is given twice")
        inputs[raw["name"]] = array
    if offset != len(binary):
        raise ProtocolError(400, f"binary section has {len(binary) - offset} bytes no input claims")
    missing = [spec.name for spec in specs if spec.name not in inputs]
    if missing:
        raise ProtocolError(400, f"missing input '{missing[0]}'; the model takes {_describe(specs)}")
    request_id = request.get("id")
    return InferRequest(
        id=str(request_id) if request_id is not None else None,
        inputs=inputs,
        **_decode_outputs(request),
    )


def _describe(specs: Sequence[TensorSpec]) -> str:
    return ", ".join(f"{s.name} {datatype_of(s.dtype)}{list(tensor_metadata(s)['shape'])}" for s in specs)


def _decode_input(
    raw: Any, i: int, by_name: Mapping[str, TensorSpec], binary: memoryview | bytes, offset: int
) -> tuple[np.ndarray, int]:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise ProtocolError(400, f"inputs[{i}] must be an object with a 'name'")
    name = raw["name"]
    spec = by_name.get(name)
    if spec is None:
        raise ProtocolError(400, f"unknown input '{name}'; the model takes {_describe(list(by_name.values()))}")
    datatype = raw.get("datatype")
    if datatype not in DATATYPES:
        raise ProtocolError(400, f"input '{name}': datatype {datatype!r} is not one this server reads")
    dtype = DATATYPES[datatype]
    if dtype != spec.dtype:
        raise ProtocolError(400, f"input '{name}': datatype {datatype} but the model takes {datatype_of(spec.dtype)}")
    shape = raw.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ProtocolError(400, f"input '{name}': shape must be a list of non-negative integers, got {shape!r}")
    count = math.prod(shape)
    parameters = raw.get("parameters", {})
    if not isinstance(parameters, dict):
        raise ProtocolError(400, f"input '{name}': parameters must be an object")
    size = parameters.get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(binary):
            raise ProtocolError(
                400, f"input '{name}': binary_data_size {size!r} runs past the binary section ({len(binary)} bytes)"
            )
        if size != count * dtype.itemsize:
            raise ProtocolError(
                400,
                f"input '{name}': {size} binary bytes for shape {shape} of {datatype} (needs {count * dtype.itemsize})",
            )
        array = np.frombuffer(binary[offset : offset + size], dtype=dtype).reshape(shape)
        return array, size
    if "data" not in raw:
        raise ProtocolError(400, f"input '{name}' has neither 'data' nor parameters.binary_data_size")
    try:
        array = np.asarray(raw["data"], dtype=dtype)
    except (TypeError, ValueError, OverflowError) as e:
        raise ProtocolError(400, f"input '{name}': data is not {datatype} values ({e})") from None
    if array.size != count:
        raise ProtocolError(400, f"input '{name}': {array.size} values for shape {shape} (needs {count})")
    return array.reshape(shape), 0


def _decode_outputs(request: dict[str, Any]) -> dict[str, Any]:
    parameters = request.get("parameters", {})
    if not isinstance(parameters, dict):
        raise ProtocolError(400, "request parameters must be an object")
    binary_default = parameters.get("binary_data_output") is True
    raw_outputs = request.get("outputs")
    if raw_outputs is None:
        return {"outputs": None, "binary_outputs": {"*"} if binary_default else set()}
    if not isinstance(raw_outputs, list):
        raise ProtocolError(400, "request 'outputs' must be a list")
    names, binary = [], set()
    for i, raw in enumerate(raw_outputs):
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise ProtocolError(400, f"outputs[{i}] must be an object with a 'name'")
        names.append(raw["name"])
        own_parameters = raw.get("parameters", {})
        if not isinstance(own_parameters, dict):
            raise ProtocolError(400, f"outputs[{i}].parameters must be an object")
        own = own_parameters.get("binary_data", binary_default)
        if own is True:
            binary.add(raw["name"])
    return {"outputs": names, "binary_outputs": binary}


def select_outputs(request: InferRequest, specs: Sequence[TensorSpec]) -> list[int]:
    """Indices of the outputs the request asked for, in its order; ProtocolError(400) for an unknown name."""
    if request.outputs is None:
        return list(range(len(specs)))
    index = {spec.name: i for i, spec in enumerate(specs)}
    chosen = []
    for name in request.outputs:
        if name not in index:
            raise ProtocolError(400, f"unknown output '{name}'; the model gives {_describe(specs)}")
        chosen.append(index[name])
    return chosen


def encode_infer_response(
    model_name: str,
    model_version: str,
    request: InferRequest,
    specs: Sequence[TensorSpec],
    arrays: Sequence[np.ndarray],
    chosen: Sequence[int],
) -> tuple[bytes, dict[str, str]]:
    """The response body and its headers (binary outputs after a JSON header, as the extension says)."""
    outputs, blobs = [], []
    for i in chosen:
        spec, array = specs[i], np.ascontiguousarray(arrays[i])
        record: dict[str, Any] = {"name": spec.name, "datatype": datatype_of(array.dtype), "shape": list(array.shape)}
        if "*" in request.binary_outputs or spec.name in request.binary_outputs:
            data = array.tobytes()
            record["parameters"] = {"binary_data_size": len(data)}
            blobs.append(data)
        else:
            record["data"] = array.ravel().tolist()
        outputs.append(record)
    response: dict[str, Any] = {"model_name": model_name, "model_version": model_version, "outputs": outputs}
    if request.id is not None:
        response["id"] = request.id
    header = json.dumps(response, separators=(",", ":")).encode()
    if not blobs:
        return header, {"content-type": "application/json"}
    return b"".join([header, *blobs]), {
        "content-type": "application/octet-stream",
        "inference-header-content-length": str(len(header)),
    }


def error_body(message: str) -> bytes:
    return json.dumps({"error": one_line(message)}).encode()


__all__ = [
    "DATATYPES",
    "DEFAULT_MAX_REQUEST_BYTES",
    "HEADER_LENGTH",
    "InferRequest",
    "ProtocolError",
    "datatype_of",
    "decode_body",
    "decode_infer_request",
    "encode_infer_response",
    "error_body",
    "select_outputs",
    "tensor_metadata",
]
