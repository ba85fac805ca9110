"""ONNX element types to the dtype names bundles use."""

from __future__ import annotations

from onnx import TensorProto

_NAMES = {
    TensorProto.FLOAT: "float32",
    TensorProto.DOUBLE: "float64",
    TensorProto.FLOAT16: "float16",
    TensorProto.INT8: "int8",
    TensorProto.UINT8: "uint8",
    TensorProto.INT16: "int16",
    TensorProto.UINT16: "uint16",
    TensorProto.INT32: "int32",
    TensorProto.UINT32: "uint32",
    TensorProto.INT64: "int64",
    TensorProto.UINT64: "uint64",
    TensorProto.BOOL: "bool",
}


def onnx_dtype_name(code: int) -> str:
    try:
        return _NAMES[code]
    except KeyError:
        label = TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else str(code)
        raise ValueError(f"element type {label} is not supported") from None
