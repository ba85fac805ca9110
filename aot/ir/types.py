"""Tensor types of the IR: a dtype name and a shape whose dims are ints or symbols.

A symbolic dim is a string. Names that come from the model's inputs ("N",
"batch") are kept; a dim the compiler cannot compute is a fresh "?k" symbol, unique
per graph, so two unknown dims never compare equal by accident.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import numpy as np

Dim = Union[int, str]


@dataclass(frozen=True)
class TensorType:
    shape: tuple[Dim, ...]
    dtype: str

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype).name)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def numel(self) -> int | None:
        if not self.is_static:
            return None
        return math.prod(self.shape)  # exact Python ints: no int64 overflow on absurd shapes

    @property
    def nbytes(self) -> int | None:
        n = self.numel
        return None if n is None else n * np.dtype(self.dtype).itemsize

    def with_shape(self, shape) -> TensorType:
        return TensorType(tuple(shape), self.dtype)

    def with_dtype(self, dtype) -> TensorType:
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(str(d) for d in self.shape)}]"


def parse_shape(text: str) -> tuple:
    """'1x3x224x224' or '1,3,224,224' -> (1, 3, 224, 224); a non-numeric part stays a symbol;
    '32..1280' (or 'h=32..1280') is a symbolic dim with bounds, a ``DimRange``.

    Raises ValueError for an empty part, a negative size or bad bounds.
    """
    from aot.ir.dims import DimRange

    text = text.strip()
    if text in ("", "scalar"):
        return ()
    parts = text.split(",") if "," in text else text.split("x")
    dims: list[Dim] = []
    for part in parts:
        part = part.strip()
        if not part:
            raise ValueError(f"empty dimension in shape {text!r}")
        if part.lstrip("-").isdigit():
            if int(part) < 0:
                raise ValueError(f"negative dimension {part} in shape {text!r}")
            dims.append(int(part))
        elif ".." in part:
            name, _, bounds = part.rpartition("=")
            low, _, high = bounds.partition("..")
            if not (low.isdigit() and high.isdigit()) or (name and not name.isidentifier()):
                raise ValueError(f"bad bounds {part!r} in shape {text!r} (write MIN..MAX or NAME=MIN..MAX)")
            dims.append(DimRange(int(low), int(high), name or None))
        elif part.isidentifier():
            dims.append(part)
        else:
            raise ValueError(f"bad dimension {part!r} in shape {text!r}")
    return tuple(dims)
