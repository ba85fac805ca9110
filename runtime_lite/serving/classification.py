"""Triton's classification extension: an output asked for with ``"classification": k`` comes back as its top k.

tritonclient asks for it with ``InferRequestedOutput(name, class_count=k)`` (a ``classification``
parameter of the requested output, over HTTP and gRPC alike). Served without the extension,
such a client would read the raw scores where it expects strings, so the server either
answers as Triton does or refuses; it answers. As Triton: the result is a BYTES tensor of
``"<value>:<index>"`` strings, highest value first (``std::to_string`` spellings: six
decimals for floats), shape ``[batch, k]`` where the model batches (its first dim) and ``[k]``
where it does not, ``k`` clamped to the values there are. Bundles carry no labels, so no
string has the optional ``:<label>``.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from runtime_lite.errors import describe

#: The requested output's parameter that asks for classification, and the extension's name in the server metadata.
PARAMETER = "classification"
EXTENSION = "classification"


class ClassificationError(ValueError):
    """A classification request this output cannot answer; the message names the output."""


def requested_count(value: Any, output: str) -> int:
    """The ``k`` of a ``classification`` parameter: a positive integer (JSON's ``true`` is not one)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ClassificationError(
            f"output '{output}': classification must be a positive integer, got {describe(value)}"
        )
    return value


def classify(array: np.ndarray, count: int, batched: bool, output: str) -> np.ndarray:
    """The top ``count`` entries of ``array`` (per row of its first dim where ``batched``) as Triton's strings."""
    if array.dtype.kind not in "iuf":
        raise ClassificationError(f"output '{output}' is {array.dtype.name}: classification needs numeric scores")
    rows = array.reshape(array.shape[0], -1) if batched and array.ndim > 0 else array.reshape(1, -1)
    k = min(count, rows.shape[1])
    # Stable sort on the negated scores: highest first, the lower index first among equals, NaN last.
    order = np.argsort(-rows.astype(np.float64), axis=1, kind="stable")[:, :k]
    spell = _float_text if rows.dtype.kind == "f" else str
    table = np.empty((rows.shape[0], k), dtype=object)
    for r, picks in enumerate(order):
        for c, index in enumerate(picks):
            table[r, c] = f"{spell(rows[r, index])}:{int(index)}".encode()
    return table if batched and array.ndim > 0 else table.reshape(k)


def _float_text(value: Any) -> str:
    return f"{float(value):f}"  # std::to_string(float): %f


def serialized(table: np.ndarray) -> bytes:
    """A BYTES tensor on the wire (binary extension, gRPC raw contents): each element's length (u32 LE), its bytes."""
    return b"".join(struct.pack("<I", len(item)) + item for item in table.flat)


def json_strings(table: np.ndarray) -> list[str]:
    """A BYTES tensor's values for JSON ``data``: the strings (they are ASCII)."""
    return [item.decode() for item in table.flat]


__all__ = ["EXTENSION", "PARAMETER", "ClassificationError", "classify", "json_strings", "requested_count", "serialized"]
