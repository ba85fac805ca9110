"""OpenVINO itself: imported here only, inside the functions that use it (it is an optional extra).

``runtime-lite[openvino]`` installs it. A recipe reaches :class:`Engine` only after
``recipe_check.check_recipe`` accepted it (the same check onnxruntime's recipes pass);
its weights are then read by OpenVINO where the bundle keeps them (memory_recipe.py).

The CPU plugin is told to compute in float32 (``INFERENCE_PRECISION_HINT``): on CPUs
with AMX or AVX512-BF16 its default is bfloat16, which moved a 4096-wide dense layer
0.4% (relative L2) away from the model's arithmetic. ``precision=bf16`` asks for that
speed explicitly.

A run keeps the load's budgets: its activations must fit ``max_memory`` (footprint.py,
as for onnxruntime: the recipe is the same ONNX), and past ``max_run_seconds`` the
request is cancelled (``InferRequest.cancel``, after ``wait_for`` timed out).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime_lite.backends.onnxruntime.footprint import Footprint, check_run
from runtime_lite.backends.openvino.float_kernels import dequantize_weights, unquantize_activations
from runtime_lite.backends.openvino.memory_recipe import in_memory
from runtime_lite.execution.limits import current_budget

#: ``hint`` load option -> OpenVINO's PERFORMANCE_HINT.
HINTS = {"latency": "LATENCY", "throughput": "THROUGHPUT"}
#: ``precision`` load option -> OpenVINO's INFERENCE_PRECISION_HINT.
PRECISIONS = {"f32": "f32", "bf16": "bf16", "f16": "f16"}
#: The CPU plugin's switch for its low-precision transformations (which turn a QDQ recipe's Q/DQ around a
#: convolution or matrix product into int8 kernels); not among its documented properties. Where OpenVINO will not
#: compile a recipe with it, ``EngineSettings.low_precision_fallback`` decides what happens.
LOW_PRECISION_OFF = ("LP_TRANSFORMS_MODE", "NO")


class OpenVinoUnavailable(Exception):
    """OpenVINO cannot run the recipe here (not installed, broken, or it refused the recipe); the message says which."""


def import_openvino() -> Any:
    """The openvino module, or OpenVinoUnavailable with the reason in a few words."""
    try:
        import openvino
    except ImportError as e:
        raise OpenVinoUnavailable(f"openvino is not installed ({e}); pip install 'runtime-lite[openvino]'") from None
    except Exception as e:  # a broken install (missing shared library, ABI mismatch)
        raise OpenVinoUnavailable(f"openvino failed to import: {type(e).__name__}: {e}") from None
    return openvino


_CORES: dict[int, Any] = {}


def _core(ov: Any) -> Any:
    """One ``ov.Core`` per process: creating one looks for plugins (a cold start pays it once), and reading and
    compiling models through it is thread-safe. Per process id: a forked child that inherited its parent's Core
    inherits none of its threads, and hangs in it (the hostile-bundle harness forks its workers)."""
    pid = os.getpid()
    core = _CORES.get(pid)
    if core is None:
        _CORES.clear()
        core = _CORES[pid] = ov.Core()
    return core


@dataclass(frozen=True)
class EngineSettings:
    """The CPU plugin's knobs, from the backend's load options."""

    threads: int = 0
    hint: str = "latency"
    precision: str = "f32"
    #: False: never hand the recipe to OpenVINO (the load option ``enabled``).
    enabled: bool = True
    #: Pin the inference threads to cores (ENABLE_CPU_PINNING); None: OpenVINO's own choice (pinned on Linux).
    pinning: bool | None = None
    #: False: an int8 recipe's Q/DQ run as float ops (the CPU plugin's low-precision transformations off), and
    #: activations meeting int8 weights stay float (its dynamic quantization off: group size 0).
    low_precision: bool = True
    #: Where OpenVINO will not compile the recipe with ``low_precision`` off: True compiles it with them on (a
    #: recipe whose only int8 are weights: its accuracy does not hang on them); False refuses, OpenVinoUnavailable
    #: (a static recipe: its int8 kernels were chosen against, and on a CPU without VNNI they saturate).
    low_precision_fallback: bool = True
    #: An int8 recipe on float kernels: each activation's Q/DQ pair dropped and the int8 weights dequantized once
    #: (their rounding kept), as onnxruntime's float kernels run it (float_kernels.py says why).
    float_kernels: bool = False

    def config(self) -> dict[str, str]:
        config = {"PERFORMANCE_HINT": HINTS[self.hint], "INFERENCE_PRECISION_HINT": PRECISIONS[self.precision]}
        if self.threads:
            config["INFERENCE_NUM_THREADS"] = str(self.threads)
        if self.pinning is not None:
            config["ENABLE_CPU_PINNING"] = "YES" if self.pinning else "NO"
        if not self.low_precision:  # and no run-time quantization of the activations int8 weights meet
            config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = "0"
            config[LOW_PRECISION_OFF[0]] = LOW_PRECISION_OFF[1]
        return config


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("Exception from")]
    return (lines[0] if lines else type(error).__name__)[:300]


class Engine:
    """One compiled model over a checked recipe; ``run`` takes and returns numpy arrays in signature order.

    Each thread gets its own infer request (a request is not thread-safe; the compiled model is)."""

    def __init__(
        self,
        recipe: bytes | memoryview,
        weights: Mapping[str, np.ndarray],
        input_names: Sequence[str],
        output_names: Sequence[str],
        settings: EngineSettings,
        footprint: Footprint | None = None,
    ):
        if not settings.enabled:
            raise OpenVinoUnavailable("openvino is disabled by the load option openvino.enabled=false")
        ov = import_openvino()
        self.version = ov.get_version().split("-")[0]
        #: The arrays OpenVINO reads in place: referenced as long as the engine.
        self._weights = dict(weights)
        core = _core(ov)
        #: Whether an int8 recipe's low-precision transformations ran (False only where asked off and obeyed).
        self.low_precision = settings.low_precision
        try:
            model = core.read_model(in_memory(recipe, self._weights))
            if settings.float_kernels:  # an int8 recipe as onnxruntime's float kernels run it (float_kernels.py)
                unquantize_activations(model)
                dequantize_weights(model, ov)
            try:
                self._compiled = core.compile_model(model, "CPU", settings.config())
            except Exception as e:
                if settings.low_precision:
                    raise
                if not settings.low_precision_fallback:
                    raise OpenVinoUnavailable(
                        f"openvino {self.version} would not compile the int8 recipe with its low-precision "
                        f"transformations off ({_first_line(e)}), and its int8 kernels were chosen against here"
                    ) from None
                self.low_precision = True  # as describe says
                config = {k: v for k, v in settings.config().items() if k != LOW_PRECISION_OFF[0]}
                self._compiled = core.compile_model(model, "CPU", config)
        except OpenVinoUnavailable:
            raise
        except Exception as e:  # an OpenVINO too old for the recipe's opset or its in-memory weights, an op it lacks
            raise OpenVinoUnavailable(f"openvino {self.version} refused the recipe: {_first_line(e)}") from None
        ports = {name: i for i, port in enumerate(self._compiled.inputs) for name in port.get_names()}
        outs = {name: i for i, port in enumerate(self._compiled.outputs) for name in port.get_names()}
        try:
            self._input_ports = [ports[name] for name in input_names]
            self._output_ports = [outs[name] for name in output_names]
        except KeyError as e:
            raise OpenVinoUnavailable(f"the compiled recipe has no port named {e.args[0]!r}") from None
        self.threads = int(self._compiled.get_property("INFERENCE_NUM_THREADS"))
        self._footprint = footprint
        self._local = threading.local()

    def _request(self) -> Any:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self._compiled.create_infer_request()
        return request

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        budget = current_budget()
        check_run(self._footprint, inputs, "openvino", budget.max_memory)
        request = self._request()
        self._feed(request, inputs)
        try:
            if budget.deadline is None:
                request.infer(share_outputs=True)  # views: the copies below are the only ones
            else:
                self._run_until(request, budget.deadline)
        except RuntimeError as e:  # OpenVINO's own failure: several lines of its sources; the first that says why
            raise RuntimeError(f"openvino failed the run: {_first_line(e)}") from None
        return [request.get_output_tensor(i).data.copy() for i in self._output_ports]

    def _feed(self, request: Any, inputs: Sequence[np.ndarray]) -> None:
        """Copy each input into the request's own tensor. ``infer(inputs)`` would go through OpenVINO's Python
        dispatcher (~20 us a call, half the whole per-call cost on a small model), and sharing the caller's
        memory needs a writeable array (the runtime hands backends read-only views)."""
        for port, value in zip(self._input_ports, inputs):
            tensor = request.get_input_tensor(port)
            data = tensor.data
            if data.shape != value.shape:  # the first run, or a symbolic dim that changed
                tensor.shape = value.shape
                data = tensor.data
            np.copyto(data, value, casting="no")

    @staticmethod
    def _run_until(request: Any, deadline: float) -> None:
        """Start the request, wait until ``deadline``, cancel it past that: OpenVINO stops between its nodes."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the run passed its max_run_seconds")
        request.start_async()
        if not request.wait_for(max(1, int(remaining * 1000))):
            request.cancel()
            try:
                request.wait()
            except Exception:
                pass  # the cancelled request's own error: the timeout is the news
            raise TimeoutError("the run passed its max_run_seconds (openvino cancelled it)")

    def close(self) -> None:
        self._compiled = None
        self._local = threading.local()
        self._weights = {}


__all__ = [
    "HINTS",
    "LOW_PRECISION_OFF",
    "PRECISIONS",
    "Engine",
    "EngineSettings",
    "OpenVinoUnavailable",
    "import_openvino",
]
