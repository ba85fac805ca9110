"""The TensorRT backend, run side: an engine from the bundle, else from the cache, else the host.

A TensorRT module record carries the recipe (ONNX, weights inside), engines
tagged with what they were built for, and a host plan of the same region. At
``init`` the backend settles, once, where the region will run, and logs it:

1. an engine from the bundle whose tags fit this GPU and TensorRT, if TensorRT
   deserializes it (it returns None for an engine it cannot run);
2. else the engine cache, by the content-addressed key of recipe + settings +
   this device; a hit is verified by its sha256;
3. else, when the deployment allows building (``load(..., backend_options={"tensorrt":
   {"allow_engine_build": True}})`` or ``AOT_ALLOW_ENGINE_BUILD=1``), a build from the
   recipe into the cache, once across processes;
4. else the recipe on onnxruntime's CPU provider, where onnxruntime is installed
   (``onnxruntime_fallback``, on by default; the recipe is checked first, as an
   onnxruntime module's is, and the session takes the onnxruntime backend's load options,
   ``--backend-option onnxruntime.threads=2`` and the int8 kernels included);
5. else the host plan, with numpy: slower, but the bundle still runs, correctly,
   on a machine with no GPU at all.

Nothing here imports tensorrt or cuda-python until a TensorRT module is loaded.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime_lite.backends import Backend, BackendContext, Where, register_backend
from runtime_lite.backends.fallback import fallback_plan
from runtime_lite.backends.options import Option, boolean, env_flag, path
from runtime_lite.backends.tensorrt.spec import (
    BuildSettings,
    DeviceSignature,
    EngineRecord,
    TensorRTSpecs,
    engine_fits,
    profiles,
)
from runtime_lite.errors import BundleError
from runtime_lite.execution.device import DeviceArray, current_run, is_device_array, to_host
from runtime_lite.format.signature import TensorSpec

logger = logging.getLogger("runtime_lite.tensorrt")

#: Where this reader's BundleErrors point: ``bundle field 'tensorrt.compile_specs.inputs[0]' ...``.
SPECS_FIELD = "tensorrt.compile_specs"
SPECS_PAYLOAD = "tensorrt.payloads.recipe"

#: What a deployment may allow at load: ``load(path, backend_options={"tensorrt": {...}})``.
LOAD_OPTIONS = (
    Option(
        "allow_engine_build",
        boolean,
        env_flag("AOT_ALLOW_ENGINE_BUILD"),
        "build a missing engine from the bundle's recipe into the engine cache (default: $AOT_ALLOW_ENGINE_BUILD)",
    ),
    Option("cache_dir", path, None, "the engine cache directory (default: $AOT_CACHE_DIR, else the XDG cache dir)"),
    Option(
        "allow_version_compatible",
        boolean,
        False,
        "load version-compatible engines, which run host code embedded in the engine",
    ),
    Option("cuda_graphs", boolean, False, "capture each input shape's engine launch in a CUDA graph and replay it"),
    Option(
        "onnxruntime_fallback",
        boolean,
        env_flag("AOT_ONNXRUNTIME_FALLBACK", default=True),
        "where no engine fits, run the recipe on onnxruntime's CPU provider (if installed) before the host plan "
        "(default: on, unless $AOT_ONNXRUNTIME_FALLBACK=0)",
    ),
)


def _engines(engines: tuple[EngineRecord, ...], payloads: dict[str, memoryview]) -> list[tuple[dict, memoryview]]:
    """(tags, engine blob) of each engine record, whose payload the module must have."""
    for i, engine in enumerate(engines):
        if engine.payload not in payloads:
            raise BundleError(
                f"bundle field '{SPECS_FIELD}.engines[{i}].payload' names payload {engine.payload!r}, "
                "which the module lacks"
            )
    return [(engine.tags, payloads[engine.payload]) for engine in engines]


class TensorRTModule:
    """One TensorRT region, resolved at load to an engine runner or its host plan."""

    def __init__(
        self,
        payloads: dict[str, memoryview],
        specs: dict[str, Any],
        options: dict[str, Any],
        onnxruntime_options: dict[str, Any] | None = None,
    ):
        record = TensorRTSpecs.from_record(specs, SPECS_FIELD)  # IncompatiblePayload for another format
        self.id = record.region
        self.inputs: tuple[TensorSpec, ...] = record.inputs
        self.outputs: tuple[TensorSpec, ...] = record.outputs
        self.settings: BuildSettings = record.settings
        self.profile = record.profile
        if "recipe" not in payloads:
            raise BundleError(f"bundle field 'tensorrt.payloads': module {self.id!r} has no 'recipe' payload")
        self.recipe = payloads["recipe"]
        self.engines = _engines(record.engines, payloads)
        self.fallback, _ = fallback_plan(payloads, self.id, "tensorrt", (len(self.inputs), len(self.outputs)))
        self.cuda_graphs = bool(options.get("cuda_graphs"))
        self.runner, self.placement = self._resolve(options)
        self.cpu_session = None
        if self.runner is None and options["onnxruntime_fallback"] is True:
            self.cpu_session, self.placement = self._on_onnxruntime(self.placement, onnxruntime_options)
        #: "tensorrt" with an engine, "onnxruntime" with its recipe there, "host" on the fallback plan (the
        #: module's load warns or refuses; see placement.py)
        self.runs_on = (
            "tensorrt" if self.runner is not None else "onnxruntime" if self.cpu_session is not None else "host"
        )

    def _resolve(self, options: dict[str, Any]) -> tuple[Any, str]:
        """(engine runner or None, where the region runs and why): the four steps of the module docstring."""
        from runtime_lite.backends.tensorrt.gpu import EngineIncompatible, GpuUnavailable, probe

        try:
            device, _, _ = probe()
        except GpuUnavailable as e:
            return None, f"on the host (no GPU engine possible: {e})"
        reasons = []
        for i, (tags, blob) in enumerate(self.engines):
            why = engine_fits(tags, device, options["allow_version_compatible"])
            if why is None:
                try:
                    return self._runner(blob, tags), f"on {device.gpu} with engine {i} from the bundle"
                except EngineIncompatible as e:
                    why = str(e)
            reasons.append(f"engine {i}: {why}")
        return self._from_cache(device, options, reasons)

    def _from_cache(self, device: DeviceSignature, options: dict[str, Any], reasons: list[str]) -> tuple[Any, str]:
        from runtime_lite.backends.tensorrt.builder import EngineBuildError, cached_engine
        from runtime_lite.backends.tensorrt.engine_cache import EngineCache
        from runtime_lite.backends.tensorrt.gpu import EngineIncompatible

        # An engine built or cached here is for this TensorRT: it embeds host code only if the caller trusts that.
        host_code_ok = options["allow_version_compatible"] or self.settings.exclude_lean_runtime  # none inside those
        settings = dataclasses.replace(
            self.settings,
            version_compatible=self.settings.version_compatible and host_code_ok,
            exclude_lean_runtime=self.settings.exclude_lean_runtime and host_code_ok,
        )
        profile = profiles(self.inputs, settings, self.profile)
        recipe = bytes(self.recipe)
        cache = EngineCache(options["cache_dir"])
        trusted = {"version_compatible": settings.version_compatible,
                   "exclude_lean_runtime": settings.exclude_lean_runtime}  # fmt: skip
        key, data, _ = cached_engine(cache, recipe, settings, profile, device, label=self.id, build=False)
        if data is not None:
            try:
                runner = self._runner(data, trusted)
                return runner, f"on {device.gpu} with engine {key[:12]} from the cache {cache.root}"
            except EngineIncompatible as e:
                cache.drop(key)  # TensorRT refuses it here: a rebuild must not be handed the same bytes
                reasons.append(f"cache entry {key[:12]}: {e}")
        why = "; ".join(reasons) or "the bundle has no engines"
        if not options["allow_engine_build"]:
            return None, (
                f"on the host: no engine fits {device} ({why}); "
                "load with backend_options={'tensorrt': {'allow_engine_build': True}} (or set "
                "AOT_ALLOW_ENGINE_BUILD=1) to build one into the cache"
            )
        try:
            key, data, hit = cached_engine(cache, recipe, settings, profile, device, label=self.id, build=True)
            how = "from the cache" if hit else "built from the recipe into the cache"
            return self._runner(data, trusted), f"on {device.gpu} with engine {key[:12]} {how} {cache.root}"
        except (EngineBuildError, EngineIncompatible, OSError) as e:
            return None, f"on the host: building an engine for {device} failed: {e}"

    def _on_onnxruntime(self, why: str, given: dict[str, Any] | None) -> tuple[Any, str]:
        """(an onnxruntime session over the recipe, or None; where the region runs and why). ``given``: the
        onnxruntime backend's load options, which this session takes as an onnxruntime module's does."""
        from runtime_lite.backends.onnxruntime import (
            OnnxRuntimeUnavailable,
            int8_kernels,
            load_settings,
            recipe_session,
            session_placement,
        )

        settings = load_settings(given)
        int8 = int8_kernels(settings) if self.settings.precision == "int8" else None
        start = time.perf_counter()
        try:  # the recipe is checked as an onnxruntime module's is (BundleError for a hostile one)
            session = recipe_session(self.recipe, {}, self.inputs, self.outputs, settings, SPECS_PAYLOAD, int8)
        except OnnxRuntimeUnavailable as e:
            return None, f"{why}; not on onnxruntime either: {e}"
        where = session_placement(session, settings, time.perf_counter() - start, int8)
        return session, f"{where}{why.removeprefix('on the host')}"

    def _runner(self, blob: Any, tags: dict[str, Any]) -> Any:
        from runtime_lite.backends.tensorrt.gpu import EngineRunner

        return EngineRunner(
            blob,
            [s.name for s in self.inputs],
            [s.name for s in self.outputs],
            allow_host_code=bool(tags.get("version_compatible")) and not tags.get("exclude_lean_runtime"),
            cuda_graphs=self.cuda_graphs,
        )

    def close(self) -> None:
        """Free the engine and its device buffers now rather than at garbage collection."""
        self.cpu_session = None
        runner, self.runner = self.runner, None
        if runner is not None:
            runner.close()

    def run(self, inputs: Sequence[np.ndarray], trace: list | None = None) -> list[np.ndarray]:
        start = time.perf_counter() if trace is not None else 0.0
        device = current_run()  # GPU arrays in or out (Module.run's outputs_on/stream): see execution/device.py
        if self.runner is not None:
            options = {} if device is None else {"outputs_on": device.outputs_on, "stream": device.stream_argument}
            outputs = self.runner.run(inputs, **options)
            outputs = [o if isinstance(o, DeviceArray) else o.astype(s.dtype, copy=False)
                       for o, s in zip(outputs, self.outputs)]  # fmt: skip
        elif self.cpu_session is not None:  # onnxruntime's CPU provider reads host memory only
            outputs = self.cpu_session.run([to_host(x) if is_device_array(x) else x for x in inputs])
        else:
            outputs = self.fallback.execute(list(inputs), device=device is not None)
        if trace is not None:
            placement = "engine" if self.runner is not None else self.runs_on
            trace.append(
                {"backend": "tensorrt", "module": self.id, "node": self.id, "placement": placement,
                 "start_s": start, "wall_s": time.perf_counter() - start}
            )  # fmt: skip
        return outputs


class TensorRTBackend(Backend):
    name = "tensorrt"
    load_options = LOAD_OPTIONS
    accepts_device_arrays = True  # an engine reads GPU inputs in place; its host fallback converts them itself

    def is_available(self) -> bool:
        return True  # a region without a usable engine runs its host plan

    def init(self, context: BackendContext, payloads: dict[str, memoryview], compile_specs: dict[str, Any]):
        return TensorRTModule(payloads, compile_specs, dict(context.options), context.given.get("onnxruntime"))

    def execute(self, context: BackendContext, handle: TensorRTModule, inputs: Sequence[np.ndarray]):
        return handle.run(inputs, context.trace)

    def close(self, handle: TensorRTModule) -> None:
        handle.close()

    def describe(self, handle: TensorRTModule) -> Where:
        return Where(handle.runs_on, handle.placement)


BACKEND = register_backend(TensorRTBackend())
