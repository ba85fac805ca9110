"""A delegate region's host plan, written as its ``fallback`` and ``fallback_weights`` payloads.

TensorRT and onnxruntime modules both carry one (runtime_lite/backends/fallback.py
reads it back): the region runs on the host where the delegate cannot.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack
import numpy as np

from aot.compiler.backends.weights import constant_record
from aot.compiler.host_plan import lower_to_host_plan
from aot.ir.graph import Graph
from runtime_lite.backends.fallback import FallbackRecord
from runtime_lite.format.records import ConstantRecord


@dataclass
class HostFallback:
    """The payloads, and the constants as the plan holds them (a delegate's recipe may share them)."""

    record: bytes
    weights: bytes
    arrays: list[np.ndarray]
    constants: tuple[ConstantRecord, ...]

    def payloads(self) -> dict[str, bytes]:
        payloads = {"fallback": self.record}
        if self.weights:
            payloads["fallback_weights"] = self.weights
        return payloads


def host_fallback(graph: Graph) -> HostFallback:
    lowered = lower_to_host_plan(graph)
    weights = bytearray()
    constants = tuple(constant_record(weights, array) for array in lowered.constants)
    record = FallbackRecord(plan=lowered.plan, constants=constants).to_record()
    arrays = [np.asarray(a) for a in lowered.constants]
    return HostFallback(msgpack.packb(record, use_bin_type=True), bytes(weights), arrays, constants)
