"""Constants of the .aotb bundle format, shared by the writer (aot) and the reader.

The layout is specified in docs/bundle-format.md. In short, a bundle is a valid
msgpack stream of these objects:

    "AOTBUNDLE"                       str    magic
    [major, minor]                    array  format version
    <header bytes>                    bin    the msgpack-encoded header map
    <sha256 of header bytes>          bin    32 bytes
    <padding>                         bin    so the data section starts 64-aligned
    then for each blob: <padding bin> <blob bin32>, each blob's payload 64-aligned
"""

from __future__ import annotations

MAGIC = "AOTBUNDLE"
#: The msgpack encoding of MAGIC (fixstr of length 9): what every bundle starts with.
MAGIC_BYTES = b"\xa9" + MAGIC.encode("ascii")
FORMAT_MAJOR = 1
FORMAT_MINOR = 0
#: Blob payloads start at multiples of this, so numpy can view them in place (≥ any dtype).
ALIGNMENT = 64
#: Format tags, each defined here only. The first two are header features (``required_features``);
#: the host-plan tag also marks a TensorRT module's fallback plan record.
HOST_PLAN = "host-plan/1"
CALL_MODULE = "call-module/1"
#: The NPU's ``graph`` payload and the TensorRT ``compile_specs`` record.
NPU_GRAPH = "npu-graph/1"
TENSORRT_RECIPE = "tensorrt-recipe/1"
#: The onnxruntime ``compile_specs`` record.
ONNXRUNTIME_RECIPE = "onnxruntime-recipe/1"
#: Features this reader implements. A bundle lists the ones it needs; any other name is refused.
KNOWN_FEATURES = frozenset({HOST_PLAN, CALL_MODULE})

#: Upper bounds the reader enforces before trusting anything the header declares.
MAX_HEADER_BYTES = 64 * 1024 * 1024
MAX_RANK = 32
MAX_ELEMENTS = 1 << 40
