"""Run the float graph over the calibration samples once and observe tensor ranges.

The graph is copied (its weights shared, not copied) with every tensor to observe
made an output and run by engine.py (onnxruntime, batched, where installed; the
host plan otherwise). Each tensor keeps min, max and a histogram of |x| whose range
doubles (merging bin pairs) when a sample exceeds it, so memory stays at a few KiB
per tensor whatever the number of samples; every method of methods.py chooses its
bound from that one histogram.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

import numpy as np

from aot.compiler.quantize.engine import GraphRunner
from aot.compiler.quantize.methods import choose_amax
from aot.compiler.quantize.samples import Sample
from aot.compiler.quantize.table import MIN_AMAX, CalibrationTable, TensorRange, usable_amax
from aot.errors import BuildError
from aot.ir.graph import Graph, Node, Value
from runtime_lite.errors import RuntimeLiteError, one_line

BINS = 2048
#: The least top of a histogram: BINS / top stays a finite float32 (values of 1e-40 made it inf, with warnings).
MIN_TOP = BINS * float(np.finfo(np.float32).tiny)


class RangeObserver:
    """min, max and a histogram of |x| over everything observed."""

    def __init__(self) -> None:
        self.min = np.inf
        self.max = -np.inf
        self.top = 0.0  # the histogram spans [0, top]
        self.hist = np.zeros(BINS, np.int64)

    def observe(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float32).ravel()
        if x.size == 0:
            return
        low, high = float(x.min()), float(x.max())  # a NaN or an infinity shows here: only then filter
        if not (np.isfinite(low) and np.isfinite(high)):
            x = x[np.isfinite(x)]
            if x.size == 0:
                return
            low, high = float(x.min()), float(x.max())
        self.min = min(self.min, low)
        self.max = max(self.max, high)
        peak = max(-low, high)
        if self.top == 0.0:  # a peak too small to step counts as zeros; MIN_TOP keeps BINS / top finite
            self.top = max(peak, MIN_TOP) if peak >= MIN_AMAX else 0.0
        while peak > self.top > 0:  # double the range: bin pairs merge
            self.hist = np.concatenate([self.hist.reshape(-1, 2).sum(axis=1), np.zeros(BINS // 2, np.int64)])
            self.top *= 2
        if self.top == 0.0:
            self.hist[0] += x.size
            return
        scaled = np.abs(x)  # a new array, scaled in place: five passes over x in all, it is most of calibration
        np.multiply(scaled, np.float32(BINS / self.top), out=scaled)
        counts = np.bincount(scaled.astype(np.intp), minlength=BINS + 1)  # |x| == top lands in bin BINS
        self.hist += counts[:BINS]
        self.hist[-1] += counts[BINS:].sum()

    def range(self, method: str, percentile: float) -> TensorRange:
        if not np.isfinite(self.min):
            return TensorRange(0.0, 0.0, 0.0)
        peak = max(abs(self.min), abs(self.max))
        amax = choose_amax(method, self.hist, self.top, peak, percentile)
        return TensorRange(self.min, self.max, usable_amax(amax))  # too small to step: 0, as all-zero data


def clone(graph: Graph) -> tuple[Graph, dict[int, Value]]:
    """A structural copy of ``graph`` sharing its weights, and the map from each value's id to its copy."""
    copy = Graph(graph.name)
    copy.metadata = dict(graph.metadata)
    copy._names = {kind: names.copy() for kind, names in graph._names.items()}
    copy._unknown_dims = graph._unknown_dims
    mapping: dict[int, Value] = {}

    def get(value: Value) -> Value:
        if id(value) not in mapping:  # a constant: the copy holds the same array
            mapping[id(value)] = Value(value.name, value.type, None, value.data)
        return mapping[id(value)]

    for value in graph.inputs:
        mapping[id(value)] = Value(value.name, value.type)
        copy.inputs.append(mapping[id(value)])
    for node in graph.nodes:
        twin = Node(node.op, node.name, [get(v) for v in node.inputs], dict(node.attrs))
        for out in node.outputs:
            mapping[id(out)] = Value(out.name, out.type, twin)
            twin.outputs.append(mapping[id(out)])
        copy.nodes.append(twin)
    copy.outputs = [get(v) for v in graph.outputs]
    return copy, mapping


def progress_bar(stream: TextIO | None, label: str, total: int) -> Callable[..., None]:
    """``tick(done, detail="")`` redraws ``label [#####.....] done/total`` on one stderr line (nothing when
    stream is None); the finished bar adds the seconds it took and ``detail`` (where it ran)."""
    if stream is None:
        return lambda done, detail="": None
    interactive = getattr(stream, "isatty", lambda: False)()
    start = time.perf_counter()

    def tick(done: int, detail: str = "") -> None:
        if not interactive and done != total:
            return  # a log file gets the finished bar only
        filled = 30 * done // max(total, 1)
        end = ""
        if done == total:
            end = f" in {time.perf_counter() - start:.2f} s" + (f" ({detail})" if detail else "") + "\n"
        stream.write(f"\r  {label:<10}[{'#' * filled}{'.' * (30 - filled)}] {done}/{total}{end}")
        stream.flush()

    return tick


def run_float(graph: Graph, tensors: list[Value], samples: list[Sample], observe: int,
              stream: TextIO | None = sys.stderr, engine: str = "auto",
              ) -> tuple[dict[str, RangeObserver], list[list[np.ndarray]], GraphRunner]:  # fmt: skip
    """Observe ``tensors`` on the first ``observe`` samples; return the observers, every sample's float
    outputs and the runner (whose batching the quantized variants reuse)."""
    runner = GraphRunner(graph, tensors, engine)
    observers = {v.name: RangeObserver() for v in tensors}
    outputs: list[list[np.ndarray]] = []
    tick = progress_bar(stream, "calibrate", len(samples))
    tick(0)
    try:
        for part, observing in ((samples[:observe], True), (samples[observe:], False)):
            for _, per_sample, results in runner.batches(part):
                outputs.extend(per_sample)
                if observing:
                    for value, k in zip(tensors, runner.extra_index):
                        observers[value.name].observe(results[k])
                tick(len(outputs), runner.describe())
    except Exception as e:
        if not _engine_error(e):
            raise
        if stream is not None:
            stream.write("\n")
        raise _failing_sample(runner, samples, len(outputs), e) from None
    return observers, outputs, runner


def _engine_error(error: Exception) -> bool:
    """An error the engine raised running the model (the host plan's, onnxruntime's), not one of ours."""
    return isinstance(error, RuntimeLiteError) or type(error).__module__.startswith("onnxruntime")


def _failing_sample(runner: GraphRunner, samples: list[Sample], first: int, error: Exception) -> BuildError:
    """The float model failed on a batch starting at sample ``first``: the sample it fails on alone, named."""
    for index in range(first, len(samples)):
        try:
            runner.run([samples[index]])
        except Exception as e:  # noqa: BLE001 - the first sample the model fails on
            if _engine_error(e):
                error, first = e, index
                break
    return BuildError(
        f"calibration sample {first}: the float model fails on it ({type(error).__name__}: {one_line(str(error), 300)}); "
        "calibration samples must be inputs the model takes (token ids inside its vocabulary, the sizes it reads)"
    )


def make_table(observers: dict[str, RangeObserver], method: str, percentile: float, samples: int,
               digest: str) -> CalibrationTable:  # fmt: skip
    tensors = {name: obs.range(method, percentile) for name, obs in observers.items()}
    return CalibrationTable(method, percentile if method == "percentile" else None, samples, digest, tensors)
