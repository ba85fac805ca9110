"""The virtual NPU, run side: executes the JSON graphs ``aot`` writes, for real, with numpy.

TVM's example NPU runtime only logs; this one computes every kernel node with
the host's kernels (so float32 results equal the host's exactly and int8 follows
quantize/dequantize semantics) and replays the dispatch decisions the compiler
made: engine, memory tier of each tensor, tiles, fusion, estimated cycles. Those
decisions are read once at ``init``; a run only records them, cheaply, when asked
(``Module.profile``) or when the ``runtime_lite.npu`` logger is at DEBUG.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime_lite import format as fmt
from runtime_lite.backends import Backend, BackendContext, register_backend
from runtime_lite.backends.npu_checks import check_dispatch
from runtime_lite.backends.npu_parameters import ParameterGuard, parameter_checks
from runtime_lite.errors import BundleError
from runtime_lite.execution.limits import BudgetExceeded, current_budget
from runtime_lite.execution.plan import bind_cost, bind_kernel, check_result_count, guarded
from runtime_lite.format.fields import expect_index
from runtime_lite.format.npu_records import BodyOp, NpuGraph, NpuKernel
from runtime_lite.format.reader import MAX_DECODED_ITEMS
from runtime_lite.format.records import ConstantRecord

FORMAT = fmt.NPU_GRAPH
#: Where this reader's BundleErrors point: ``bundle field 'npu.graph.nodes[2].op' ...``.
FIELD = "npu.graph"
logger = logging.getLogger("runtime_lite.npu")


@dataclass(frozen=True)
class _Kernel:
    """One NPU graph node compiled for the emulation: its fused body and what a run frees after it."""

    index: int  # JSON node index
    name: str
    inputs: tuple[int, ...]
    run: Callable[[list[np.ndarray]], np.ndarray]
    shape: tuple[int, ...]
    dtype: np.dtype
    frees: tuple[int, ...]
    event: dict[str, Any]  # the dispatch record, as a trace event
    message: str


@dataclass(frozen=True)
class _Arg:
    """One input of the NPU graph, as its dispatch checks it."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype


def _compile_body(body: tuple[BodyOp, ...], num_args: int, field: str) -> Callable[[list[np.ndarray]], np.ndarray]:
    """A kernel node's fused ops as one function of its inputs."""
    steps = []
    for j, op in enumerate(body):
        where = f"{field}.body[{j}]"
        refs = []
        for k, (source, index) in enumerate(op.inputs):
            limit = num_args if source == "arg" else j
            refs.append((source == "op", expect_index(index, limit, f"{where}.inputs[{k}][1]")))
        fn = bind_kernel(op.op, len(refs), op.attrs, where, f"body op {j}")
        check_result_count(op.op, op.attrs, 1, where, f"body op {j}")
        steps.append((guarded(fn, bind_cost(op.op, op.attrs), f"{where} ({op.op})"), tuple(refs)))

    if len(steps) == 1:
        fn, refs = steps[0]
        if all(not local for local, _ in refs):
            picks = tuple(i for _, i in refs)
            return lambda args: fn(*[args[i] for i in picks])

    def run(args: list[np.ndarray]) -> np.ndarray:
        results: list[np.ndarray] = []
        for fn, refs in steps:
            results.append(fn(*[results[i] if local else args[i] for local, i in refs]))
        return results[-1]

    return run


class NpuProgram:
    """One region, validated and compiled: what ``init`` returns and ``execute`` runs."""

    def __init__(self, graph: Any, weights: memoryview | None):
        record = NpuGraph.from_record(graph, FIELD)  # every declared field checked; IncompatiblePayload first
        self.region = record.region
        nodes = record.nodes
        template: list[Any] = [None] * len(nodes)
        for i, node in enumerate(nodes):
            if isinstance(node.attrs, ConstantRecord):
                template[i] = node.attrs.view(weights, f"{FIELD}.nodes[{i}].attrs")
        args = []
        for i, index in enumerate(record.arg_nodes):
            node = nodes[expect_index(index, len(nodes), f"{FIELD}.arg_nodes[{i}]")]
            if node.op != "input":
                raise BundleError(f"bundle field '{FIELD}.arg_nodes[{i}]' points at a {node.op} node, not an input")
            args.append(_Arg(index, node.name, node.attrs.shape, node.attrs.dtype))
        self.args = tuple(args)
        if sorted(a.index for a in self.args) != [i for i, n in enumerate(nodes) if n.op == "input"]:
            raise BundleError(f"bundle field '{FIELD}.arg_nodes' must list every input node exactly once")
        self.heads = tuple(expect_index(h, len(nodes), f"{FIELD}.heads[{i}][0]") for i, h in enumerate(record.heads))
        self.template = template
        self.kernels = self._compile_kernels(nodes)
        self.constants = tuple(t for t in template if t is not None)
        self.peak_bytes = self._peak_bytes()
        shapes = {i: t.shape for i, t in enumerate(template) if t is not None}
        shapes.update({a.index: a.shape for a in self.args} | {k.index: k.shape for k in self.kernels})
        self.head_shapes = [shapes[h] for h in self.heads]  # each enforced at run
        positions = {arg.index: i for i, arg in enumerate(self.args)}
        self.parameters = ParameterGuard(parameter_checks(nodes, FIELD), template, positions)

    def _compile_kernels(self, nodes: tuple) -> tuple[_Kernel, ...]:
        last_use: dict[int, int] = {}
        for i, node in enumerate(nodes):
            if node.inputs and node.op != "kernel":
                raise BundleError(f"bundle field '{FIELD}.nodes[{i}].inputs': only a kernel node reads other nodes")
            for k, src in enumerate(node.inputs):
                # only earlier nodes: the graph cannot loop
                expect_index(src, i, f"{FIELD}.nodes[{i}].inputs[{k}][0]")
                last_use[src] = i
        keep = set(self.heads) | {i for i, n in enumerate(nodes) if n.op != "kernel"}
        kernels = []
        for i, node in enumerate(nodes):
            attrs = node.attrs
            if not isinstance(attrs, NpuKernel):
                continue
            run = _compile_body(attrs.body, len(node.inputs), f"{FIELD}.nodes[{i}].attrs")
            _check_single_op(attrs, [nodes[s].attrs for s in node.inputs], f"{FIELD}.nodes[{i}].attrs")
            event = {  # the record's own fields first: it cannot override what a profile relies on
                **attrs.dispatch.to_record(),
                "backend": "npu",
                "module": self.region,
                "node": node.name,
                "composite": attrs.composite,
            }
            frees = tuple(sorted({s for s in node.inputs if last_use.get(s) == i and s not in keep}))
            message = attrs.dispatch.describe(node.name)
            # shape and dtype are enforced on every run
            kernels.append(_Kernel(i, node.name, node.inputs, run, attrs.shape, attrs.dtype, frees, event, message))
        return tuple(kernels)

    def _peak_bytes(self) -> int:
        """The most bytes of kernel outputs alive at once: exact, since every output's shape is enforced."""
        size = {k.index: math.prod(k.shape) * k.dtype.itemsize for k in self.kernels}
        live = peak = 0
        for k in self.kernels:
            live += size[k.index]
            peak = max(peak, live)
            live -= sum(size.get(i, 0) for i in k.frees)
        return peak

    def run(self, inputs: Sequence[np.ndarray], trace: list | None) -> list[np.ndarray]:
        if len(inputs) != len(self.args):
            raise ValueError(f"npu region {self.region} takes {len(self.args)} inputs, got {len(inputs)}")
        budget = current_budget()
        if self.peak_bytes > budget.max_memory:
            raise BudgetExceeded(
                f"npu region {self.region} needs {self.peak_bytes:,} bytes of activations, "
                f"more than max_memory = {budget.max_memory:,}"
            )
        values = list(self.template)
        for arg, x in zip(self.args, inputs):
            if x.shape != arg.shape or x.dtype != arg.dtype:
                raise ValueError(
                    f"npu region {self.region} input {arg.name!r} must be {arg.dtype}{list(arg.shape)}, "
                    f"got {x.dtype}{list(x.shape)}"
                )
            values[arg.index] = x
        log = logger.isEnabledFor(logging.DEBUG)
        checked = self.parameters.by_node
        for k in self.kernels:
            if k.index in checked:
                self.parameters.check_run(k.index, values)
            start = time.perf_counter() if trace is not None else 0.0
            out = k.run([values[i] for i in k.inputs])
            if getattr(out, "shape", None) != k.shape or out.dtype != k.dtype:
                raise ValueError(
                    f"npu kernel {k.name!r} produced {getattr(out, 'dtype', type(out).__name__)}"
                    f"{list(getattr(out, 'shape', ()))}, expected {k.dtype}{list(k.shape)}"
                )
            values[k.index] = out
            for i in k.frees:
                values[i] = None
            if trace is not None:
                trace.append({**k.event, "start_s": start, "wall_s": time.perf_counter() - start})
            if log:
                logger.debug("%s: %s", self.region, k.message)
            if budget.deadline is not None and time.monotonic() > budget.deadline:
                raise TimeoutError(f"npu region {self.region} passed the run's max_run_seconds at {k.name!r}")
        return _fresh([values[h] for h in self.heads], [*inputs, *self.constants])


def _check_single_op(kernel: NpuKernel, sources: list, field: str) -> None:
    """A one-op dispatch's attributes against the shapes its inputs declare (npu_checks.py)."""
    if len(kernel.body) != 1 or any(source != "arg" for source, _ in kernel.body[0].inputs):
        return
    operands = [sources[index] for _, index in kernel.body[0].inputs]
    check_dispatch(kernel.body[0].op, kernel.body[0].attrs, [o.shape for o in operands],
                   [o.dtype for o in operands], kernel.shape, field)  # fmt: skip


def _owner(array: np.ndarray) -> int:
    return id(array if array.base is None else array.base)


def _fresh(outputs: list[np.ndarray], sources: Sequence[np.ndarray]) -> list[np.ndarray]:
    """A backend call returns arrays of its own (aot/compiler/memory_plan.py): a view of an input is copied.

    Layout dispatches (reshape, transpose, slice) are numpy views; inside the region
    that is free, at its boundary the view becomes the bytes the DMA writes back.
    numpy points a view's ``base`` at the array owning the memory, so one id per
    source tells.
    """
    owners = {_owner(x) for x in sources if isinstance(x, np.ndarray)}
    owners.update(id(x) for x in sources)
    return [y.copy() if id(y) in owners or _owner(y) in owners else y for y in outputs]


def check_json_budget(data: memoryview, what: str) -> None:
    """Refuse JSON that would decode to more objects than a bundle record may (counted without parsing).

    Every container opens with a bracket and items are separated by commas, so
    their counts bound what ``json.loads`` would build (brackets inside strings only
    make the bound looser); 28 MB of numbers would otherwise take 870 MB.
    """
    raw = bytes(data)
    items = raw.count(b"[") + raw.count(b"{") + raw.count(b",")
    if items > MAX_DECODED_ITEMS:
        raise BundleError(f"{what} holds more than {MAX_DECODED_ITEMS} JSON items")


class NpuBackend(Backend):
    name = "npu"

    def is_available(self) -> bool:
        return True  # an emulation: it runs wherever numpy does

    def init(
        self, context: BackendContext, payloads: dict[str, memoryview], compile_specs: dict[str, Any]
    ) -> NpuProgram:
        if "graph" not in payloads:
            raise BundleError("npu module has no 'graph' payload")
        check_json_budget(payloads["graph"], "npu payload 'graph'")
        try:
            graph = json.loads(bytes(payloads["graph"]))
        except (UnicodeDecodeError, ValueError) as e:
            raise BundleError(f"npu payload 'graph' is not valid JSON: {e}") from None
        except RecursionError:
            raise BundleError("npu payload 'graph' nests too deeply") from None
        return NpuProgram(graph, payloads.get("weights"))

    def execute(self, context: BackendContext, handle: NpuProgram, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return handle.run(inputs, context.trace)

    def output_shapes(self, handle: NpuProgram) -> list[tuple[int, ...]]:
        return handle.head_shapes

    def check_constant_inputs(self, handle: NpuProgram, constants: dict[int, np.ndarray]) -> None:
        handle.parameters.check_constant_inputs(constants)


BACKEND = register_backend(NpuBackend())
