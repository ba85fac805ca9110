"""The symbolic dims of a graph's inputs: readable names, where each came from, and bounds.

Exporters name unknown dims for their own bookkeeping (``p2o.DynamicDimension.0``,
``?198``, ``unk__12``, ``?``, ``-1``), and some write the same ``?`` for every unknown
dim of a file. A bundle's signature is read by people and bound by name at run time,
so each anonymous dim gets its own name, chosen by its position as the conventions
of the input's rank suggest (``N``/``h``/``w`` for images, ``batch``/``seq`` for
sequences, else ``dim1``...), and only a name the model really gives to two dims makes
them one. Each dim also records where it came from and, when declared, its bounds
(``--input x:1x3x32..1280x32..1280``), which the runtime checks and the memory plan uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Union

from aot.errors import ShapeError
from aot.ir.types import Dim

#: Names exporters write for a dim they know nothing about; each such dim is renamed.
_RAW_NAME = re.compile(
    r"^(\?\d*|-?\d*|unk__\d+|(p2o\.)?DynamicDimension\.\d+|s\d+|sym_size_int_\d+|"
    r"(input|output)_?\d*_dim_?\d+|dim_?\d+|Unknown\d*|None|unk\d*|N?_?\d+|_\d+)$"
)
#: Names that stand for "a dim of its own", never shared even when repeated.
_ANONYMOUS = {"", "?", "-1", "None"}


@dataclass(frozen=True)
class DimRange:
    """A symbolic dim with bounds, as ``--input x:1x3x32..1280`` or ``(32, 1280)`` declare it."""

    min: int
    max: int
    name: str | None = None

    def __post_init__(self):
        if not 0 <= self.min <= self.max:
            raise ValueError(f"bounds {self.min}..{self.max} must satisfy 0 <= min <= max")

    def __str__(self) -> str:
        return f"{self.name + '=' if self.name else ''}{self.min}..{self.max}"


#: What a caller may give for one dim: a size, a name, or bounds (a DimRange or a (min, max) tuple).
GivenDim = Union[int, str, DimRange, tuple]


@dataclass(frozen=True)
class DimInfo:
    """One symbolic dim of the signature: where its name came from, its bounds if declared, and, for a dim an
    exporter derives from another (torch's ``2 * h``), that relation as (base name, scale, offset): the dim is
    ``scale * base + offset``, which the runtime checks with the inputs, so a length the model cannot take is
    refused where the inputs are checked rather than deep in an op."""

    origin: str
    min: int | None = None
    max: int | None = None
    of: tuple[str, int, int] | None = None

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"from": self.origin}
        if self.min is not None:
            record["min"] = self.min
        if self.max is not None:
            record["max"] = self.max
        if self.of is not None:
            base, scale, offset = self.of
            record["of"] = {"dim": base, "scale": scale, "offset": offset}
        return record

    def bounds_text(self) -> str:
        if self.min is None and self.max is None:
            return ""
        return f"{self.min if self.min is not None else 0}..{self.max if self.max is not None else ''}"


def is_raw_name(name: str) -> bool:
    """Whether ``name`` is an exporter's bookkeeping rather than a name a person chose."""
    return bool(_RAW_NAME.match(name)) or "." in name or not name.isidentifier()


def is_anonymous(name: str) -> bool:
    return name in _ANONYMOUS


def conventional_name(rank: int, axis: int, dtype: str) -> str:
    """The name a reader expects for dim ``axis`` of a rank-``rank`` input: NCHW images, [batch, seq] tokens."""
    if rank in (4, 5):
        return ("N", "c", *(("d", "h", "w") if rank == 5 else ("h", "w")))[axis]
    if rank in (2, 3) and axis == 0:
        return "batch"
    if (rank == 3 and axis == 1) or (rank == 2 and axis == 1 and dtype.startswith("int")):
        return "seq"
    return f"dim{axis}"


def as_given(d: Any) -> GivenDim:
    """A caller's dim (int, name, DimRange, (min, max)) checked; anything else is a ValueError."""
    if isinstance(d, DimRange):
        return d
    if isinstance(d, tuple) and len(d) == 2 and all(isinstance(v, int) for v in d):
        return DimRange(int(d[0]), int(d[1]))
    if isinstance(d, bool) or not isinstance(d, (int, str)):
        raise ValueError(f"a dim must be a size, a name or (min, max) bounds, got {d!r}")
    if isinstance(d, int) and d < 0:
        raise ValueError(f"negative dim {d}")
    return d


class DimNamer:
    """Gives every symbolic dim of a model's inputs its signature name, recording where it came from.

    A name the model gives (or the user gives) is kept and shared by every dim under it;
    a raw or anonymous name becomes a readable one, unique unless the model repeats
    that same raw, non-anonymous name (then the dims are one, as the model says).
    """

    def __init__(self, reserved: set[str] = frozenset()):
        self.dims: dict[str, DimInfo] = {}
        self._taken = set(reserved)
        self._raw_to_readable: dict[str, str] = {}

    def _fresh(self, base: str) -> str:
        name, k = base, 2
        joint = "_" if base[-1].isdigit() else ""  # h, h2; dim1, dim1_2
        while name in self._taken or name in self.dims:
            name, k = f"{base}{joint}{k}", k + 1
        self._taken.add(name)
        return name

    def declared(self, raw: str, where: str, rank: int, axis: int, dtype: str) -> str:
        """The signature name of a dim the model declares as ``raw`` (``"?"``, ``"-1"``, ``"N"``...)."""
        if not is_anonymous(raw) and not is_raw_name(raw):
            self._record(raw, DimInfo(f"{where} (named '{raw}' in the model)"))
            return raw
        if not is_anonymous(raw) and raw in self._raw_to_readable:
            return self._raw_to_readable[raw]
        name = self._fresh(conventional_name(rank, axis, dtype))
        written = "no name" if raw in ("", "-1") else f"'{raw}'"
        self.dims[name] = DimInfo(f"{where} (the model wrote {written})")
        if not is_anonymous(raw):
            self._raw_to_readable[raw] = name
        return name

    def given(self, given: GivenDim, where: str, rank: int, axis: int, dtype: str) -> Dim:
        """The signature dim for what ``--input`` / ``input_shapes`` gives: a size, a name or bounds."""
        if isinstance(given, int):
            return given
        if isinstance(given, str):
            self._record(given, DimInfo(f"{where} (given as '{given}')"))
            return given
        name = given.name or self._fresh(conventional_name(rank, axis, dtype))
        info = DimInfo(where, given.min, given.max)
        previous = self.dims.get(name)
        if previous is not None and previous.min is not None and (previous.min, previous.max) != (info.min, info.max):
            raise ShapeError(f"dim '{name}' is given two bounds: {previous.bounds_text()} and {info.bounds_text()}")
        self._record(name, info)
        return name

    def _record(self, name: str, info: DimInfo) -> None:
        previous = self.dims.get(name)
        if previous is None or (previous.min is None and info.min is not None):
            self.dims[name] = info if previous is None else DimInfo(previous.origin, info.min, info.max)
        self._taken.add(name)


def dims_record(dims: dict[str, DimInfo], used: set[str]) -> dict[str, dict[str, Any]]:
    """The signature's ``dims`` map, for the dims the signature really names."""
    return {name: info.to_record() for name, info in dims.items() if name in used}
