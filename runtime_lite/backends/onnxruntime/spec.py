"""What an onnxruntime module record says: its region's signature and where each recipe weight lies.

Written by ``aot`` (aot/compiler/backends/onnxruntime/codegen.py), read here field by
field. The recipe itself holds no weights: each of its initializers is an
external-data placeholder (``recipe_check.PLACEHOLDER``) that :class:`WeightRef`
resolves to an array in one of the module's payloads, viewed in place:

* ``fallback_weights``: the region's host-plan constants (most weights: shared, stored once);
* ``recipe_weights``: the few arrays only the recipe needs (``recipe_constants``).
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime_lite import format as fmt
from runtime_lite.errors import BundleError
from runtime_lite.format.records import ConstantRecord
from runtime_lite.format.schema import INT, STR, ListOf, Nested, Record, TensorSpecs, declare
from runtime_lite.format.signature import TensorSpec

#: Payloads a weight may live in.
WEIGHT_PAYLOADS = ("fallback_weights", "recipe_weights")
#: What a recipe computes in: float32, or int8 between explicit Q/DQ (``int8.py`` picks its kernels at load).
PRECISIONS = ("fp32", "int8")


@dataclass(frozen=True)
class WeightRef(Record):
    """One recipe initializer: its name, and the constant (by index) of ``payload`` that holds its data."""

    name: str = declare(STR)
    payload: str = declare(STR)
    constant: int = declare(INT)

    def check(self, field: str) -> None:
        if self.payload not in WEIGHT_PAYLOADS:
            raise BundleError(f"bundle field '{field}.payload' = {self.payload!r}, not one of {WEIGHT_PAYLOADS}")
        if self.constant < 0:
            raise BundleError(f"bundle field '{field}.constant' = {self.constant} is negative")


@dataclass(frozen=True, kw_only=True)
class OnnxRuntimeSpecs(Record):
    """An onnxruntime module's ``compile_specs``."""

    FORMAT = fmt.ONNXRUNTIME_RECIPE

    format: str = declare(STR, default=fmt.ONNXRUNTIME_RECIPE)
    region: str = declare(STR, default="onnxruntime")
    inputs: tuple[TensorSpec, ...] = declare(TensorSpecs())
    outputs: tuple[TensorSpec, ...] = declare(TensorSpecs())
    weights: tuple[WeightRef, ...] = declare(ListOf(Nested(WeightRef)), default=())
    #: The records of the arrays in ``recipe_weights``.
    recipe_constants: tuple[ConstantRecord, ...] = declare(ListOf(Nested(ConstantRecord)), default=())
    precision: str = declare(STR, default="fp32", omit_default=True)

    def check(self, field: str) -> None:
        if self.precision not in PRECISIONS:
            raise BundleError(f"bundle field '{field}.precision' = {self.precision!r}, not one of {PRECISIONS}")


__all__ = ["OnnxRuntimeSpecs", "PRECISIONS", "WeightRef", "WEIGHT_PAYLOADS"]
