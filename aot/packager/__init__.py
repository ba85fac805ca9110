"""The packager: turn a compiled program into a .aotb bundle."""

from aot.packager.bundle import make_header
from aot.packager.writer import BlobTable, encode_preamble, read_back, save, to_bytes, write_stream

__all__ = ["BlobTable", "encode_preamble", "make_header", "read_back", "save", "to_bytes", "write_stream"]
