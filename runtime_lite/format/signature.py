"""The model signature and the checks that turn caller arrays into plan inputs.

Policy (also in docs/inputs.md): dtypes must match, except that a lossless
('safe') numpy cast is applied silently (int32 -> int64, float16 -> float32) and
a plain Python sequence is converted to the declared dtype. Anything lossy
(float64 -> float32) is refused with the cast to write. Ranks and fixed dims must
match; a symbolic dim (a name such as "N") takes the first size it is given and
every other input naming it must agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from runtime_lite.errors import BundleError, ExecutionError, InputError
from runtime_lite.format.fields import expect, expect_dtype, expect_key, expect_shape

Dim = Union[int, str]


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model: a name, a shape (names for symbolic dims) and a dtype."""

    name: str
    shape: tuple[Dim, ...]
    dtype: np.dtype

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype.name}[{','.join(str(d) for d in self.shape)}]"

    def to_record(self) -> dict[str, Any]:
        """The record ``parse_specs`` reads (the bundle signature, a TensorRT module's inputs/outputs)."""
        return {"name": self.name, "shape": list(self.shape), "dtype": np.dtype(self.dtype).name}


def parse_specs(records: Any, field: str) -> tuple[TensorSpec, ...]:
    expect(records, list, field)
    specs = []
    for i, record in enumerate(records):
        f = f"{field}[{i}]"
        expect(record, dict, f)
        specs.append(
            TensorSpec(
                expect_key(record, "name", str, f),
                expect_shape(expect_key(record, "shape", list, f), f"{f}.shape", allow_symbols=True),
                expect_dtype(expect_key(record, "dtype", str, f), f"{f}.dtype"),
            )
        )
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise BundleError(f"bundle field '{field}' repeats a tensor name")
    return tuple(specs)


@dataclass(frozen=True)
class DimSpec:
    """A symbolic dim of the signature: where its name came from and, when declared, its bounds."""

    name: str
    origin: str = ""
    min: int | None = None
    max: int | None = None
    #: A dim derived from another (torch's ``2 * h``): (base name, scale, offset), the dim being scale * base + offset.
    of: tuple[str, int, int] | None = None

    def __str__(self) -> str:
        bounds = f" in {self.min if self.min is not None else 0}..{'' if self.max is None else self.max}"
        bounded = self.min is not None or self.max is not None
        relation = f" = {relation_text(self.of)}" if self.of is not None else ""
        return f"{self.name}{relation}{bounds if bounded else ''}" + (f" (from {self.origin})" if self.origin else "")


def relation_text(of: tuple[str, int, int]) -> str:
    """``2*h``, ``h + 1``, ``2*h - 1``: a derived dim's relation as torch writes it."""
    base, scale, offset = of
    term = base if scale == 1 else f"{scale}*{base}"
    return term if offset == 0 else f"{term} {'+' if offset > 0 else '-'} {abs(offset)}"


def _parse_relation(entry: Any, name: str, field: str) -> tuple[str, int, int]:
    """A dim's ``of`` record: ``{dim, scale, offset}``, the dim being scale * dim + offset (scale >= 1)."""
    expect(entry, dict, field)
    base = expect_key(entry, "dim", str, field)
    scale, offset = entry.get("scale", 1), entry.get("offset", 0)
    if not base or base == name:
        raise BundleError(f"bundle field '{field}.dim' must name another dim, got {base!r}")
    if type(scale) is not int or not 1 <= scale <= MAX_RELATION:
        raise BundleError(f"bundle field '{field}.scale' must be an int in 1..{MAX_RELATION}, got {scale!r}")
    if type(offset) is not int or abs(offset) > MAX_RELATION:
        raise BundleError(f"bundle field '{field}.offset' must be an int within +-{MAX_RELATION}, got {offset!r}")
    return base, scale, offset


#: The largest scale or offset a derived dim's relation may state (sizes themselves stay far below it).
MAX_RELATION = 1 << 40


def parse_dims(record: Any, inputs: Sequence[TensorSpec], field: str = "signature.dims") -> dict[str, DimSpec]:
    """The signature's ``dims`` map (optional: older bundles have none), each name one the inputs use."""
    expect(record, dict, field)
    named = {d for spec in inputs for d in spec.shape if isinstance(d, str)}
    dims = {}
    for name, entry in record.items():
        f = f"{field}.{name}"
        expect(name, str, field)
        if name not in named:
            raise BundleError(f"bundle field '{f}' describes a dim no input names")
        expect(entry, dict, f)
        origin = expect(entry.get("from", ""), str, f"{f}.from")
        low, high = entry.get("min"), entry.get("max")
        for key, bound in (("min", low), ("max", high)):
            if bound is not None and (type(bound) is not int or bound < 0):
                raise BundleError(f"bundle field '{f}.{key}' must be a non-negative int, got {bound!r}")
        if low is not None and high is not None and low > high:
            raise BundleError(f"bundle field '{f}': min {low} is above max {high}")
        of = _parse_relation(entry["of"], name, f"{f}.of") if entry.get("of") is not None else None
        dims[name] = DimSpec(name, origin, low, high, of)
    for name, spec in dims.items():
        base = dims.get(spec.of[0]) if spec.of is not None else None
        if base is not None and base.of is not None:
            raise BundleError(f"bundle field '{field}.{name}.of' names '{base.name}', itself a derived dim")
    return dims


@dataclass(frozen=True)
class BoundedAxis:
    """One input axis whose symbolic dim has bounds: checked on every run."""

    input_index: int
    input_name: str
    axis: int
    dim: DimSpec


def bounded_axes(specs: Sequence[TensorSpec], dims: Mapping[str, DimSpec]) -> tuple[BoundedAxis, ...]:
    axes = []
    for i, spec in enumerate(specs):
        for axis, d in enumerate(spec.shape):
            info = dims.get(d) if isinstance(d, str) else None
            if info is not None and (info.min is not None or info.max is not None):
                axes.append(BoundedAxis(i, spec.name, axis, info))
    return tuple(axes)


def check_bounds(axes: Sequence[BoundedAxis], arrays: Sequence[Any]) -> None:
    """A size outside a declared bound is refused in one line naming the input, the dim and the bound."""
    for b in axes:
        size = arrays[b.input_index].shape[b.axis]
        low, high = b.dim.min, b.dim.max
        if (low is not None and size < low) or (high is not None and size > high):
            side = f"below its minimum {low}" if low is not None and size < low else f"above its maximum {high}"
            raise InputError(
                f"input '{b.input_name}': dim {b.axis} ('{b.dim.name}') is {size}, {side} "
                f"(the bundle was built for {b.dim.name} in {low if low is not None else 0}..{'' if high is None else high})"
            )


@dataclass(frozen=True)
class RelatedAxis:
    """The first input axis of a derived dim, and the first input axis of its base where an input names the base."""

    input_index: int
    input_name: str
    axis: int
    dim: DimSpec
    base: tuple[int, str, int] | None


def _first_axes(specs: Sequence[TensorSpec]) -> dict[str, tuple[int, str, int]]:
    first: dict[str, tuple[int, str, int]] = {}
    for i, spec in enumerate(specs):
        for axis, d in enumerate(spec.shape):
            if isinstance(d, str):
                first.setdefault(d, (i, spec.name, axis))
    return first


def related_axes(specs: Sequence[TensorSpec], dims: Mapping[str, DimSpec]) -> tuple[RelatedAxis, ...]:
    """The derived dims to check on every run (binding already makes every other axis naming one agree)."""
    first = _first_axes(specs)
    return tuple(
        RelatedAxis(*first[name], info, first.get(info.of[0]))
        for name, info in dims.items()
        if info.of is not None and name in first
    )


def check_relations(axes: Sequence[RelatedAxis], arrays: Sequence[Any]) -> None:
    """A size that breaks a derived dim's relation (an odd length for ``2*h``, or one that disagrees with the input
    that sets ``h``) is refused in one line naming the input, the dim and the relation."""
    for r in axes:
        size = arrays[r.input_index].shape[r.axis]
        base, scale, offset = r.dim.of  # type: ignore[misc]
        where = f"input '{r.input_name}': dim {r.axis} ('{r.dim.name}') is {size}"
        built = f"(the bundle was built for {r.dim.name} = {relation_text(r.dim.of)})"  # type: ignore[arg-type]
        if size < offset or (size - offset) % scale:
            raise InputError(f"{where}, not {relation_text(r.dim.of)} for a whole {base} >= 0 {built}")  # type: ignore[arg-type]
        if r.base is not None:
            i, name, axis = r.base
            given = arrays[i].shape[axis]
            if scale * given + offset != size:
                raise InputError(
                    f"{where}, but input '{name}' dim {axis} sets {base} = {given}, so {r.dim.name} must be "
                    f"{scale * given + offset} {built}"
                )


def _describe(specs: Sequence[TensorSpec]) -> str:
    return ", ".join(str(s) for s in specs)


def _on_device(value: Any) -> bool:
    """A GPU array as the execution layer wraps it (``on_device`` on its type): checked by shape and dtype only."""
    return type(value) is not np.ndarray and getattr(type(value), "on_device", False)


def _coerce(spec: TensorSpec, value: Any) -> np.ndarray:
    if type(value) is not np.ndarray:  # subclasses (np.matrix, memmap) too: the model sees plain arrays
        if _on_device(value):
            if value.dtype != spec.dtype:
                raise InputError(
                    f"input '{spec.name}': expected dtype {spec.dtype.name}, got a GPU array of {value.dtype.name} "
                    "(GPU arrays are not converted: cast it on the GPU first)"
                )
            return value
        if isinstance(value, np.ma.MaskedArray):
            raise InputError(f"input '{spec.name}': masked arrays are not supported; pass value.filled(...)")
        if isinstance(value, (np.ndarray, np.generic)):
            value = np.asarray(value)
        else:
            try:
                return np.asarray(value, dtype=spec.dtype)
            except (TypeError, ValueError, OverflowError) as e:
                raise InputError(
                    f"input '{spec.name}': cannot convert {type(value).__name__} to {spec.dtype.name} ({e})"
                ) from None
    if value.dtype != spec.dtype:
        if np.can_cast(value.dtype, spec.dtype, casting="safe"):
            return value.astype(spec.dtype)
        raise InputError(
            f"input '{spec.name}': expected dtype {spec.dtype.name}, got {value.dtype.name} "
            f"(convert explicitly, e.g. x.astype(np.{spec.dtype.name}))"
        )
    return value


def _read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view: no kernel and no hostile plan can write into the caller's array through it."""
    view = array.view()
    view.flags.writeable = False
    return view


def _check_shape(spec: TensorSpec, value: np.ndarray, bound: dict[str, int]) -> None:
    if value.shape == spec.shape:  # every dim fixed and equal: the common case, one tuple comparison
        return
    expected = "[" + ",".join(str(d) for d in spec.shape) + "]"
    if value.ndim != len(spec.shape):
        raise InputError(
            f"input '{spec.name}': expected rank {len(spec.shape)} {expected}, got shape {list(value.shape)}"
        )
    for axis, (want, got) in enumerate(zip(spec.shape, value.shape)):
        if isinstance(want, str):
            if bound.setdefault(want, got) != got:
                raise InputError(
                    f"input '{spec.name}': dim {axis} ('{want}') is {got} but another input set '{want}' = {bound[want]}"
                )
        elif want != got:
            raise InputError(
                f"input '{spec.name}': expected shape {expected}, got {list(value.shape)} (dim {axis} differs)"
            )


def bind_inputs(specs: Sequence[TensorSpec], inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
    """Validate ``inputs`` (a dict by name or a list in signature order) against ``specs``."""
    return bind(specs, ordered_values(specs, inputs))[0]


def ordered_values(specs: Sequence[TensorSpec], inputs: Mapping[str, Any] | Sequence[Any]) -> list[Any]:
    """The caller's values in signature order, from a dict by name or a list."""
    kind = type(inputs)
    if kind is dict and len(inputs) == len(specs):  # the common call: try it without the checks' sets
        try:
            return [inputs[s.name] for s in specs]  # as many keys as names, each found: exactly the names
        except KeyError:
            pass  # the checks below name what is wrong
    elif (kind is list or kind is tuple) and len(inputs) == len(specs):
        # The other common call, decided before ``isinstance(..., Mapping)``: an ABC's check is a few microseconds
        # when the interpreter's caches are cold, as they are after an engine's run of a millisecond.
        return list(inputs)
    if isinstance(inputs, Mapping):
        names = {s.name for s in specs}
        unknown = [k for k in inputs if k not in names]
        if unknown:
            raise InputError(f"unknown input {unknown[0]!r}; the model's inputs are: {_describe(specs)}")
        missing = [s.name for s in specs if s.name not in inputs]
        if missing:
            raise InputError(f"missing input {missing[0]!r}; the model's inputs are: {_describe(specs)}")
        values = [inputs[s.name] for s in specs]
    elif isinstance(inputs, (list, tuple)):
        if len(inputs) != len(specs):
            raise InputError(f"expected {len(specs)} inputs ({_describe(specs)}), got {len(inputs)}")
        values = list(inputs)
    elif isinstance(inputs, np.ndarray) and len(specs) == 1:
        values = [inputs]
    else:
        raise InputError(
            f"inputs must be a dict name -> array or a list in signature order, got {type(inputs).__name__}"
        )
    return values


def nested_list_hint(specs: Sequence[TensorSpec], inputs: Any) -> str:
    """What to add to an input error where the caller likely meant a nested Python list as the one input's value:
    ``run(x.tolist())`` is read as one value per input, so its first row became the input."""
    if (
        len(specs) == 1
        and type(inputs) in (list, tuple)
        and inputs
        and isinstance(inputs[0], (list, tuple, int, float))
    ):
        return (
            f" (the {type(inputs).__name__} was read as one value per input; to pass a nested list as the input, "
            f"wrap it: run([np.asarray(values, np.{specs[0].dtype.name})]) or run({{'{specs[0].name}': values}}))"
        )
    return ""


def bind(specs: Sequence[TensorSpec], values: Sequence[Any]) -> tuple[list[np.ndarray], dict[str, int]]:
    """Inputs in signature order as read-only arrays, and the size each symbolic dim took."""
    bound: dict[str, int] = {}
    arrays = []
    for spec, value in zip(specs, values):
        if type(value) is np.ndarray and value.dtype == spec.dtype:  # the common case: nothing to convert
            _check_shape(spec, value, bound)
            arrays.append(_read_only(value))
            continue
        array = _coerce(spec, value)
        _check_shape(spec, array, bound)
        arrays.append(array if _on_device(array) else _read_only(array))
    return arrays, bound


def check_outputs(specs: Sequence[TensorSpec], outputs: Sequence[Any], bound: dict[str, int]) -> list[np.ndarray]:
    """The outputs as fresh arrays the caller owns, each checked against its spec.

    A plan's result may be read-only (a constant, an input), the same array twice,
    or not what the signature promises when the bundle lies: any of these must
    reach the caller neither aliased nor mistyped. Honest plans already return
    fresh arrays, so this costs a few attribute reads per output.
    """
    if len(outputs) != len(specs):
        raise ExecutionError(f"the plan produced {len(outputs)} outputs, the signature declares {len(specs)}")
    bound = dict(bound)
    owners: set[int] = set()
    checked = []
    for spec, value in zip(specs, outputs):
        if _on_device(value):  # a fresh GPU result of this run (the execution layer made sure of it)
            if value.dtype != spec.dtype or value.ndim != len(spec.shape) or not _dims_match(spec, value.shape, bound):
                raise ExecutionError(f"output '{spec.name}' is a GPU array {value.dtype.name}{list(value.shape)}, "
                                     f"the signature declares {spec.dtype.name}[{','.join(str(d) for d in spec.shape)}]")  # fmt: skip
            checked.append(value)
            continue
        if type(value) is not np.ndarray:
            if not isinstance(value, (np.ndarray, np.generic)):
                raise ExecutionError(f"output '{spec.name}' is a {type(value).__name__}, not an array")
            value = np.asarray(value)
        if value.dtype != spec.dtype or (
            value.shape != spec.shape  # equal: every dim fixed and as declared (the common case)
            and (value.ndim != len(spec.shape) or not _dims_match(spec, value.shape, bound))
        ):
            raise ExecutionError(
                f"output '{spec.name}' is {value.dtype.name}{list(value.shape)}, the signature declares "
                f"{spec.dtype.name}[{','.join(str(d) for d in spec.shape)}]"
                + (f" with {', '.join(f'{k} = {v}' for k, v in bound.items())}" if bound else "")
            )
        owner = id(value if value.base is None else value.base)
        if not value.flags.writeable or owner in owners:
            value = value.copy()
            owner = id(value)
        owners.add(owner)
        checked.append(value)
    return checked


def _dims_match(spec: TensorSpec, shape: tuple[int, ...], bound: dict[str, int]) -> bool:
    for want, got in zip(spec.shape, shape):
        if isinstance(want, str):
            if bound.setdefault(want, got) != got:
                return False
        elif want != got:
            return False
    return True
