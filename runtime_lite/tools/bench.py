"""Latency, throughput, load time and memory of one bundle, as ``trtexec`` or ``onnxruntime_perf_test`` report them.

``python -m runtime_lite bench`` prints this; it is also usable from Python::

    result = runtime_lite.tools.bench.benchmark("model.aotb", inputs, iterations=100)
    print(result.p50_ms, result.to_dict())

Latency is wall time per ``Module.run`` call, measured with ``time.perf_counter``
after ``warmup`` untimed runs (the first runs fault in activation pages and fill
caches; they are not what a serving process sees). Memory is the process's
resident set from ``/proc/self/status`` (VmRSS after load, VmHWM, the peak, after
the runs), or ``getrusage`` where there is no ``/proc``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from runtime_lite.execution.module import Module, load
from runtime_lite.format.reader import BundleSource
from runtime_lite.tools import machine
from runtime_lite.tools.inputs import describe_inputs

#: The environment variables that set the BLAS/OpenMP thread counts numpy's kernels use.
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _proc_status_bytes(key: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def resident_bytes() -> int | None:
    """This process's resident set now, or None where the OS does not say."""
    return _proc_status_bytes("VmRSS")


def peak_resident_bytes() -> int | None:
    """The largest resident set this process has had."""
    peak = _proc_status_bytes("VmHWM")
    if peak is not None:
        return peak
    try:
        import resource
    except ImportError:  # Windows
        return None
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024  # bytes on macOS, kB elsewhere


def configured_threads() -> int | None:
    """The BLAS thread count this process was started with (None: the library's default, every core)."""
    for name in THREAD_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


@dataclasses.dataclass(frozen=True)
class BenchResult:
    """One benchmark: every run's latency and what the process used."""

    bundle: str
    iterations: int
    warmup: int
    batch: int | None
    threads: int | None
    load_s: float
    latencies_s: tuple[float, ...]
    rss_after_load: int | None
    peak_rss: int | None
    #: What the runs were fed, for the report: ``describe_feed``'s words.
    feed: str = "inputs as given"
    #: The machine (tools/machine.py): CPU, numpy's BLAS kernel, GEMM policy, BLAS overrides.
    host: str = ""
    #: A warning about the machine that explains a slow figure (an OpenBLAS kernel held below the CPU's), or None.
    host_note: str | None = None
    #: Each input's shape as fed, by name: random inputs size symbolic dims by --batch and --dim, else at 1.
    input_shapes: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    #: The same for the report, with the size each symbolic dim took (``tools.inputs.describe_inputs``).
    inputs_fed: str = ""

    def _ms(self, q: float) -> float:
        return float(np.percentile(self.latencies_s, q)) * 1e3

    @property
    def min_ms(self) -> float:
        return min(self.latencies_s) * 1e3

    @property
    def max_ms(self) -> float:
        return max(self.latencies_s) * 1e3

    @property
    def mean_ms(self) -> float:
        return float(np.mean(self.latencies_s)) * 1e3

    @property
    def p50_ms(self) -> float:
        return self._ms(50)

    @property
    def p90_ms(self) -> float:
        return self._ms(90)

    @property
    def p99_ms(self) -> float:
        return self._ms(99)

    @property
    def runs_per_s(self) -> float:
        return len(self.latencies_s) / sum(self.latencies_s)

    @property
    def samples_per_s(self) -> float:
        """Throughput in samples (runs times the batch size; one sample per run when unbatched)."""
        return self.runs_per_s * (self.batch or 1)

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-ready figures; latencies in milliseconds, memory in bytes."""
        return {
            "bundle": self.bundle,
            "iterations": self.iterations,
            "warmup": self.warmup,
            "batch": self.batch,
            "inputs": self.feed,
            "input_shapes": self.input_shapes,
            "threads": self.threads,
            "load_ms": self.load_s * 1e3,
            "latency_unit": "ms",
            "min": self.min_ms,
            "mean": self.mean_ms,
            "p50": self.p50_ms,
            "p90": self.p90_ms,
            "p99": self.p99_ms,
            "max": self.max_ms,
            "runs_per_s": self.runs_per_s,
            "throughput": self.samples_per_s,
            "rss_after_load_bytes": self.rss_after_load,
            "peak_rss_bytes": self.peak_rss,
            "host": self.host,
            "host_note": self.host_note,
        }

    def lines(self) -> list[str]:
        """The human-readable report ``bench`` prints."""
        threads = f"{self.threads} BLAS threads" if self.threads else "BLAS threads: library default"
        batch = f"batch {self.batch}, {self.feed}" if self.batch else self.feed
        return (
            [
                f"{self.bundle}: {self.iterations} runs after {self.warmup} warm-up, {batch}, {threads}",
            ]
            + ([f"  inputs      {self.inputs_fed}"] if self.inputs_fed else [])
            + [
                f"  load        {self.load_s * 1e3:.1f} ms",
                f"  latency ms  min {self.min_ms:.3f}  mean {self.mean_ms:.3f}  p50 {self.p50_ms:.3f}  "
                f"p90 {self.p90_ms:.3f}  p99 {self.p99_ms:.3f}  max {self.max_ms:.3f}",
                f"  throughput  {self.samples_per_s:.1f} samples/s ({self.runs_per_s:.1f} runs/s)",
                f"  memory      RSS after load {_mb(self.rss_after_load)}, peak {_mb(self.peak_rss)}",
            ]
            + ([f"  host        {self.host}"] if self.host else [])
            + ([f"  note        {self.host_note}"] if self.host_note else [])
        )


def _mb(n: int | None) -> str:
    return "unknown" if n is None else f"{n / 1e6:.1f} MB"


def benchmark(
    source: BundleSource,
    inputs: Mapping[str, np.ndarray] | Callable[[Module], Mapping[str, np.ndarray]],
    *,
    iterations: int = 100,
    warmup: int = 10,
    batch: int | None = None,
    load_options: Mapping[str, Any] | None = None,
    inputs_label: str = "inputs as given",
) -> BenchResult:
    """Load ``source``, time ``warmup + iterations`` runs, and return every latency.

    ``inputs`` is a dict, or a function of the loaded module returning one (so
    random inputs can follow the module's signature); ``batch`` is only recorded,
    for the throughput in samples. ``load_options`` are ``runtime_lite.load`` keywords.
    """
    if iterations < 1 or warmup < 0:
        raise ValueError(f"iterations must be >= 1 and warmup >= 0, got {iterations} and {warmup}")
    start = time.perf_counter()
    module = load(source, **dict(load_options or {}))
    load_s = time.perf_counter() - start
    rss_after_load = resident_bytes()
    feed = inputs(module) if callable(inputs) else inputs
    for _ in range(warmup):
        module.run(feed)
    latencies = []
    for _ in range(iterations):
        start = time.perf_counter()
        module.run(feed)
        latencies.append(time.perf_counter() - start)
    named = feed if isinstance(feed, Mapping) else {}  # a list feed (module.run takes one too) has no names here
    return BenchResult(
        bundle=str(source) if not isinstance(source, (bytes, bytearray, memoryview)) else "<bytes>",
        iterations=iterations,
        warmup=warmup,
        batch=batch,
        threads=configured_threads(),
        load_s=load_s,
        latencies_s=tuple(latencies),
        rss_after_load=rss_after_load,
        peak_rss=peak_resident_bytes(),
        feed=inputs_label,
        host=machine.describe(),
        host_note=machine.kernel_note(),
        input_shapes={name: list(np.shape(value)) for name, value in named.items()},
        inputs_fed=describe_inputs(module.inputs, named) if set(named) == {s.name for s in module.inputs} else "",
    )


def describe_feed(files: int, random: bool, seed: int) -> str:
    """How a report names its inputs: from files, random (with the seed that repeats them), or both."""
    if random and files:
        return f"{files} input{'s' if files != 1 else ''} from files, the rest random (seed {seed})"
    if random:
        return f"random inputs (seed {seed})"
    return "inputs from files"
