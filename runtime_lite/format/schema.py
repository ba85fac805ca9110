"""Records declared once: a dataclass whose fields say how each is written and checked.

A bundle record (the host plan, an NPU graph, a TensorRT module's compile_specs,
a constant in a weights payload) is a dataclass deriving from :class:`Record`,
each field declared with :func:`declare` and a :class:`Kind`. The writer (``aot``)
builds the dataclass and calls ``to_record()``; the reader (runtime_lite) calls
``from_record(record, field)``, which checks every declared field against its
kind and raises BundleError naming it (``bundle field '<path>' ...``). Keys a
record does not declare are ignored, so an older reader accepts a newer minor.
Checks across fields go in ``check``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from runtime_lite import format as fmt
from runtime_lite.errors import BundleError, IncompatiblePayload, describe
from runtime_lite.format.dtypes import SUPPORTED_DTYPES
from runtime_lite.format.fields import expect, expect_dtype, expect_shape
from runtime_lite.format.signature import TensorSpec, parse_specs

REQUIRED: Any = dataclasses.MISSING
#: What ``Kind.quick`` returns for a value it does not vouch for: ``parse`` then checks it, naming the field.
SLOW: Any = object()


class Kind:
    """How one field's value is checked when read (``parse``) and encoded when written (``dump``)."""

    def parse(self, value: Any, field: str) -> Any:
        raise NotImplementedError

    def quick(self, value: Any) -> Any:
        """The parsed value when ``value`` is plainly well-formed (no field path is built), else SLOW."""
        return SLOW

    def dump(self, value: Any) -> Any:
        return value


class Scalar(Kind):
    """A value of one msgpack type, kept as it is (a ``dict`` or ``list`` kind keeps the raw container)."""

    def __init__(self, kind: type):
        self.kind = kind

    def parse(self, value: Any, field: str) -> Any:
        return expect(value, self.kind, field)

    def quick(self, value: Any) -> Any:
        return value if type(value) is self.kind else SLOW


INT, STR, BOOL, BYTES = Scalar(int), Scalar(str), Scalar(bool), Scalar(bytes)
MAP, LIST = Scalar(dict), Scalar(list)


class ListOf(Kind):
    """A list of ``item``, read as a tuple."""

    def __init__(self, item: Kind, length: int | None = None, what: str = ""):
        self.item, self.length, self.what = item, length, what

    def parse(self, value: Any, field: str) -> tuple:
        expect(value, list, field)
        if self.length is not None and len(value) != self.length:
            raise BundleError(f"bundle field '{field}' must be {self.what or f'a list of {self.length}'}")
        if self.item is INT and all(type(v) is int for v in value):  # the common case, without a path per item
            return tuple(value)
        parse = self.item.parse
        return tuple(parse(v, f"{field}[{i}]") for i, v in enumerate(value))

    def quick(self, value: Any) -> Any:
        if (
            type(value) is list
            and self.item is INT
            and (self.length is None or len(value) == self.length)
            and all(type(v) is int for v in value)
        ):
            return tuple(value)
        return SLOW

    def dump(self, value: Any) -> list:
        dump = self.item.dump
        return [dump(v) for v in value]


class Nullable(Kind):
    """``item`` or nil."""

    def __init__(self, item: Kind):
        self.item = item

    def parse(self, value: Any, field: str) -> Any:
        return None if value is None else self.item.parse(value, field)

    def dump(self, value: Any) -> Any:
        return None if value is None else self.item.dump(value)


class Nested(Kind):
    """A record of its own: a :class:`Record` subclass (or any class with ``from_record``/``to_record``)."""

    def __init__(self, cls: Any):
        self.cls = cls

    def parse(self, value: Any, field: str) -> Any:
        return self.cls.from_record(value, field)

    def dump(self, value: Any) -> Any:
        return value.to_record()


class Shape(Kind):
    """A list of non-negative ints (or names, where symbols are allowed), bounded in rank and elements."""

    def __init__(self, allow_symbols: bool = False):
        self.allow_symbols = allow_symbols

    def parse(self, value: Any, field: str) -> tuple:
        return expect_shape(value, field, allow_symbols=self.allow_symbols)

    def quick(self, value: Any) -> Any:
        if type(value) is not list or len(value) > fmt.MAX_RANK:
            return SLOW
        extent = 1  # the product of the non-zero dims bounds the elements too, and numpy needs it bounded
        for d in value:
            if type(d) is not int or not 0 <= d <= fmt.MAX_ELEMENTS:
                return SLOW
            extent *= d or 1
        return tuple(value) if extent <= fmt.MAX_ELEMENTS else SLOW

    def dump(self, value: Any) -> list:
        return [int(d) if not isinstance(d, str) else d for d in value]


class Dtype(Kind):
    """A supported dtype's numpy name, read as a ``np.dtype``."""

    def parse(self, value: Any, field: str) -> np.dtype:
        return expect_dtype(value, field)

    def quick(self, value: Any) -> Any:
        return SUPPORTED_DTYPES.get(value, SLOW) if type(value) is str else SLOW

    def dump(self, value: Any) -> str:
        return np.dtype(value).name


class TensorSpecs(Kind):
    """A list of tensor specs ``{name, shape, dtype}`` (symbolic dims allowed), names unique."""

    def parse(self, value: Any, field: str) -> tuple[TensorSpec, ...]:
        return parse_specs(value, field)

    def dump(self, value: Any) -> list[dict[str, Any]]:
        return [spec.to_record() for spec in value]


class OneOutput(Kind):
    """TVM's JSON-graph convention: a per-output list, here always of exactly one entry."""

    def __init__(self, item: Kind):
        self.item = item

    def parse(self, value: Any, field: str) -> Any:
        expect(value, list, field)
        if len(value) != 1:
            raise BundleError(f"bundle field '{field}' must describe exactly one output, got {describe(value)}")
        return self.item.parse(value[0], f"{field}[0]")

    def dump(self, value: Any) -> list:
        return [self.item.dump(value)]


def declare(
    kind: Kind,
    *,
    key: str | None = None,
    default: Any = REQUIRED,
    omit_default: bool = False,
    optional: bool | None = None,
) -> Any:
    """A record field of ``kind``, stored under ``key`` (default: the attribute's name).

    A record may leave out a field that has a ``default`` (unless ``optional=False``:
    the default is then for code that builds the dataclass, never for a record); with
    ``omit_default`` a value equal to the default is left out of the written record.
    """
    optional = default is not REQUIRED if optional is None else optional
    metadata = {"kind": kind, "key": key, "omit": omit_default, "optional": optional}
    if default is REQUIRED:
        return dataclasses.field(metadata=metadata)
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=type(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


_ABSENT: Any = object()


@dataclasses.dataclass(frozen=True)
class _Field:
    """One declared field as the reader and writer walk it (``Record.schema``)."""

    name: str
    key: str
    kind: Kind
    default: Any
    omit: bool
    optional: bool


class Record:
    """A bundle record declared once; subclasses are frozen dataclasses whose fields use :func:`declare`.

    ``FORMAT``, when set, is the format tag the record's ``format`` field must carry;
    any other tag raises ``IncompatiblePayload`` (a payload for another runtime), checked
    before any other field.
    """

    FORMAT: ClassVar[str | None] = None

    @classmethod
    def schema(cls) -> tuple[_Field, ...]:
        fields = cls.__dict__.get("_schema")
        if fields is None:
            fields = tuple(
                _Field(
                    f.name,
                    f.metadata["key"] or f.name,
                    f.metadata["kind"],
                    f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default,
                    f.metadata["omit"],
                    f.metadata["optional"],
                )
                for f in dataclasses.fields(cls)
                if "kind" in f.metadata
            )
            cls._schema = fields
        return fields

    @classmethod
    def _reader(cls) -> tuple[tuple, bool]:
        """Per field (key, name, quick, parse, optional, fresh default), and whether instances may be made
        without ``__init__`` (no ``__post_init__``, every dataclass field declared): reading a record is
        on every load's path, so the per-field work is looked up once per class."""
        reader = cls.__dict__.get("_reader_plan")
        if reader is None:
            steps = []
            for f in dataclasses.fields(cls):
                if "kind" not in f.metadata:
                    continue
                kind = f.metadata["kind"]
                factory = f.default_factory if f.default_factory is not dataclasses.MISSING else None
                steps.append((f.metadata["key"] or f.name, f.name, kind.quick, kind.parse, f.metadata["optional"],
                              factory, f.default))  # fmt: skip
            direct = not hasattr(cls, "__post_init__") and len(steps) == len(dataclasses.fields(cls))
            reader = cls._reader_plan = (tuple(steps), direct)
        return reader

    @classmethod
    def from_record(cls, record: Any, field: str) -> Any:
        """The record, every declared field checked; BundleError naming the first bad one."""
        if type(record) is not dict:
            expect(record, dict, field)
        if cls.FORMAT is not None:
            cls.check_format(record, field)
        steps, direct = cls._reader()
        values = {}
        for key, name, quick, parse, optional, factory, default in steps:
            value = record.get(key, _ABSENT)
            if value is _ABSENT:
                if not optional:
                    raise BundleError(f"bundle field '{field}.{key}' is missing")
                if direct:
                    values[name] = factory() if factory is not None else default
                continue
            parsed = quick(value)
            values[name] = parse(value, f"{field}.{key}") if parsed is SLOW else parsed
        if direct:  # what the dataclass's __init__ would do, without its per-field object.__setattr__
            parsed = object.__new__(cls)
            parsed.__dict__.update(values)
        else:
            try:
                parsed = cls(**values)
            except BundleError:
                raise
            except (ValueError, TypeError) as e:  # a dataclass's own invariants (__post_init__)
                raise BundleError(f"bundle field '{field}': {e}") from None
        parsed.check(field)
        return parsed

    @classmethod
    def check_format(cls, record: dict, field: str) -> None:
        tag = record.get("format", REQUIRED)
        if tag is REQUIRED:
            raise BundleError(f"bundle field '{field}.format' is missing")
        if tag != cls.FORMAT:
            expect(tag, str, f"{field}.format")
            raise IncompatiblePayload(f"payload format {tag!r}; this runtime_lite runs {cls.FORMAT!r}")

    def check(self, field: str) -> None:
        """Checks across fields, after each field was checked alone; raise BundleError naming ``field``."""

    def to_record(self) -> dict[str, Any]:
        """The msgpack/JSON-ready record, keys in declaration order (bundles are byte-reproducible)."""
        record = {}
        for f in self.schema():
            value = getattr(self, f.name)
            if f.omit and value == f.default:
                continue
            record[f.key] = f.kind.dump(value)
        return record
