"""The ``auto`` backend, run side: each region on whichever installed CPU engine ran it fastest here.

No engine wins everywhere: onnxruntime leads on some models and CPUs, OpenVINO on others
(issue 41). An ``auto`` module (``aot-build --target auto``) carries the onnxruntime
backend's recipe, which both engines read (aot/compiler/backends/cpu_recipe.py). On the
first load on a host, each installed engine is built over it and timed on the region's
own signature (symbolic dims at a working size inside the bundle's bounds: ``SAMPLE_SIZES``) within
a small bounded budget (``runs`` timed runs or ``budget_s`` seconds per region, whichever ends
first, in two alternating passes, each engine's block settled by untimed runs first); the
fastest is kept, the others closed. The verdict is cached (verdict.py) per region, CPU,
threads and engine versions, so later loads build only the chosen engine and choose the
same; ``engine=onnxruntime|openvino`` pins it. ``describe`` says what was measured and
chosen, or that the verdict came from the cache. Without any engine the region runs
its host plan, as the onnxruntime and OpenVINO backends' do.

The recipe is checked (recipe_check.py) before either engine sees it, and each engine
keeps the load's run budgets as it does as a backend of its own. An int8 recipe runs on each
engine's kernels as that engine's backend would choose them by the CPU (integer where it has an
8-bit dot product, float elsewhere), so what is timed is what each would run: on ResNet-50
(Intel Xeon with AMX) OpenVINO's int8 kernels ran it in 0.44x the time of onnxruntime's.
"""

from __future__ import annotations

import hashlib
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from runtime_lite.backends import BackendContext, register_backend
from runtime_lite.backends.auto.sample import Ties, tie_dims, tied_shapes
from runtime_lite.backends.auto.verdict import VERSION, cache_path, read_verdict, write_verdict
from runtime_lite.backends.cpu_module import CpuEngineBackend, CpuEngineModule
from runtime_lite.backends.fallback import bind_fallback, fallback_constants
from runtime_lite.backends.onnxruntime import _refuse_contrib_ops, int8_kernels, recipe_weights, region_session
from runtime_lite.backends.onnxruntime.recipe_check import check_recipe
from runtime_lite.backends.onnxruntime.session import OnnxRuntimeUnavailable, SessionSettings, import_onnxruntime
from runtime_lite.backends.onnxruntime.spec import OnnxRuntimeSpecs
from runtime_lite.backends.openvino import region_engine
from runtime_lite.backends.openvino.engine import EngineSettings, OpenVinoUnavailable, import_openvino
from runtime_lite.backends.options import Option, accepting, boolean, choice, integer, thread_count
from runtime_lite.errors import BundleError
from runtime_lite.format.signature import DimSpec, TensorSpec
from runtime_lite.tools.machine import cpu

logger = logging.getLogger("runtime_lite.auto")

SPECS_FIELD = "auto.compile_specs"
RECIPE_FIELD = "auto.payloads.recipe"
UNAVAILABLE = (OnnxRuntimeUnavailable, OpenVinoUnavailable)


def _onnxruntime(payloads, weights, inputs, outputs, threads: int, int8: bool) -> tuple[Any, str | None]:
    """A session over the region's recipe (an int8 one's form for the kernels onnxruntime runs here), and what
    ``describe`` says of those kernels (None for a float recipe)."""
    settings = SessionSettings(threads=threads)
    kernels = int8_kernels(settings) if int8 else None
    session = region_session(payloads, weights, inputs, outputs, settings, kernels, "auto")
    return session, kernels.describe() if kernels is not None else None


def _openvino(payloads, weights, inputs, outputs, threads: int, int8: bool) -> tuple[Any, str | None]:
    """``_onnxruntime``'s, for OpenVINO's CPU plugin."""
    return region_engine(payloads, weights, inputs, outputs, EngineSettings(threads=threads), "auto" if int8 else None,
                         "auto")  # fmt: skip


#: Each candidate engine: (its version, or Unavailable; an engine over a checked recipe, or Unavailable).
ENGINES: dict[str, tuple[Callable[[], str], Callable[..., Any]]] = {
    "onnxruntime": (lambda: import_onnxruntime().__version__, _onnxruntime),
    "openvino": (lambda: import_openvino().get_version().split("-")[0], _openvino),
}


def _is_seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 60:
        raise ValueError("expected seconds, more than 0 and at most 60")
    return float(value)


@accepting(_is_seconds)
def seconds(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("expected seconds, more than 0 and at most 60") from None
    return _is_seconds(value)


def _is_runs(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
        raise ValueError("expected a number of runs from 1 to 1000")
    return value


@accepting(_is_runs)
def runs(text: str) -> int:
    return _is_runs(integer(text))


threads = thread_count("each engine's default")


LOAD_OPTIONS = (
    Option("engine", choice("auto", *ENGINES), "auto", f"auto: measure; or pin one ({'|'.join(ENGINES)})"),
    Option("threads", threads, 0, "threads of each engine (0: each engine's default, one per core)"),
    Option("runs", runs, 10, "timed runs per engine and region while measuring, at most"),
    Option("budget_s", seconds, 2.0, "seconds per region while measuring, at most (the runs stop there)"),
    Option("cache", boolean, True, "reuse and keep the verdict (default_cache_dir()/placement); false: measure"),
)


#: The sizes a region's symbolic dims take while its engines are timed, tried in turn until every engine runs:
#: (the leading axis, the others), each moved inside the bounds the bundle declares for that dim. The leading
#: (batch) axis at 1; the others first at a working size (an image's side, a sequence's length: the engines' speeds
#: at 1x1 are noise and told apart the wrong one, onnxruntime on a text detector OpenVINO ran 35% faster at
#: 640x640), then smaller for a region that cannot take it (a Range's length tied to another dim), then larger for
#: one that needs more than an image's side: raw audio under an STFT of 512 taps or a window of a second.
SAMPLE_SIZES = ((1, 224), (1, 32), (1, 1), (1, 4096), (1, 16384))


def sample_inputs(
    specs: Sequence[TensorSpec],
    sizes: tuple[int, int] = (1, 1),
    dims: Mapping[str, DimSpec] | None = None,
    ties: Ties | None = None,
) -> list[np.ndarray]:
    """Inputs of the region's signature, symbolic dims at ``sizes`` (the leading axis, the others) within ``dims``'
    bounds, those the recipe ties to a fixed size at it and those it ties together at one size (``ties``, from
    ``sample.tie_dims``): normal floats, zeros otherwise (valid indices)."""
    rng = np.random.default_rng(0)
    arrays = []
    for spec, shape in zip(specs, tied_shapes(specs, sizes, ties, within, dims or {})):
        if np.issubdtype(spec.dtype, np.floating):
            arrays.append(rng.standard_normal(shape).astype(spec.dtype))
        else:
            arrays.append(np.zeros(shape, spec.dtype))
    return arrays


def within(name: str, size: int, dims: Mapping[str, DimSpec]) -> int:
    """``size`` moved inside the bounds the bundle declares for dim ``name`` (none known: as it is)."""
    spec = dims.get(name)
    if spec is None:
        return size
    if spec.max is not None:
        size = min(size, spec.max)
    return size if spec.min is None else max(size, spec.min)


def runnable_sample(
    engines: dict[str, Any],
    specs: Sequence[TensorSpec],
    dims: Mapping[str, DimSpec] | None = None,
    ties: Ties | None = None,
) -> tuple[list[np.ndarray] | None, str]:
    """The first sample (``SAMPLE_SIZES``) every engine runs, or None and why the last one failed. A region cut out of
    a model can take inputs whose symbolic dims hang together in ways its signature does not say (a Range's length
    and a reshaped tensor's): no size may run, and the load must not fail for it."""
    symbolic = any(isinstance(d, str) for spec in specs for d in spec.shape)
    why = ""
    for sizes in SAMPLE_SIZES if symbolic else SAMPLE_SIZES[:1]:
        inputs = sample_inputs(specs, sizes, dims, ties)
        try:
            for engine in engines.values():
                engine.run(inputs)
        except Exception as e:  # noqa: BLE001 - a size the model cannot take: a kernel wider than it, an index past it
            text = str(e).strip()
            why = f"{type(e).__name__}: {text.splitlines()[0][:200] if text else ''}"
            continue
        return inputs, ""
    return None, why


#: The part of each block spent on untimed runs first: an engine's threads (and the other engine's, still
#: spinning from its block) settle, as benchmarks/bench_host.settle lets them before each timed run.
SETTLE_SHARE = 0.4


def time_engines(
    engines: dict[str, Any], inputs: list[np.ndarray], runs: int, budget_s: float, passes: int = 2
) -> dict[str, float]:
    """Each engine's seconds a run: the lowest of its per-pass medians. A pass gives each engine, in a block of
    its own (so no engine's spinning threads meet another's), untimed runs for ``SETTLE_SHARE`` of its share
    of ``budget_s`` (one at least), then up to ``runs / passes`` timed ones within the rest; the blocks
    alternate between passes, so a moment when another process held the cores costs one block, not the
    engine's verdict."""
    share = budget_s / max(len(engines) * passes, 1)
    per_pass = max(1, runs // passes)
    best: dict[str, float] = {}
    for _ in range(passes):
        for name, engine in engines.items():
            start = time.perf_counter()
            settled, until = start + SETTLE_SHARE * share, start + share
            engine.run(inputs)
            while time.perf_counter() < settled:
                engine.run(inputs)
            times = []
            while len(times) < per_pass and (not times or time.perf_counter() < until):
                begin = time.perf_counter()
                engine.run(inputs)
                times.append(time.perf_counter() - begin)
            best[name] = min(best.get(name, math.inf), statistics.median(times))
    return best


class AutoModule(CpuEngineModule):
    """One region, resolved at load to the fastest installed CPU engine, or its host plan."""

    backend = "auto"

    def __init__(
        self,
        payloads: dict[str, memoryview],
        specs: dict[str, Any],
        options: dict[str, Any],
        dims: Mapping[str, DimSpec] | None = None,
    ):
        record = OnnxRuntimeSpecs.from_record(specs, SPECS_FIELD)
        #: The bundle's declared bounds of the region's symbolic dims: the sizes it is timed at stay within them.
        self.dims = {
            d: dims[d] for spec in record.inputs for d in spec.shape if isinstance(d, str) and d in (dims or {})
        }
        self.id = record.region
        self.inputs: tuple[TensorSpec, ...] = record.inputs
        self.outputs: tuple[TensorSpec, ...] = record.outputs
        if "recipe" not in payloads:
            raise BundleError(f"bundle field 'auto.payloads': module {self.id!r} has no 'recipe' payload")
        plan, constants = fallback_constants(payloads, self.id, "auto")
        self.weights = recipe_weights(payloads, record, constants, SPECS_FIELD)
        self.payloads, self.int8 = payloads, record.precision == "int8"
        #: What ``describe`` says of each engine's int8 kernels (an int8 recipe's), by engine.
        self.kernels: dict[str, str | None] = {}
        recipe = payloads["recipe"]
        facts = check_recipe(recipe, self.weights, RECIPE_FIELD)  # before any engine, whatever this host has
        #: The onnxruntime contrib ops the recipe holds: only onnxruntime computes them (no OpenVINO, no host plan).
        self.contrib = sorted(op for op in facts.op_types if op.startswith("com.microsoft."))
        #: What the recipe check followed, for sizing a timing sample (``sample_dims``).
        self.facts = facts
        self.engine_name, self.engine, self.placement = self._choose(recipe, options)
        self.runs_on = "auto" if self.engine is not None else "host"
        arity = (len(self.inputs), len(self.outputs))
        self.bind_host = lambda: bind_fallback(plan, constants, self.id, "auto", arity)
        if self.engine is None:
            if self.contrib:
                _refuse_contrib_ops(plan, self.id, self.placement)
            self.host_plan()
        logger.info("auto region %s runs %s", self.id, self.placement)

    def _build(self, name: str, threads: int) -> Any:
        engine, self.kernels[name] = ENGINES[name][1](
            self.payloads, self.weights, self.inputs, self.outputs, threads, self.int8
        )
        return engine

    def _kernels(self, name: str) -> str:
        words = self.kernels.get(name)
        return f"; {words}" if words else ""

    def _choose(self, recipe, options: dict[str, Any]) -> tuple[str | None, Any, str]:
        names = list(ENGINES) if options["engine"] == "auto" else [options["engine"]]
        if self.contrib:  # only onnxruntime computes them: nothing to choose or to measure
            names, only = ["onnxruntime"], f"the one engine for {', '.join(self.contrib)}"
        else:
            only = "pinned" if options["engine"] != "auto" else "the one installed"
        versions, missing = {}, {}
        for name in names:
            try:
                versions[name] = ENGINES[name][0]()
            except UNAVAILABLE as e:
                missing[name] = str(e)
        if not versions:
            return None, None, "on the host: " + _reasons(missing.values())
        threads = options["threads"]
        if len(versions) == 1:
            (name,) = versions
            return self._only(name, threads, only)
        key = {
            "version": VERSION,
            "region": hashlib.sha256(recipe).hexdigest(),
            "signature": [str(s) for s in self.inputs],
            "bounds": {name: [d.min, d.max] for name, d in sorted(self.dims.items())},
            "cpu": cpu(),
            "threads": threads,
            "engines": versions,
        }
        path = cache_path(key)
        cached = read_verdict(path, key) if options["cache"] else None
        if cached is not None:
            name, measured = cached
            engine, why = self._only(name, threads, "cached verdict")[1:]
            if engine is not None:
                return name, engine, why.replace("cached verdict", f"cached verdict of {_timings(measured)}")
        engines, refused = {}, {}
        for name in versions:
            try:
                engines[name] = self._build(name, threads)
            except UNAVAILABLE as e:
                refused[name] = str(e)
        if not engines:  # each engine refused it, often for one reason (the recipe check's): said once
            return None, None, "on the host: " + _reasons(refused.values())
        inputs, why = runnable_sample(engines, self.inputs, self.dims, tie_dims(self.facts, self.inputs))
        if inputs is None:  # nothing to time on: the first engine, untimed, and no verdict kept (a later load tries)
            name = next(iter(engines))
            for other in [n for n in engines if n != name]:
                engines.pop(other).close()
            detail = f"on {name} {versions[name]} (CPU, not measured: no sample input of its signature runs ({why}))"
            return name, engines[name], detail + self._kernels(name)
        measured = time_engines(engines, inputs, options["runs"], options["budget_s"])
        name = min(measured, key=measured.get)
        for other, engine in engines.items():
            if other != name:
                engine.close()
        if options["cache"]:
            write_verdict(path, key, name, measured)
        skipped = "".join(f"; {n} not used: {why}" for n, why in refused.items())
        detail = f"on {name} {versions[name]} (CPU, measured here: {_timings(measured)}{skipped}){self._kernels(name)}"
        return name, engines[name], detail

    def _only(self, name: str, threads: int, why: str) -> tuple[str | None, Any, str]:
        try:
            engine = self._build(name, threads)
        except UNAVAILABLE as e:
            return None, None, f"on the host: {e}"
        return name, engine, f"on {name} {engine.version} (CPU, {why}){self._kernels(name)}"

    def engine_label(self) -> str:
        return self.engine_name or "host"


def _reasons(reasons) -> str:
    """Each distinct reason once, in order."""
    return "; ".join(dict.fromkeys(reasons))


def _timings(seconds: dict[str, float]) -> str:
    return ", ".join(f"{name} {s * 1e3:.2f} ms" for name, s in sorted(seconds.items(), key=lambda item: item[1]))


class AutoBackend(CpuEngineBackend):
    name = "auto"
    load_options = LOAD_OPTIONS
    module_class = AutoModule

    def init(self, context: BackendContext, payloads: dict[str, memoryview], compile_specs: dict[str, Any]):
        return AutoModule(payloads, compile_specs, dict(context.options), context.dims)


BACKEND = register_backend(AutoBackend())

__all__ = [
    "BACKEND", "LOAD_OPTIONS", "SAMPLE_SIZES", "AutoBackend", "AutoModule", "runnable_sample", "sample_inputs",
    "time_engines",
]  # fmt: skip
