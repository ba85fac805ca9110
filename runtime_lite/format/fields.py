"""Typed reads of bundle fields: each check names the field it refused.

Every record reader (signature, records, schema, plan, backends) validates what the
header declares through these, so a hostile bundle fails with a BundleError that says
which field was wrong. They depend on nothing but the format's constants, which keeps
the format layer free of import cycles.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime_lite import format as fmt
from runtime_lite.errors import BundleError
from runtime_lite.format.dtypes import to_numpy_dtype


def expect(value: Any, kind: type | tuple[type, ...], field: str) -> Any:
    """Return ``value`` if it has the expected type, else raise BundleError naming the field."""
    if isinstance(value, bool) and kind in (int, (int,)):
        raise BundleError(f"bundle field '{field}' must be an integer, got bool")
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise BundleError(f"bundle field '{field}' must be {names}, got {type(value).__name__}")
    return value


def expect_key(mapping: dict, key: str, kind, field: str) -> Any:
    if key not in mapping:
        raise BundleError(f"bundle field '{field}.{key}' is missing")
    return expect(mapping[key], kind, f"{field}.{key}")


def expect_index(value: Any, limit: int, field: str) -> int:
    expect(value, int, field)
    if not 0 <= value < limit:
        raise BundleError(f"bundle field '{field}' = {value} is out of range [0, {limit})")
    return value


def expect_shape(value: Any, field: str, allow_symbols: bool) -> tuple:
    expect(value, list, field)
    if len(value) > fmt.MAX_RANK:
        raise BundleError(f"bundle field '{field}' has rank {len(value)} > {fmt.MAX_RANK}")
    elements = extent = 1
    for i, d in enumerate(value):
        if isinstance(d, str) and allow_symbols and d:
            continue
        expect(d, int, f"{field}[{i}]")
        if d < 0:
            raise BundleError(f"bundle field '{field}[{i}]' = {d} is negative")
        if d > fmt.MAX_ELEMENTS:
            raise BundleError(f"bundle field '{field}[{i}]' = {d} is larger than {fmt.MAX_ELEMENTS}")
        elements *= d
        extent *= max(d, 1)
    if elements > fmt.MAX_ELEMENTS:
        raise BundleError(f"bundle field '{field}' declares {elements} elements, more than {fmt.MAX_ELEMENTS}")
    if extent > fmt.MAX_ELEMENTS:  # empty, but numpy refuses such dims ("array is too big") all the same
        raise BundleError(
            f"bundle field '{field}' = {value}: its non-zero dims span {extent} elements, more than {fmt.MAX_ELEMENTS}"
        )
    return tuple(value)


def expect_dtype(value: Any, field: str) -> np.dtype:
    expect(value, str, field)
    try:
        return to_numpy_dtype(value)
    except ValueError:
        raise BundleError(f"bundle field '{field}' names unsupported dtype {value!r}") from None
