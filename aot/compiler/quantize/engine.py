"""Run a graph over the calibration samples on the fastest engine installed at build time.

Calibration (the float graph with the tensors to observe made outputs) and every
accuracy measurement (a quantized variant, Q/DQ in float) run here. With onnxruntime
installed the graph is written as ONNX by the recipe writer the onnxruntime and
TensorRT backends use (``write_recipe``), and samples run stacked along the batch axis
where the model allows it; otherwise, or where the graph has an op with no ONNX
lowering, the host plan runs one sample at a time (runtime_lite's own kernels, the
same ones a deployed bundle falls back to).

Batching is proved, not assumed: the batch dim is made symbolic, then one sample and
two stacked must give the same outputs, stacked along one axis of each (axis 0 for
(batch, classes), axis 1 for a (time, batch, classes) sequence). A graph built for a
pinned input shape carries reshapes to constant targets that start with that batch of 1
(a CTC recognizer's ``[1, 40, 3, 8, 15]``, a classifier's ``[1, 200]``): those whose input
starts with 1 too reshape to ``0`` there instead (ONNX: keep the input's dim), so they
follow a stacked batch; a model that still pins it fails the check and runs sample by
sample, still on onnxruntime.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from aot.compiler.host_plan import lower_to_host_plan
from aot.compiler.quantize.samples import Sample
from aot.errors import BuildError
from aot.ir.graph import Graph, Value
from aot.testing import relative_l2
from runtime_lite.execution.plan import HostPlan

log = logging.getLogger("aot.quantize")

#: Largest batch, and the memory a batch's inputs and outputs may take.
MAX_BATCH = 64
BATCH_BYTES = 256 << 20
#: Two stacked samples must match the one-by-one outputs this closely (relative L2) to batch.
BATCH_TOLERANCE = 1e-4


def probe_graph(graph: Graph, extra: list[Value]) -> tuple[Graph, int]:
    """A copy of ``graph`` whose outputs are its own, then those of ``extra`` not among them (the graph is not
    changed); and how many outputs the copy has before the extra ones."""
    from aot.compiler.quantize.calibrate import clone

    probe, mapping = clone(graph)
    own = {id(mapping[id(v)]) for v in graph.outputs}
    probe.outputs = list(probe.outputs) + [mapping[id(v)] for v in extra if id(mapping[id(v)]) not in own]
    return probe, len(graph.outputs)


@dataclass
class _Batching:
    """Per output, the axis samples stack along (None: run one sample at a time)."""

    axes: list[int] | None
    size: int = 1


class GraphRunner:
    """Runs a graph's outputs and ``extra`` tensors over samples: onnxruntime where it can, else the host plan.

    ``engine`` is ``"auto"`` (onnxruntime if installed and the graph lowers to ONNX),
    ``"onnxruntime"`` or ``"host"``; ``self.engine`` says which one runs and
    ``self.why`` why not onnxruntime when it is the host.
    """

    def __init__(self, graph: Graph, extra: list[Value] | None = None, engine: str = "auto",
                 like: GraphRunner | None = None):  # fmt: skip
        """``like``: a runner of a graph with the same inputs and outputs whose batching this one reuses."""
        extra = extra or []
        self.input_names = [v.name for v in graph.inputs]
        probe, self.own_outputs = probe_graph(graph, extra)
        own = {id(v): i for i, v in enumerate(graph.outputs)}
        # where each extra tensor lands among the probe's outputs (a graph output is not repeated)
        index, k = [], len(graph.outputs)
        for v in extra:
            if id(v) in own:
                index.append(own[id(v)])
            else:
                index.append(k)
                k += 1
        self.extra_index = index
        self.why = ""
        self._probe = probe
        self._session = None
        self._plan: HostPlan | None = None
        if engine in ("auto", "onnxruntime"):
            try:
                self._session, self._names = _onnxruntime_session(probe)
                self.engine = "onnxruntime"
            except (ImportError, BuildError, RuntimeError) as e:
                if engine == "onnxruntime":
                    raise
                self.why = str(e).splitlines()[0] if str(e) else type(e).__name__
        if self._session is None:
            self._use_host_plan()
        self._batching: _Batching | None = None
        if like is not None and like._batching is not None and self._session is not None:
            axes = like._batching.axes
            self._batching = _Batching(None if axes is None else axes[: self.own_outputs], like._batching.size)

    def _use_host_plan(self) -> None:
        lowered = lower_to_host_plan(self._probe)
        self._plan = HostPlan(lowered.plan, lowered.constants)
        self._session = None
        self.engine = "host plan"

    def _run_one(self, feeds: list[np.ndarray], stacked: bool = False) -> list[np.ndarray]:
        if self._session is not None:
            try:
                return self._session.run(self._names, dict(zip(self.input_names, feeds)))
            except Exception as e:
                if stacked:
                    raise  # the batching check: a model that refuses a stacked batch runs one by one
                self.why = f"onnxruntime failed: {str(e).strip().splitlines()[0][:200] if str(e).strip() else e}"
                log.warning("calibration: %s; the host plan runs the rest", self.why)
                self._use_host_plan()
        return [np.array(r) for r in self._plan.execute(feeds)]

    def _decide_batching(self, samples: list[Sample]) -> _Batching:
        """Stack samples when two stacked give the one-by-one outputs along one axis each; else one at a time."""
        if self._session is None:
            return _Batching(None)
        a, b = ([s[n] for n in self.input_names] for s in samples[:2])
        if any(x.shape != y.shape or x.ndim == 0 for x, y in zip(a, b)):
            return _Batching(None)
        one, two = self._run_one(a), self._run_one(b)
        try:
            both = self._run_one([np.concatenate([x, y]) for x, y in zip(a, b)], stacked=True)
        except Exception:  # a reshape or a shape check that pins the batch: onnxruntime says so
            return _Batching(None)
        axes = []
        for x, y, z in zip(one, two, both):
            axis = _stack_axis(x, z)
            if axis is None or not _close(np.concatenate([x, y], axis), z):
                return _Batching(None)
            axes.append(axis)
        per_sample = sum(x.nbytes for x in a) + sum(x.nbytes for x in one)
        return _Batching(axes, max(1, min(MAX_BATCH, len(samples), BATCH_BYTES // max(per_sample, 1))))

    def batches(self, samples: list[Sample]) -> Iterator[tuple[int, list[list[np.ndarray]], list[np.ndarray]]]:
        """Yield (how many samples, each one's outputs, the batch's every probe output as run).

        The probe outputs of a batch are the stacked arrays (for observing ranges, where
        the order of values does not matter).
        """
        if self._batching is None and len(samples) >= 2:
            self._batching = self._decide_batching(samples)
        batching = self._batching or _Batching(None)
        i = 0
        while i < len(samples):
            step = batching.size if batching.axes is not None and self._session is not None else 1
            chunk = samples[i : i + step]
            if len({tuple(s[n].shape for n in self.input_names) for s in chunk}) > 1:
                chunk = chunk[:1]  # samples of other shapes run alone
            feeds = [np.concatenate([s[n] for s in chunk]) if len(chunk) > 1 else chunk[0][n] for n in self.input_names]
            results = self._run_one(feeds, stacked=len(chunk) > 1)
            if len(chunk) == 1:
                per_sample = [[np.asarray(r) for r in results[: self.own_outputs]]]
            else:
                parts = [np.split(r, len(chunk), axis) for r, axis in zip(results, batching.axes)]
                per_sample = [[parts[j][k] for j in range(self.own_outputs)] for k in range(len(chunk))]
            yield len(chunk), per_sample, results
            i += len(chunk)

    def describe(self) -> str:
        """Where it runs, for the progress line: ``onnxruntime, batches of 32``."""
        if self._session is None:
            return f"host plan ({self.why})" if self.why else "host plan"
        size = self._batching.size if self._batching is not None and self._batching.axes is not None else 1
        return f"onnxruntime, batches of {size}" if size > 1 else "onnxruntime, one sample at a time"

    def run(self, samples: list[Sample], tick: Callable[[int], None] | None = None) -> list[list[np.ndarray]]:
        """Every sample's graph outputs."""
        outputs: list[list[np.ndarray]] = []
        for _, per_sample, _ in self.batches(samples):
            outputs.extend(per_sample)
            if tick is not None:
                tick(len(outputs))
        return outputs


def _stack_axis(one: np.ndarray, both: np.ndarray) -> int | None:
    """The one axis along which ``both`` (two samples) holds twice ``one`` (one sample), or None."""
    if one.ndim != both.ndim:
        return None
    differ = [k for k, (m, n) in enumerate(zip(one.shape, both.shape)) if m != n]
    if len(differ) != 1 or both.shape[differ[0]] != 2 * one.shape[differ[0]]:
        return None
    return differ[0]


def _close(expected: np.ndarray, got: np.ndarray) -> bool:
    if expected.shape != got.shape:
        return False
    if expected.dtype.kind not in "fc":
        return bool(np.array_equal(expected, got))
    return relative_l2(got, expected) <= BATCH_TOLERANCE


def follow_batch(model) -> int:
    """Make each ``Reshape`` to a constant ``[1, ...]`` of an input ``[1, ...]`` keep its input's first dim
    (``0``), so that a stacked batch passes through it; returns how many were changed. Written at batch 1,
    the model's own shapes (onnx's shape inference) say which inputs start with 1; the batching check
    proves the result."""
    import onnx
    from onnx import numpy_helper

    initializers = {t.name: t for t in model.graph.initializer}
    candidates = []
    for node in model.graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2 or node.input[1] not in initializers:
            continue
        if any(a.name == "allowzero" and a.i for a in node.attribute):
            continue  # 0 is a real zero there
        target = numpy_helper.to_array(initializers[node.input[1]])
        if target.ndim == 1 and target.size and target[0] == 1:
            candidates.append((node, target))
    if not candidates:
        return 0
    # shapes only: the weights' dims without their data (a 400 MB encoder would be copied for nothing)
    light = onnx.helper.make_graph(
        model.graph.node, "shapes", model.graph.input, model.graph.output,
        [t for t in model.graph.initializer if np.prod(t.dims) <= 64],
        value_info=[onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                    for t in model.graph.initializer if np.prod(t.dims) > 64],
    )  # fmt: skip
    inferred = onnx.shape_inference.infer_shapes(onnx.helper.make_model(light, opset_imports=model.opset_import))
    shapes = {v.name: v.type.tensor_type.shape for v in [*inferred.graph.value_info, *inferred.graph.input]}
    changed = set()
    for k, (node, target) in enumerate(candidates):
        shape = shapes.get(node.input[0])
        if shape is None or not shape.dim or shape.dim[0].dim_value != 1:
            continue
        follows = np.concatenate([[0], target[1:]]).astype(target.dtype)
        changed.add(node.input[1])
        node.input[1] = f"{node.input[1]}__follow_batch_{k}"
        model.graph.initializer.append(numpy_helper.from_array(follows, node.input[1]))
    used = {name for node in model.graph.node for name in node.input}
    kept = [t for t in model.graph.initializer if t.name not in changed or t.name in used]
    if len(kept) < len(model.graph.initializer):
        del model.graph.initializer[:]
        model.graph.initializer.extend(kept)
    return len(changed)


def _onnxruntime_session(probe: Graph):
    """An onnxruntime session of ``probe`` written as ONNX with a symbolic batch dim, and its output names."""
    import onnxruntime

    from aot.compiler.backends.onnxruntime.lowerings import ONNXRUNTIME_EXPORTS
    from aot.compiler.backends.recipe import write_recipe

    start = time.perf_counter()
    model = write_recipe(probe, "fp32", exports=ONNXRUNTIME_EXPORTS, label="calibration")
    follow_batch(model)
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        if len(dims) and (dims[0].HasField("dim_param") or dims[0].dim_value == 1):
            dims[0].dim_param = "batch"
    for value in model.graph.output:  # shapes follow the batch now; onnxruntime checks none
        value.type.tensor_type.ClearField("shape")
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4  # the batching check makes some models fail on purpose; errors still raise
    # A build makes dozens of these sessions, each running batches: without the arena, a batch's activations
    # go back to the system when it ends instead of staying reserved by every session the build made.
    options.enable_cpu_mem_arena = False
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # a shared build machine's cores
    # A float graph gets every optimization (fusions and the blocked conv layout: twice as fast on a CNN);
    # one with Q/DQ the basic ones (constant folding, no fusions), so Q/DQ stay float ops computed as
    # written, not fused into onnxruntime's integer kernels, which rescale in their own way.
    quantized = any(node.op in ("quantize", "dequantize") for node in probe.nodes)
    level = "ORT_ENABLE_BASIC" if quantized else "ORT_ENABLE_ALL"
    options.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, level)
    try:
        session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # an op or opset this onnxruntime lacks: the host plan runs it
        raise RuntimeError(f"onnxruntime {onnxruntime.__version__} refused the graph: {str(e).strip()[:200]}") from None
    log.debug("calibration graph as ONNX in %.2f s", time.perf_counter() - start)
    return session, [o.name for o in model.graph.output]
