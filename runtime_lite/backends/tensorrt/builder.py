"""Build a TensorRT engine from a recipe: the one builder ``aot-build`` and deployed runtimes share.

Written for TensorRT 10 and 11: the network is created strongly typed where
the version has the flag (11 removed the FP16/INT8 builder flags; precision is in
the recipe), the recipe bytes go through ``OnnxParser`` (its errors name the node),
the config gets the workspace limit, one optimization profile, the hardware
compatibility level, the version-compatible flag (and exclude-lean-runtime) when asked, and a timing cache
kept beside the engine cache so later builds are faster.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from runtime_lite.backends.tensorrt.engine_cache import EngineCache, engine_key
from runtime_lite.backends.tensorrt.gpu import probe
from runtime_lite.backends.tensorrt.lean import can_build
from runtime_lite.backends.tensorrt.spec import BuildSettings, DeviceSignature, ingredients


class EngineBuildError(RuntimeError):
    """TensorRT could not parse or build a recipe; the message names the region and the node."""


def _progress_monitor(trt: Any, label: str, stream: TextIO | None) -> Any:
    """A ``trt.IProgressMonitor`` that draws one line per phase on ``stream`` (None: silent)."""

    class Monitor(trt.IProgressMonitor):
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)
            self.steps: dict[str, int] = {}
            self.start = time.perf_counter()

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            self.steps[phase_name] = num_steps

        def step_complete(self, phase_name: str, step: int) -> bool:
            if stream is not None:
                total = self.steps.get(phase_name, 0) or 1
                done = int(20 * (step + 1) / total)
                elapsed = time.perf_counter() - self.start
                stream.write(f"\r  {label}: {phase_name[:28]:<28} [{'#' * done:<20}] {elapsed:5.1f} s")
                stream.flush()
            return True  # False would cancel the build

        def phase_finish(self, phase_name: str) -> None:
            self.steps.pop(phase_name, None)
            if stream is not None and not self.steps:
                stream.write("\n")
                stream.flush()

    return Monitor()


def build_engine(
    recipe: bytes,
    settings: BuildSettings,
    profile: dict[str, list[list[int]]],
    *,
    label: str = "engine",
    timing_cache: TimingCache | None = None,
    progress: TextIO | None = sys.stderr,
) -> bytes:
    """Serialized engine bytes for ``recipe`` on this machine's GPU; EngineBuildError on failure.

    ``timing_cache`` is read before the build and written after it, through the engine
    cache's directory handling (no symlinks followed, the read bounded in size).
    """
    _, trt, _ = probe()
    if not can_build(trt):
        raise EngineBuildError(
            f"{label}: the TensorRT here is the lean runtime ({trt.__name__}), which runs engines but cannot build "
            "them; build with --version-compatible --exclude-lean-runtime where the full TensorRT is installed"
        )
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    strongly_typed = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    network = builder.create_network(0 if strongly_typed is None else 1 << int(strongly_typed))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(bytes(recipe)):
        errors = []
        for i in range(parser.num_errors):
            error = parser.get_error(i)
            errors.append(f"node {error.node_name() or error.node()} ({error.node_operator()}): {error.desc()}")
        raise EngineBuildError(f"{label}: TensorRT's ONNX parser rejected the recipe: {'; '.join(errors)}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, settings.workspace)
    optimization = builder.create_optimization_profile()
    for name, (lo, opt, hi) in profile.items():
        optimization.set_shape(name, lo, opt, hi)
    config.add_optimization_profile(optimization)
    if settings.hardware_compatibility == "ampere_plus":
        config.hardware_compatibility_level = trt.HardwareCompatibilityLevel.AMPERE_PLUS
    if settings.version_compatible:
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
    if settings.exclude_lean_runtime:  # the engine then runs only where this TensorRT version's lean runtime is
        config.set_flag(trt.BuilderFlag.EXCLUDE_LEAN_RUNTIME)
    if strongly_typed is None and settings.precision == "fp16":  # pre-strong-typing TensorRT needs the flag
        config.set_flag(trt.BuilderFlag.FP16)
    if strongly_typed is None and settings.precision == "int8" and hasattr(trt.BuilderFlag, "INT8"):
        config.set_flag(trt.BuilderFlag.INT8)  # explicit Q/DQ: the scales come from the recipe, no calibrator
    cache_bytes = timing_cache.read() if timing_cache is not None else b""
    cache = config.create_timing_cache(cache_bytes)
    config.set_timing_cache(cache, ignore_mismatch=True)
    if hasattr(config, "progress_monitor"):
        config.progress_monitor = _progress_monitor(trt, label, progress)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineBuildError(f"{label}: TensorRT could not build an engine (see the TensorRT log above)")
    if timing_cache is not None:
        timing_cache.write(bytes(config.get_timing_cache().serialize()))
    return bytes(serialized)


@dataclass(frozen=True)
class TimingCache:
    """One TensorRT timing cache file kept under an engine cache's ``timing`` directory."""

    cache: EngineCache
    name: str

    def read(self) -> bytes:
        return self.cache.read_timing(self.name)

    def write(self, data: bytes) -> None:
        self.cache.write_timing(self.name, data)


def cached_engine(
    cache: EngineCache,
    recipe: bytes,
    settings: BuildSettings,
    profile: dict[str, list[list[int]]],
    device: DeviceSignature,
    *,
    label: str,
    build: bool,
    progress: TextIO | None = sys.stderr,
) -> tuple[str, bytes | None, bool]:
    """(key, engine or None, hit): the cache entry for this recipe on ``device``, built on a miss if ``build``.

    The one path by which aot-build and a deployed runtime reach the cache, so
    both compute the same key and share one timing cache per TensorRT and GPU.
    """
    ingredient = ingredients(settings, profile, device)
    key = engine_key(recipe, ingredient)
    if not build:
        data = cache.get(key)
        return key, data, data is not None
    timing = TimingCache(cache, f"trt{device.tensorrt}-sm{device.compute_capability}.cache")
    data, hit = cache.get_or_build(
        key,
        lambda: build_engine(recipe, settings, profile, label=label, timing_cache=timing, progress=progress),
        ingredient,
    )
    return key, data, hit
