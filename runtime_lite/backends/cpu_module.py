"""What the OpenVINO and ``auto`` backends share: a region that runs on a CPU engine, else on its host plan.

A module (``init``'s handle) holds ``engine`` (anything with ``run(inputs)`` and ``close()``;
None where the region fell back), ``bind_host`` (binds the region's host plan: at load where
there is no engine, else on the first empty input, which OpenVINO's CPU plugin refuses:
"Batch size is zero"), ``runs_on`` and ``placement`` (``describe``); the backend only hands
calls through.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from runtime_lite.backends import Backend, BackendContext, Where


class CpuEngineModule:
    """A region's engine or host plan; subclasses resolve ``engine``/``fallback`` in ``__init__``."""

    backend = ""
    id: str
    engine: Any = None
    #: The host plan, bound (``bind_host()``) only where it runs: an engine rarely needs it (load time).
    fallback: Any = None
    bind_host: Callable[[], Any]
    runs_on = "host"
    placement = ""
    _binding = threading.Lock()

    def host_plan(self) -> Any:
        if self.fallback is None:
            with self._binding:
                if self.fallback is None:
                    self.fallback = self.bind_host()
        return self.fallback

    def engine_label(self) -> str:
        """What a profile's trace calls where the region ran."""
        return self.runs_on

    def close(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()

    def run(self, inputs: Sequence[np.ndarray], trace: list | None = None) -> list[np.ndarray]:
        start = time.perf_counter() if trace is not None else 0.0
        engine = self.engine
        if engine is not None and all(x.size for x in inputs):
            outputs = engine.run(inputs)
        else:
            outputs = self.host_plan().execute(list(inputs))
        if trace is not None:
            trace.append(
                {"backend": self.backend, "module": self.id, "node": self.id, "placement": self.engine_label(),
                 "start_s": start, "wall_s": time.perf_counter() - start}
            )  # fmt: skip
        return outputs


class CpuEngineBackend(Backend):
    """A backend whose modules are ``module_class(payloads, compile_specs, options)``."""

    module_class: type = CpuEngineModule
    #: As for onnxruntime: the weights are only viewed as arrays by verified records and handed to the engine
    #: as data; the recipe check reads their dtype and shape from those records, never their values.
    tensor_payloads = frozenset({"fallback_weights", "recipe_weights"})

    def is_available(self) -> bool:
        return True  # without the engine a region runs its host plan

    def init(self, context: BackendContext, payloads: dict[str, memoryview], compile_specs: dict[str, Any]):
        return self.module_class(payloads, compile_specs, dict(context.options))

    def execute(self, context: BackendContext, handle: CpuEngineModule, inputs: Sequence[np.ndarray]):
        return handle.run(inputs, context.trace)

    def close(self, handle: CpuEngineModule) -> None:
        handle.close()

    def describe(self, handle: CpuEngineModule) -> Where:
        return Where(handle.runs_on, handle.placement)


__all__ = ["CpuEngineBackend", "CpuEngineModule"]
