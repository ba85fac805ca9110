"""``inference.ModelInferRequest`` to numpy arrays, and arrays into a ``ModelInferResponse``.

The checks are protocol.py's, the ones the REST path makes: name, datatype and shape
against the model (the declared size within the request cap) before any data is read,
exact byte counts, no value a cast would change, no input twice or missing. What is
particular to gRPC is only where the values are: ``raw_input_contents`` (one bytes field
per input, which tritonclient.grpc sends) or the typed ``contents`` of each input.

Nothing here imports protobuf: the functions read and fill messages by field name, so
any generated class of these messages works (the tests use tritonclient's own).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime_lite.format.signature import TensorSpec
from runtime_lite.serving.classification import PARAMETER as CLASSIFICATION
from runtime_lite.serving.protocol import (
    InferRequest,
    ProtocolError,
    add_input,
    check_byte_size,
    check_input,
    classification_count,
    datatype_of,
    exact_values,
    require_inputs,
    wire_bytes,
    wire_datatype,
)

#: The ``InferTensorContents`` field of each datatype's values, and the dtype protobuf keeps them in.
#: FP16 has none: it travels in ``raw_input_contents``.
CONTENTS_FIELDS: dict[str, tuple[str, np.dtype]] = {
    "BOOL": ("bool_contents", np.dtype(np.bool_)),
    "INT8": ("int_contents", np.dtype(np.int32)),
    "INT16": ("int_contents", np.dtype(np.int32)),
    "INT32": ("int_contents", np.dtype(np.int32)),
    "INT64": ("int64_contents", np.dtype(np.int64)),
    "UINT8": ("uint_contents", np.dtype(np.uint32)),
    "UINT16": ("uint_contents", np.dtype(np.uint32)),
    "UINT32": ("uint_contents", np.dtype(np.uint32)),
    "UINT64": ("uint64_contents", np.dtype(np.uint64)),
    "FP32": ("fp32_contents", np.dtype(np.float32)),
    "FP64": ("fp64_contents", np.dtype(np.float64)),
}
_ALL_FIELDS = (*dict.fromkeys(f for f, _ in CONTENTS_FIELDS.values()), "bytes_contents")
#: Triton's parameter for an input or output in a registered shared-memory region, which this server has none of.
_SHARED_MEMORY = "shared_memory_region"


def decode_infer_request(message: Any, specs: Sequence[TensorSpec], max_bytes: int) -> InferRequest:
    """Read a ModelInferRequest against the model's inputs; ProtocolError (400, 413) naming the problem."""
    raw = list(message.raw_input_contents)  # each access to a bytes field copies it: read them once
    total = sum(len(r) for r in raw)
    if total > max_bytes:
        raise ProtocolError(413, f"request tensors are over {max_bytes} bytes ({total} in raw_input_contents)")
    tensors = message.inputs
    if not tensors:
        raise ProtocolError(400, "request needs a non-empty 'inputs' list")
    if raw and len(raw) != len(tensors):
        raise ProtocolError(
            400, f"raw_input_contents holds {len(raw)} tensors for {len(tensors)} inputs (one per input, in order)"
        )
    by_name = {spec.name: spec for spec in specs}
    inputs: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(tensors):
        name = tensor.name
        dtype, shape = check_input(name, tensor.datatype, list(tensor.shape), by_name, max_bytes)
        if _SHARED_MEMORY in tensor.parameters:
            raise ProtocolError(400, f"input '{name}': shared-memory inputs are not served; send its values")
        if raw:
            if tensor.HasField("contents"):
                raise ProtocolError(400, f"input '{name}' has contents, but the request uses raw_input_contents")
            check_byte_size(name, len(raw[i]), shape, dtype, "raw_input_contents")
            array = np.frombuffer(raw[i], dtype=dtype).reshape(shape)
        else:
            array = _typed_values(name, tensor.contents, shape, dtype)
        add_input(inputs, name, array)
    require_inputs(inputs, specs)
    outputs, classifications = [], {}
    for requested in message.outputs:
        if _SHARED_MEMORY in requested.parameters:
            raise ProtocolError(400, f"output '{requested.name}': shared-memory outputs are not served")
        if CLASSIFICATION in requested.parameters:
            classifications[requested.name] = classification_count(
                _parameter_value(requested.parameters[CLASSIFICATION]), requested.name
            )
        outputs.append(requested.name)
    return InferRequest(id=message.id or None, inputs=inputs, outputs=outputs or None, classifications=classifications)


def _parameter_value(parameter: Any) -> Any:
    """An InferParameter's value, whichever of its fields is set (tritonclient sets ``int64_param``), else None."""
    choice = parameter.WhichOneof("parameter_choice")
    return None if choice is None else getattr(parameter, choice)


def _typed_values(name: str, contents: Any, shape: list[int], dtype: np.dtype) -> np.ndarray:
    datatype = datatype_of(dtype)
    if datatype not in CONTENTS_FIELDS:
        raise ProtocolError(400, f"input '{name}': {datatype} has no typed contents; send it in raw_input_contents")
    field, kept_as = CONTENTS_FIELDS[datatype]
    stray = next((f for f in _ALL_FIELDS if f != field and len(getattr(contents, f))), None)
    if stray is not None:
        raise ProtocolError(400, f"input '{name}': {datatype} values go in contents.{field}, not {stray}")
    values = getattr(contents, field)
    count = math.prod(shape)
    if len(values) != count:  # counted before any is converted: the declared shape bounds the work
        given = f"{len(values)} values in contents.{field}"
        raise ProtocolError(400, f"input '{name}': {given} for shape {shape} (needs {count})")
    return exact_values(name, np.fromiter(values, dtype=kept_as, count=count), shape, dtype)


def encode_infer_response(
    response: Any,
    model_name: str,
    model_version: str,
    request: InferRequest,
    specs: Sequence[TensorSpec],
    arrays: Sequence[np.ndarray],
    chosen: Sequence[int],
) -> Any:
    """Fill an empty ModelInferResponse: every output raw, in the order asked, as Triton answers."""
    response.model_name = model_name
    response.model_version = model_version
    if request.id is not None:
        response.id = request.id
    for i in chosen:
        array = np.asarray(arrays[i], order="C")  # ascontiguousarray would make a 0-d output 1-d
        tensor = response.outputs.add()
        tensor.name = specs[i].name
        tensor.datatype = wire_datatype(array)
        tensor.shape.extend(array.shape)
        response.raw_output_contents.append(wire_bytes(array))
    return response
