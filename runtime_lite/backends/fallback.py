"""A delegate region's host plan: what runs when the delegate cannot (no GPU engine, no onnxruntime).

TensorRT and onnxruntime modules carry the same two payloads for it:
``fallback`` (a msgpack :class:`FallbackRecord`: the region's host plan and its
constants' records) and ``fallback_weights`` (the constants' bytes, each viewed
in place at load). The onnxruntime recipe's weights are views of these same
bytes, so a model's weights are stored once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runtime_lite import format as fmt
from runtime_lite.errors import BundleError
from runtime_lite.execution.plan import HostPlan
from runtime_lite.format.reader import decode_record
from runtime_lite.format.records import ConstantRecord, PlanRecord
from runtime_lite.format.schema import STR, ListOf, Nested, Record, declare


@dataclass(frozen=True, kw_only=True)
class FallbackRecord(Record):
    """A delegate module's ``fallback`` payload (msgpack): the region's host plan, run where the delegate cannot.

    Its constants are arrays in the ``fallback_weights`` payload.
    """

    FORMAT = fmt.HOST_PLAN

    format: str = declare(STR, default=fmt.HOST_PLAN)
    plan: PlanRecord = declare(Nested(PlanRecord))
    constants: tuple[ConstantRecord, ...] = declare(ListOf(Nested(ConstantRecord)))


def fallback_constants(payloads: dict[str, memoryview], module_id: str, backend: str) -> tuple[PlanRecord, list]:
    """(the plan record, its constants viewed read-only in ``fallback_weights``), checked field by field."""
    field = f"{backend}.fallback"
    if "fallback" not in payloads:
        raise BundleError(f"bundle field '{backend}.payloads': module {module_id!r} has no 'fallback' payload")
    raw = decode_record(bytes(payloads["fallback"]), f"bundle field '{field}'")
    record = FallbackRecord.from_record(raw, field)
    weights = payloads.get("fallback_weights")
    constants: list[np.ndarray] = [c.view(weights, f"{field}.constants[{i}]") for i, c in enumerate(record.constants)]
    return record.plan, constants


def fallback_plan(
    payloads: dict[str, memoryview], module_id: str, backend: str, signature: tuple[int, int] | None = None
) -> tuple[HostPlan, list[np.ndarray]]:
    """The region's host plan (and its constants, for a delegate to share); ``signature`` = (inputs, outputs)."""
    plan_record, constants = fallback_constants(payloads, module_id, backend)
    return bind_fallback(plan_record, constants, module_id, backend, signature), constants


def bind_fallback(
    plan_record: PlanRecord,
    constants: list[np.ndarray],
    module_id: str,
    backend: str,
    signature: tuple[int, int] | None = None,
) -> HostPlan:
    """The host plan of ``fallback_constants``'s record, every instruction checked and bound."""
    plan = HostPlan(plan_record, constants, field=f"{backend}.fallback.plan")
    if signature is not None and (len(plan.input_slots), len(plan.output_slots)) != signature:
        raise BundleError(
            f"bundle field '{backend}.fallback.plan': module {module_id!r}'s fallback plan does not match "
            "its inputs/outputs"
        )
    return plan


__all__ = ["FallbackRecord", "bind_fallback", "fallback_constants", "fallback_plan"]
