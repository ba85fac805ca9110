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
#: Features this reader implements. A bundle lists the ones it needs; any other name is refused.
KNOWN_FEATURES = frozenset({"host-plan/1", "call-module/1"})

#: Upper bounds the reader enforces before trusting anything the header declares.
MAX_HEADER_BYTES = 64 * 1024 * 1024
MAX_RANK = 32
MAX_ELEMENTS = 1 << 40
