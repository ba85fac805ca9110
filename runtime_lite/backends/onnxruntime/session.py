"""onnxruntime itself: imported here only, inside the functions that use it (it is an optional extra).

``runtime-lite[onnxruntime]`` installs it. A recipe reaches :func:`open_session`
only after ``recipe_check.check_recipe`` accepted it; the weights the bundle
supplies are handed over as in-memory external-data files that onnxruntime reads in place
(``_weights_as_files`` says why), or as ``OrtValue``\\ s viewing the bundle's read-only blobs
where that cannot be done (``OrtValue.ortvalue_from_numpy`` wraps the array's memory, it does
not copy it).

A run keeps the load's budgets: its activations must fit ``max_memory`` (their size
comes from footprint.py before the session runs), and past ``max_run_seconds``
onnxruntime is told to stop (``RunOptions.terminate``, which its executor reads
between nodes), as the host plan stops between instructions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime_lite.backends.onnxruntime.footprint import Footprint, check_run
from runtime_lite.backends.onnxruntime.recipe_check import PLACEHOLDER
from runtime_lite.execution.limits import current_budget

#: ``optimization`` load option -> onnxruntime's GraphOptimizationLevel member.
OPTIMIZATION_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


#: onnxruntime graph transformers a recipe must not get. ``WeightBiasQuantization`` (basic level and up)
#: quantizes the float weight and bias of a Conv, Gemm or MatMul whose input is dequantized, with scales of
#: its own choosing. aot folds a quantized model's ``DequantizeLinear(int8 weight)`` into the exact float
#: weight, so that pass would quantize the weights a second time, differently: a QDQ MobileNetV2 ended 2%
#: (relative L2) away from the model's arithmetic, that of the host plan and of onnxruntime on the original.
DISABLED_OPTIMIZERS = ["WeightBiasQuantization"]


class OnnxRuntimeUnavailable(Exception):
    """onnxruntime cannot run the recipe here (not installed, broken, or it refused the recipe); the message says which."""


def import_onnxruntime() -> Any:
    """The onnxruntime module, or OnnxRuntimeUnavailable with the reason in a few words."""
    try:
        import onnxruntime
    except ImportError as e:
        raise OnnxRuntimeUnavailable(
            f"onnxruntime is not installed ({e}); pip install 'runtime-lite[onnxruntime]'"
        ) from None
    except Exception as e:  # a broken install (missing shared library, ABI mismatch)
        raise OnnxRuntimeUnavailable(f"onnxruntime failed to import: {type(e).__name__}: {e}") from None
    if "CPUExecutionProvider" not in onnxruntime.get_available_providers():
        raise OnnxRuntimeUnavailable("this onnxruntime has no CPUExecutionProvider")
    return onnxruntime


def log_severity() -> int:
    """onnxruntime's own log level: its lines go to stderr beside this runtime's, so they show only where this
    runtime's log is verbose (``-v``: its errors, ``-vv``: its warnings too, as the ``runtime_lite.onnxruntime``
    logger is set). Otherwise a run refused (``max_run_seconds``) or failing inside onnxruntime prints the one-line
    error this runtime raises, not onnxruntime's ``[E:onnxruntime:...]`` lines before it."""
    logger = logging.getLogger("runtime_lite.onnxruntime")
    return 2 if logger.isEnabledFor(logging.DEBUG) else 3 if logger.isEnabledFor(logging.INFO) else 4


@dataclass(frozen=True)
class SessionSettings:
    """The session's knobs, from the backend's load options."""

    threads: int = 0
    optimization: str = "all"
    arena: bool = True
    #: False: never hand the recipe to onnxruntime (the load option ``enabled``).
    enabled: bool = True
    #: Intra-op threads spin between runs (onnxruntime's default); False: they sleep.
    spinning: bool = True
    #: Which kernels run an int8 recipe: ``auto`` (by the CPU), ``integer`` or ``float`` (int8.py).
    int8: str = "auto"


class Session:
    """One InferenceSession over a checked recipe; ``run`` takes and returns numpy arrays in signature order."""

    def __init__(
        self,
        recipe: bytes,
        weights: Mapping[str, np.ndarray],
        input_names: Sequence[str],
        output_names: Sequence[str],
        settings: SessionSettings,
        footprint: Footprint | None = None,
        config: Mapping[str, str] | None = None,
        disabled: Sequence[str] = (),
        save_to: str | None = None,
        save_config: Mapping[str, str] | None = None,
        placeholders: Mapping[str, int] | None = None,
        files: Mapping[str, np.ndarray] | None = None,
    ):
        if not settings.enabled:
            raise OnnxRuntimeUnavailable("onnxruntime is disabled by the load option onnxruntime.enabled=false")
        ort = import_onnxruntime()
        options = ort.SessionOptions()
        options.intra_op_num_threads = settings.threads
        options.inter_op_num_threads = 1
        # A graph onnxruntime already optimized for this host (optimized.py) is opened at the same level: its
        # passes find little left to rewrite, and what a saved graph does not hold is redone (opened at
        # ``disable``, EfficientNet-B0's session ran 17% slower)
        options.graph_optimization_level = getattr(
            ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS[settings.optimization]
        )
        if save_to is not None:  # the optimized graph is written there, for later loads (optimized.py)
            options.optimized_model_filepath = save_to
            for key, value in (save_config or {}).items():
                options.add_session_config_entry(key, value)
        options.enable_cpu_mem_arena = settings.arena
        if not settings.spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        for key, value in (config or {}).items():  # e.g. an int8 recipe's kernels (int8.py)
            options.add_session_config_entry(key, value)
        options.log_severity_level = log_severity()
        if files is not None:  # a graph whose every external location is one of these (optimized.py)
            _hand_files(options, list(files), list(files.values()))
            self._values = list(files.values())
        elif (named := _weights_as_files(recipe, weights, placeholders, options)) is not None:
            recipe, self._values = named  # onnxruntime reads each weight where it lies, as from a mapped file
        else:  # OrtValues viewing the arrays (the bundle's blobs); they stay referenced as long as the session
            self._values = [ort.OrtValue.ortvalue_from_numpy(array) for array in weights.values()]
            if weights:
                options.add_external_initializers(list(weights), self._values)
        self.version = ort.__version__
        try:
            self._session = ort.InferenceSession(
                recipe, options, providers=["CPUExecutionProvider"],
                disabled_optimizers=[*DISABLED_OPTIMIZERS, *disabled],
            )  # fmt: skip
        except Exception as e:  # an onnxruntime too old for the recipe's opset, an op it lacks: the host runs it
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise OnnxRuntimeUnavailable(f"onnxruntime {self.version} refused the recipe: {first[:300]}") from None
        #: What the session was built from, as ``describe`` says it (optimized.py names a cached graph).
        self.source = "its recipe"
        #: What makes and keeps this region's optimized graph once the load is verified (optimized.py), or None.
        self.pending_graph: Any = None
        self._inputs, self._outputs = list(input_names), list(output_names)
        self._footprint, self._run_options = footprint, ort.RunOptions
        # onnxruntime's Python ``run`` checks again what ``run`` below has made sure of (every input named once,
        # numpy arrays, no OrtValue of another device) before it calls its C++ session: ~15 us a call that a
        # small model's run does not have. That call is made directly where this onnxruntime has it.
        self._run_session = getattr(self._session, "_sess", None)
        if not callable(getattr(self._run_session, "run", None)):
            self._run_session = self._session

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        budget = current_budget()
        check_run(self._footprint, inputs, "onnxruntime", budget.max_memory)
        feeds = dict(zip(self._inputs, inputs))
        if budget.deadline is None:
            return self._run_session.run(self._outputs, feeds, None)
        return self._run_until(feeds, budget.deadline)

    def _run_until(self, feeds: dict, deadline: float) -> list[np.ndarray]:
        """Run with a timer that sets ``RunOptions.terminate`` at ``deadline``: onnxruntime stops at its next node."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the run passed its max_run_seconds")
        options = self._run_options()
        timer = threading.Timer(remaining, setattr, (options, "terminate", True))
        timer.daemon = True
        timer.start()
        try:
            return self._run_session.run(self._outputs, feeds, options)
        except Exception:
            if options.terminate:
                raise TimeoutError("the run passed its max_run_seconds (onnxruntime stopped it)") from None
            raise
        finally:
            timer.cancel()

    def close(self) -> None:
        self._session = None
        self._values = []
        pending, self.pending_graph = self.pending_graph, None
        if pending is not None:  # the load failed before it was verified: no graph is kept
            pending.discard()


#: Each weight's name as an in-memory external-data file: as long as the placeholder it replaces.
_FILE_NAME = "aot-bundle-w{:06d}"


def _weights_as_files(recipe: bytes, weights: Mapping[str, np.ndarray], placeholders: Mapping[str, int] | None,
                      options: Any) -> tuple[bytes, list[np.ndarray]] | None:  # fmt: skip
    """The recipe with each placeholder's location renamed to a file of its own, those files handed to onnxruntime
    as buffers it reads in place; None where the recipe check did not place them or this onnxruntime cannot.

    Why: onnxruntime builds a session from weights handed as external data in memory as it does from a mapped
    external-data file, and faster than from ``add_external_initializers``' OrtValues (BERT-base: 0.35 against
    0.57 s in a fresh process; ResNet-50 0.15 against 0.21 s). Each renamed location is the placeholder's own
    bytes overwritten in place with a name of the same length, so no other byte of the checked recipe moves and
    every location the session reads is one of the buffers handed here (never a path onnxruntime would open).
    """
    if not weights or placeholders is None or set(placeholders) != set(weights) or len(weights) > 10**6:
        return None  # (past a million weights the names would outgrow the placeholder)
    if not reads_files_in_memory():
        return None
    if any(array.nbytes == 0 or not array.flags.c_contiguous for array in weights.values()):
        return None
    patched, mark = bytearray(recipe), PLACEHOLDER.encode()
    files, arrays = [], []
    for i, (name, array) in enumerate(weights.items()):
        at, file = placeholders[name], _FILE_NAME.format(i)
        if patched[at : at + len(mark)] != mark:
            return None  # not where the check saw it: keep the OrtValue path
        patched[at : at + len(mark)] = file.encode()
        files.append(file)
        arrays.append(array)
    _hand_files(options, files, arrays)
    return bytes(patched), arrays


def _hand_files(options: Any, names: list[str], arrays: list[np.ndarray]) -> None:
    """``arrays`` as the in-memory external-data files ``names``, which onnxruntime reads where they lie: without
    the config key it copies each one (BERT-base: 0.71-0.94 s to build its session, against 0.34-0.37 s)."""
    options.add_session_config_entry("session.use_external_initializer_file_buffers_directly", "1")
    options.add_external_initializers_from_files_in_memory(names, arrays, [a.nbytes for a in arrays])


def reads_files_in_memory() -> bool:
    """Whether this onnxruntime takes external-data files from memory (1.17 and later)."""
    return hasattr(import_onnxruntime().SessionOptions, "add_external_initializers_from_files_in_memory")


__all__ = [
    "OPTIMIZATION_LEVELS", "OnnxRuntimeUnavailable", "Session", "SessionSettings", "import_onnxruntime",
    "reads_files_in_memory",
]  # fmt: skip
