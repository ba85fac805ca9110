"""The tensor element types a bundle may name, spelled as numpy spells them.

Bundles store dtypes as these strings so that a reader never has to evaluate
anything to learn a type.
"""

from __future__ import annotations

import numpy as np

SUPPORTED_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name)
    for name in (
        "bool",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
}


def to_numpy_dtype(name: str) -> np.dtype:
    """Return the numpy dtype for a bundle dtype name, or raise ValueError naming it."""
    try:
        return SUPPORTED_DTYPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unsupported dtype {name!r}") from None
