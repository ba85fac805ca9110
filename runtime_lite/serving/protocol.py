"""The Open Inference Protocol (v2, KServe/Triton) over HTTP: requests in, responses out.

Only the codec lives here — bytes and JSON to numpy arrays and back — so it runs
and is tested without Ray. Tensors come as JSON ``data`` lists or in the binary
tensor data extension (the body is a JSON header of ``Inference-Header-Content-Length``
bytes followed by raw tensors), which ``tritonclient.http`` uses by default.
Every malformed request becomes a ``ProtocolError`` carrying the HTTP status and
one line naming what was wrong, because a client cannot act on a traceback.
The per-input checks (``check_input``, ``check_byte_size``, ``exact_values``,
``add_input``, ``require_inputs``) are the gRPC codec's too (``grpc_api/codec.py``).
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime_lite.errors import describe, one_line
from runtime_lite.format.signature import TensorSpec
from runtime_lite.serving.classification import PARAMETER as CLASSIFICATION
from runtime_lite.serving.classification import ClassificationError, json_strings, requested_count, serialized

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
#: What parsing a request's JSON may cost in memory, estimated from its bytes before parsing (``json_cost``).
#: Python objects take 10 to 60 times the text they come from, so a 256 MiB body of ``0,0,0,...`` alone would
#: need gigabytes. 256 MiB of estimate holds JSON tensors of about 4 M values; larger tensors travel in the
#: binary tensor extension (tritonclient's default), which costs their size and nothing more.
DEFAULT_MAX_JSON_COST = 256 << 20
HEADER_LENGTH = "inference-header-content-length"
#: Decompressed bytes made per step: a bomb is refused one step past a limit, never after inflating it whole.
_INFLATE_STEP = 1 << 20
#: Compressed bytes handed to zlib per step (zlib copies what it has not consumed yet).
_FEED_STEP = 64 << 10
_ENCODINGS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
#: JSON (RFC 8259) has no token for a non-finite float: a response's ``data`` writes each as the string protobuf's
#: JSON mapping uses, which numpy (tritonclient.http's ``as_numpy``), JavaScript's ``Number()`` and Go's
#: ``strconv.ParseFloat`` read back as the same value. Requests may send these strings, or the bare ``NaN``,
#: ``Infinity`` and ``-Infinity`` tokens that Python's json module (tritonclient.http) and Triton write.
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class ProtocolError(Exception):
    """A request the server refuses: ``status`` is the HTTP status, the message one line."""

    def __init__(self, status: int, message: str):
        super().__init__(one_line(message))
        self.status = status


def datatype_of(dtype: np.dtype) -> str:
    return _NAMES[np.dtype(dtype)]


def config_tensor(spec: TensorSpec, batched: bool) -> dict[str, Any]:
    """A tensor of Triton's model configuration: ``TYPE_`` datatype, dims without the batch dim where batched."""
    dims = [d if isinstance(d, int) else -1 for d in spec.shape]
    return {"name": spec.name, "data_type": "TYPE_" + datatype_of(spec.dtype), "dims": dims[1:] if batched else dims}


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
    #: Outputs asked for as their top k (Triton's classification extension, classification.py): name -> k.
    classifications: dict[str, int] = field(default_factory=dict)


def json_cost(text: bytes | bytearray) -> int:
    """An upper bound on the bytes that ``json.loads(text)``, and the arrays built from its lists, allocate.

    Counted from the bytes alone, before anything is parsed. Per construct, on CPython
    3.11: the ``str`` that ``json.loads`` decodes first and the strings parsed out of
    it (a byte each, 4 bytes a character once one is beyond ASCII); each value after a comma (an 8-byte list slot, a 24-byte float,
    8 + 4 bytes of the arrays numpy makes of it); each list (56 bytes, growing by an
    eighth, and the row numpy makes of it) and dict (up to ~230 bytes for a small one,
    up to ~100 more per key as it grows); each string (~50 bytes besides its
    characters, two quotes). ``tests/test_serving_protocol.py`` checks
    the bound against tracemalloc on the worst texts per construct.
    """
    width = 2 if text.isascii() else 8
    return (
        64
        + width * len(text)
        + 48 * text.count(b",")
        + 128 * text.count(b"[")
        + 256 * text.count(b"{")
        + 32 * text.count(b'"')
        + 96 * text.count(b":")
    )


class RequestBody:
    """A request body read front to back, decompressed step by step and counted against the cap as it goes.

    Nothing is inflated before it is asked for, and each read names its size first, so
    a compression bomb costs at most one step past what the request legitimately
    declares (its JSON, within the JSON budget, and its tensors' declared bytes).
    """

    def __init__(self, body: bytes | bytearray, content_encoding: str | None, max_bytes: int):
        self.encoding = (content_encoding or "identity").strip().lower()
        if self.encoding != "identity" and self.encoding not in _ENCODINGS:
            raise ProtocolError(
                415, f"Content-Encoding {describe(content_encoding)} is not supported (use gzip or deflate)"
            )
        self.raw = memoryview(body)
        self.max_bytes = max_bytes
        self.pos = 0  # into raw: compressed bytes fed to zlib, or identity bytes taken
        self.produced = 0  # decoded bytes handed out
        self._inflater = zlib.decompressobj(_ENCODINGS[self.encoding]) if self.encoding in _ENCODINGS else None
        self._tail = b""
        #: Inflating a gzip member after the first, nothing of it decoded yet.
        self._member_start = False
        if self._inflater is None and len(body) > max_bytes:
            raise ProtocolError(413, f"request body is over {max_bytes} bytes")

    @property
    def compressed(self) -> bool:
        return self._inflater is not None

    def remaining(self) -> int | None:
        """Decoded bytes left, where known without inflating them (an identity body)."""
        return None if self.compressed else len(self.raw) - self.pos

    def _inflate(self, limit: int) -> bytes:
        """Up to ``limit`` more decoded bytes; b"" at the end of the stream."""
        assert self._inflater is not None
        while True:
            if self._tail:
                source: bytes | memoryview = self._tail
            elif self.pos < len(self.raw):
                source = self.raw[self.pos : self.pos + _FEED_STEP]
                self.pos += len(source)
            else:
                if not self._inflater.eof:
                    raise ProtocolError(400, f"request body is not complete {self.encoding} data (it ends early)")
                return b""
            try:
                out = self._inflater.decompress(source, limit)
            except zlib.error as e:
                if self._member_start:  # what follows a complete member is not another one
                    raise ProtocolError(
                        400, f"request body has bytes after the end of its {self.encoding} stream (not a gzip member)"
                    ) from None
                raise ProtocolError(400, f"request body is not valid {self.encoding} data ({e})") from None
            self._member_start = self._member_start and not out
            self._tail = self._inflater.unconsumed_tail
            if self._inflater.eof and (self._inflater.unused_data or self.pos < len(self.raw)):
                if self.encoding != "gzip":
                    raise ProtocolError(400, f"request body has bytes after the end of its {self.encoding} stream")
                # gzip may hold several members, decoded as their concatenation (RFC 1952, section 2.2)
                self._tail = bytes(self._inflater.unused_data)
                self._inflater = zlib.decompressobj(_ENCODINGS["gzip"])
                self._member_start = True
            if out or (self._inflater.eof and not self._tail and self.pos >= len(self.raw)):
                return out

    def _count(self, n: int) -> None:
        if self.produced + n > self.max_bytes:
            raise ProtocolError(413, f"request body is over {self.max_bytes} bytes")
        self.produced += n

    def take(self, n: int, what: str) -> memoryview | bytearray:
        """The next ``n`` decoded bytes (a view of an identity body, no copy); ProtocolError if there are fewer."""
        if not self.compressed:
            if n > len(self.raw) - self.pos:
                raise ProtocolError(400, f"{what} runs past the end of the {len(self.raw)}-byte body")
            self._count(n)
            self.pos += n
            return self.raw[self.pos - n : self.pos]
        self._count(n)
        out = bytearray()
        while len(out) < n:
            chunk = self._inflate(min(_INFLATE_STEP, n - len(out)))
            if not chunk:
                raise ProtocolError(400, f"{what} runs past the end of the decompressed body ({len(out)} bytes left)")
            out += chunk
        return out

    def take_json(self, n: int | None, max_cost: int) -> bytes | bytearray:
        """The JSON part: ``n`` bytes, or the rest of the body; refused once its parse cost passes ``max_cost``."""
        if not self.compressed:
            end = len(self.raw) if n is None else self.pos + n
            if end > len(self.raw):
                raise ProtocolError(
                    400,
                    f"Inference-Header-Content-Length {n} is not a length inside the {len(self.raw)}-byte body",
                )
            text = self.raw[self.pos : end].tobytes() if n is not None else self.raw.obj
            _check_json_cost(json_cost(text), max_cost)
            self._count(end - self.pos)
            self.pos = end
            return text
        out, cost = bytearray(), 0
        while n is None or len(out) < n:
            chunk = self._inflate(_INFLATE_STEP if n is None else min(_INFLATE_STEP, n - len(out)))
            if not chunk:
                if n is not None:
                    raise ProtocolError(
                        400, f"Inference-Header-Content-Length {n} runs past the decompressed body ({len(out)} bytes)"
                    )
                break
            self._count(len(chunk))
            cost += json_cost(chunk)
            _check_json_cost(cost, max_cost)
            out += chunk
        return out

    def finish(self) -> None:
        """The body must end here: bytes no input claims are an error, not something to skip."""
        left = self.remaining()
        if left is None:
            left = len(self._inflate(1))
            if left:
                raise ProtocolError(400, "binary section has more bytes than its inputs claim")
        elif left:
            raise ProtocolError(400, f"binary section has {left} bytes no input claims")


def _check_json_cost(cost: int, max_cost: int) -> None:
    if cost > max_cost:
        raise ProtocolError(
            413,
            f"request JSON would take over {max_cost >> 20} MiB to parse: send large tensors in the binary "
            "tensor extension (binary_data_size), as tritonclient does by default",
        )


def decode_infer_request(
    body: bytes | bytearray,
    header_length: str | None,
    specs: Sequence[TensorSpec],
    max_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    content_encoding: str | None = None,
    max_json_cost: int = DEFAULT_MAX_JSON_COST,
) -> InferRequest:
    """Parse an infer request against the model's inputs; raise ProtocolError (400, 413, 415) naming the problem.

    What the request may make this process allocate is bounded before it is allocated:
    the decompressed bytes by ``max_bytes``, the JSON's parse by ``max_json_cost`` (from
    its bytes), and each tensor by its declared shape and datatype, checked against the
    model's rank and the cap before any of its data is read.
    """
    source = RequestBody(body, content_encoding, max_bytes)
    n: int | None = None
    if header_length is not None:
        try:
            n = int(header_length)
        except ValueError:
            n = -1
        if n < 0:
            raise ProtocolError(
                400, f"Inference-Header-Content-Length {describe(header_length)} is not a length inside the body"
            )
    request = _parse_json(source.take_json(n, max_json_cost))
    raw_inputs = request.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise ProtocolError(400, "request needs a non-empty 'inputs' list")
    by_name = {spec.name: spec for spec in specs}
    inputs: dict[str, np.ndarray] = {}
    for i, raw in enumerate(raw_inputs):
        array = _decode_input(raw, i, by_name, source, max_bytes)
        add_input(inputs, raw["name"], array)
    source.finish()
    require_inputs(inputs, specs)
    request_id = request.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolError(400, f"request 'id' must be a string, got {type(request_id).__name__}")
    return InferRequest(id=request_id, inputs=inputs, **_decode_outputs(request))


def _parse_json(text: bytes | bytearray) -> dict[str, Any]:
    try:
        request = json.loads(text)
    except RecursionError:
        raise ProtocolError(400, "request is not valid JSON (nested too deeply)") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(400, f"request is not valid JSON ({one_line(str(e), 200)})") from None
    if not isinstance(request, dict):
        raise ProtocolError(400, "request must be a JSON object with an 'inputs' list")
    return request


def _describe(specs: Sequence[TensorSpec]) -> str:
    return ", ".join(f"{s.name} {datatype_of(s.dtype)}{list(tensor_metadata(s)['shape'])}" for s in specs)


def _decode_input(
    raw: Any, i: int, by_name: Mapping[str, TensorSpec], source: RequestBody, max_bytes: int
) -> np.ndarray:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise ProtocolError(400, f"inputs[{i}] must be an object with a 'name'")
    name = raw["name"]
    dtype, shape = check_input(name, raw.get("datatype"), raw.get("shape"), by_name, max_bytes)
    parameters = raw.get("parameters", {})
    if not isinstance(parameters, dict):
        raise ProtocolError(400, f"input '{name}': parameters must be an object")
    size = parameters.get("binary_data_size")
    if size is not None:
        left = source.remaining()
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or (left is not None and size > left):
            shown = f"{left} bytes" if left is not None else "decompressed"
            raise ProtocolError(
                400, f"input '{name}': binary_data_size {describe(size)} runs past the binary section ({shown})"
            )
        check_byte_size(name, size, shape, dtype, "binary")
        data = source.take(size, f"input '{name}': binary_data_size {size}")
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    if "data" not in raw:
        raise ProtocolError(400, f"input '{name}' has neither 'data' nor parameters.binary_data_size")
    return exact_values(name, raw["data"], shape, dtype)


def check_input(
    name: Any, datatype: Any, shape: Any, by_name: Mapping[str, TensorSpec], max_bytes: int
) -> tuple[np.dtype, list[int]]:
    """An input's name, datatype and shape checked against the model's, before any of its data is read.

    Shared by both transports (JSON/binary over HTTP, protobuf over gRPC): the dtype the
    data must be read as, and the shape, whose size is already known to be within ``max_bytes``.
    """
    spec = by_name.get(name)
    if spec is None:
        raise ProtocolError(400, f"unknown input {describe(name)}; the model takes {_describe(list(by_name.values()))}")
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise ProtocolError(400, f"input '{name}': datatype {describe(datatype)} is not one this server reads")
    dtype = DATATYPES[datatype]
    if dtype != spec.dtype:
        raise ProtocolError(400, f"input '{name}': datatype {datatype} but the model takes {datatype_of(spec.dtype)}")
    return dtype, _declared_shape(name, shape, spec, dtype, max_bytes)


def check_byte_size(name: str, size: int, shape: list[int], dtype: np.dtype, what: str) -> None:
    """``size`` bytes of ``what`` data must be exactly the declared tensor: no more, no less."""
    needed = math.prod(shape) * dtype.itemsize
    if size != needed:
        raise ProtocolError(
            400, f"input '{name}': {size} {what} bytes for shape {shape} of {datatype_of(dtype)} (needs {needed})"
        )


def add_input(inputs: dict[str, np.ndarray], name: Any, array: np.ndarray) -> None:
    if name in inputs:
        raise ProtocolError(400, f"input '{name}' is given twice")
    inputs[name] = array


def require_inputs(inputs: Mapping[str, np.ndarray], specs: Sequence[TensorSpec]) -> None:
    missing = [spec.name for spec in specs if spec.name not in inputs]
    if missing:
        raise ProtocolError(400, f"missing input '{missing[0]}'; the model takes {_describe(specs)}")


def _declared_shape(name: str, shape: Any, spec: TensorSpec, dtype: np.dtype, max_bytes: int) -> list[int]:
    """The request's shape for an input, refused unless the model's rank and, as bytes, the request cap hold it.

    A zero dim makes a tensor empty, not small: [0, 2**70] still cannot be built, so
    every dim counts at least 1 toward the bound.
    """
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ProtocolError(
            400, f"input '{name}': shape must be a list of non-negative integers, got {describe(shape)}"
        )
    if len(shape) != len(spec.shape):
        raise ProtocolError(
            400,
            f"input '{name}': shape {describe(shape)} has {len(shape)} dims; the model takes {len(spec.shape)} "
            f"({datatype_of(spec.dtype)}{tensor_metadata(spec)['shape']})",
        )
    declared = dtype.itemsize * math.prod(max(d, 1) for d in shape)
    if declared > max_bytes:
        raise ProtocolError(
            400, f"input '{name}': shape {describe(shape)} of {datatype_of(dtype)} is over the {max_bytes}-byte limit"
        )
    return shape


#: The kinds of JSON value (as numpy infers them) each datatype's kind takes: numbers, or true/false.
_ACCEPTED_KINDS = {"f": "biuf", "i": "biuf", "u": "biuf", "b": "biu"}


def exact_values(name: str, data: Any, shape: list[int], dtype: np.dtype) -> np.ndarray:
    """``data`` (JSON values, or a protobuf message's typed contents) as an array of ``dtype`` and ``shape``,
    refusing what a cast would change: null (NaN), 1.5 as INT32, 300 as INT8."""
    count, datatype = math.prod(shape), datatype_of(dtype)
    try:
        values = np.asarray(data)
        if dtype.kind == "f" and values.dtype.kind == "U":
            values = _spelled_non_finite(data)
    except (TypeError, ValueError, OverflowError, RecursionError) as e:
        raise ProtocolError(400, f"input '{name}': data is not {datatype} values ({one_line(str(e), 200)})") from None
    if values.size and values.dtype.kind not in _ACCEPTED_KINDS[dtype.kind]:  # [] is float64 to numpy
        foreign = _first_foreign(values)
        spelled = dtype.kind == "f" and (foreign == "null" or values.dtype.kind == "U" or foreign.startswith("'"))
        hint = " (non-finite values are spelled NaN, Infinity, -Infinity)" if spelled else ""
        raise ProtocolError(400, f"input '{name}': data holds {foreign}, not {datatype} values{hint}")
    if values.size != count:
        raise ProtocolError(400, f"input '{name}': {values.size} values for shape {shape} (needs {count})")
    with np.errstate(all="ignore"):
        converted = values.astype(dtype)
        exact = np.array_equal(converted, values, equal_nan=True) if dtype.kind in "iub" else True
        overflowed = dtype.kind == "f" and bool(np.any(np.isinf(converted) & np.isfinite(values)))
    if not exact or overflowed:
        raise ProtocolError(400, f"input '{name}': data holds values {datatype} cannot represent exactly")
    return converted.reshape(shape)


def _spelled_non_finite(data: Any) -> np.ndarray:
    """Float data with strings among its numbers: ``NON_FINITE`` spellings (what responses write) become numbers;
    any other string leaves the values as objects, for the caller to refuse naming the first."""
    objects = np.asarray(data, dtype=object).ravel()  # the values as sent: numpy made strings of the numbers
    if any(isinstance(v, str) and v not in NON_FINITE for v in objects):
        return objects
    return np.asarray([NON_FINITE.get(v, v) if isinstance(v, str) else v for v in objects])


def _first_foreign(values: np.ndarray) -> str:
    """What a non-numeric array holds, for the message: the first value that is not a number."""
    if values.dtype.kind == "O":
        for value in values.flat:
            if value is None:
                return "null"
            if not isinstance(value, (int, float)):
                return describe(value)
        return "integers too large for any datatype"
    if values.dtype.kind in "US":
        return f"strings ({describe(values.flat[0])})"
    return f"{values.dtype.name} values"


def _decode_outputs(request: dict[str, Any]) -> dict[str, Any]:
    parameters = request.get("parameters", {})
    if not isinstance(parameters, dict):
        raise ProtocolError(400, "request parameters must be an object")
    binary_default = parameters.get("binary_data_output") is True
    raw_outputs = request.get("outputs")
    if raw_outputs is None or raw_outputs == []:  # an empty list asks for every output, as in Triton and over gRPC
        return {"outputs": None, "binary_outputs": {"*"} if binary_default else set()}
    if not isinstance(raw_outputs, list):
        raise ProtocolError(400, "request 'outputs' must be a list")
    names, binary, classifications = [], set(), {}
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
        if CLASSIFICATION in own_parameters:
            classifications[raw["name"]] = classification_count(own_parameters[CLASSIFICATION], raw["name"])
    return {"outputs": names, "binary_outputs": binary, "classifications": classifications}


def classification_count(value: Any, output: str) -> int:
    """The k of a ``classification`` parameter (HTTP's JSON value, gRPC's InferParameter read); 400 otherwise."""
    try:
        return requested_count(value, output)
    except ClassificationError as e:
        raise ProtocolError(400, str(e)) from None


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
        spec, array = specs[i], np.asarray(arrays[i], order="C")  # ascontiguousarray would make a 0-d output 1-d
        record: dict[str, Any] = {"name": spec.name, "datatype": wire_datatype(array), "shape": list(array.shape)}
        if "*" in request.binary_outputs or spec.name in request.binary_outputs:
            data = wire_bytes(array)
            record["parameters"] = {"binary_data_size": len(data)}
            blobs.append(data)
        else:
            record["data"] = json_strings(array) if array.dtype == object else json_values(array)
        outputs.append(record)
    response: dict[str, Any] = {"model_name": model_name, "model_version": model_version, "outputs": outputs}
    if request.id is not None:
        response["id"] = request.id
    header = json.dumps(response, separators=(",", ":"), allow_nan=False).encode()  # always valid JSON
    if not blobs:
        return header, {"content-type": "application/json"}
    return b"".join([header, *blobs]), {
        "content-type": "application/octet-stream",
        "inference-header-content-length": str(len(header)),
    }


def wire_datatype(array: np.ndarray) -> str:
    """An output's datatype on the wire: BYTES for the strings of a classification, else its dtype's name."""
    return "BYTES" if array.dtype == object else datatype_of(array.dtype)


def wire_bytes(array: np.ndarray) -> bytes:
    """An output's binary data: the raw values, or a BYTES tensor's length-prefixed strings."""
    return serialized(array) if array.dtype == object else array.tobytes()


def json_values(array: np.ndarray) -> list[Any]:
    """An output's values for JSON ``data``: numbers, and non-finite floats spelled as ``NON_FINITE`` strings."""
    flat = array.ravel()
    if flat.dtype.kind != "f" or np.isfinite(flat).all():
        return flat.tolist()
    values = flat.astype(object)  # Python floats, as tolist() makes them
    values[np.isnan(flat)] = "NaN"
    values[np.isposinf(flat)] = "Infinity"
    values[np.isneginf(flat)] = "-Infinity"
    return values.tolist()


def error_body(message: str) -> bytes:
    return json.dumps({"error": one_line(message)}).encode()


__all__ = [
    "DATATYPES",
    "DEFAULT_MAX_REQUEST_BYTES",
    "HEADER_LENGTH",
    "InferRequest",
    "ProtocolError",
    "classification_count",
    "config_tensor",
    "datatype_of",
    "DEFAULT_MAX_JSON_COST",
    "RequestBody",
    "add_input",
    "check_byte_size",
    "check_input",
    "exact_values",
    "require_inputs",
    "decode_infer_request",
    "encode_infer_response",
    "error_body",
    "select_outputs",
    "json_cost",
    "json_values",
    "wire_bytes",
    "wire_datatype",
    "NON_FINITE",
    "tensor_metadata",
]
