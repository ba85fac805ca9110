"""The checked recipe with each placeholder pointed at the bundle's own array in memory, for OpenVINO.

onnxruntime takes the bundle's weights beside the recipe
(``SessionOptions.add_external_initializers``); OpenVINO's ``read_model`` has no such
argument for ONNX, but its ONNX reader resolves an external-data ``location`` of
``*/_ORT_MEM_ADDR_/*`` as a raw address (``offset``) and byte count (``length``) in
this process. A bundle may never name that location (``recipe_check`` refuses it: it
reads any memory); here, only *after* the check accepted the recipe and matched each
placeholder's dtype and dims against the array the runtime supplies, the runtime
itself writes those entries, with the addresses of the arrays it holds (read-only
views of the bundle's blobs). So OpenVINO reads the weights where the bundle keeps
them: stored once, not copied into the recipe.

A small protobuf rewrite in pure Python (runtime_lite has no onnx): ModelProto.graph
-> GraphProto.initializer -> TensorProto.external_data, every other byte as it was.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from runtime_lite.backends.onnxruntime.recipe_check import read_varint

#: OpenVINO's (and onnxruntime's) in-memory external-data location.
MEMORY_LOCATION = "*/_ORT_MEM_ADDR_/*"
# Field numbers (onnx.proto).
MODEL_GRAPH, GRAPH_INITIALIZER, TENSOR_NAME, TENSOR_EXTERNAL_DATA = 7, 5, 8, 13
LEN = 2


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(data: memoryview) -> Iterator[tuple[int, memoryview, memoryview | None]]:
    """(field number, the field's bytes as written, its payload for a length-delimited field) of one message
    the recipe check accepted (so well formed: no bounds checks here)."""
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = read_varint(data, pos)
        wire, payload = key & 7, None
        if wire == LEN:
            size, pos = read_varint(data, pos)
            payload, pos = data[pos : pos + size], pos + size
        elif wire == 0:
            _, pos = read_varint(data, pos)
        else:
            pos += 8 if wire == 1 else 4
        yield key >> 3, data[start:pos], payload


def _message(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | LEN) + _encode_varint(len(payload)) + payload


def _entry(key: str, value: str) -> bytes:
    return _message(TENSOR_EXTERNAL_DATA, _message(1, key.encode()) + _message(2, value.encode()))


def _tensor(data: memoryview, arrays: Mapping[str, np.ndarray]) -> bytes:
    fields = list(_fields(data))
    name = next((bytes(p).decode() for n, _, p in fields if n == TENSOR_NAME), None)
    if name not in arrays or not any(n == TENSOR_EXTERNAL_DATA for n, _, _ in fields):
        return bytes(data)  # not a placeholder (an inline tensor of the same name keeps its own bytes)
    array = arrays[name]
    kept = b"".join(bytes(raw) for n, raw, _ in fields if n != TENSOR_EXTERNAL_DATA)
    location = (("location", MEMORY_LOCATION), ("offset", str(array.ctypes.data)), ("length", str(array.nbytes)))
    return kept + b"".join(_entry(k, v) for k, v in location)


def _graph(data: memoryview, arrays: Mapping[str, np.ndarray]) -> bytes:
    return b"".join(
        _message(n, _tensor(p, arrays)) if n == GRAPH_INITIALIZER else bytes(raw) for n, raw, p in _fields(data)
    )


def in_memory(recipe: bytes | memoryview, arrays: Mapping[str, np.ndarray]) -> bytes:
    """``recipe`` (checked: its placeholders are exactly ``arrays``' names) with each placeholder's external
    data at its array's address. The arrays must be C-contiguous and outlive every model read from the result."""
    for name, array in arrays.items():
        if not array.flags.c_contiguous:
            raise ValueError(f"weight {name!r} is not contiguous")
    data = memoryview(recipe).cast("B")
    return b"".join(_message(n, _graph(p, arrays)) if n == MODEL_GRAPH else bytes(raw) for n, raw, p in _fields(data))


__all__ = ["MEMORY_LOCATION", "in_memory"]
