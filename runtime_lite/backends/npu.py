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

from runtime_lite.backends import Backend, BackendContext, IncompatiblePayload, register_backend
from runtime_lite.backends.weights import view_constant
from runtime_lite.bundle import MAX_DECODED_ITEMS, expect, expect_dtype, expect_index, expect_key, expect_shape
from runtime_lite.errors import BundleError, describe
from runtime_lite.limits import BudgetExceeded, current_budget
from runtime_lite.plan import bind_kernel

FORMAT = "npu-graph/1"
logger = logging.getLogger("runtime_lite.npu")


@dataclass(frozen=True)
class _Kernel:
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
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype


def _ref(ref: Any, field: str, limit: int) -> int:
    """A TVM-style node entry ``[node, output, version]``; every NPU node has one output."""
    if not isinstance(ref, list) or len(ref) != 3 or ref[1:] != [0, 0]:
        raise BundleError(f"npu payload field '{field}' must be [node, 0, 0], got {describe(ref)}")
    return expect_index(ref[0], limit, f"npu payload {field}[0]")


def _tensor(attrs: dict, field: str) -> tuple[tuple[int, ...], np.dtype]:
    shapes = expect_key(attrs, "shape", list, field)
    dtypes = expect_key(attrs, "dtype", list, field)
    if len(shapes) != 1 or len(dtypes) != 1:
        raise BundleError(f"npu payload field '{field}' must describe exactly one output")
    return expect_shape(shapes[0], f"{field}.shape[0]", allow_symbols=False), expect_dtype(
        dtypes[0], f"{field}.dtype[0]"
    )


def _compile_body(body: Any, num_args: int, field: str) -> Callable[[list[np.ndarray]], np.ndarray]:
    """A kernel node's fused ops as one function of its inputs."""
    expect(body, list, f"{field}.body")
    if not body:
        raise BundleError(f"npu payload field '{field}.body' is empty")
    steps = []
    for j, op_record in enumerate(body):
        where = f"{field}.body[{j}]"
        expect(op_record, dict, where)
        op = expect_key(op_record, "op", str, where)
        refs = []
        for k, ref in enumerate(expect(op_record.get("inputs", []), list, f"{where}.inputs")):
            if not (isinstance(ref, list) and len(ref) == 2 and ref[0] in ("arg", "op")):
                raise BundleError(f"npu payload field '{where}.inputs[{k}]' must be ['arg', i] or ['op', j]")
            limit = num_args if ref[0] == "arg" else j
            refs.append((ref[0] == "op", expect_index(ref[1], limit, f"npu payload {where}.inputs[{k}][1]")))
        attrs = expect(op_record.get("attrs", {}), dict, f"{where}.attrs")
        steps.append((bind_kernel(op, len(refs), attrs, f"npu payload {where}", f"body op {j}"), tuple(refs)))

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


def _dispatch_record(record: Any, field: str) -> dict[str, Any]:
    """The compiler's dispatch decisions for one kernel, checked: they reach logs and profiles."""
    expect(record, dict, field)
    expect(record.get("engine", ""), str, f"{field}.engine")
    for key in ("ops", "on_chip"):
        for i, op in enumerate(expect(record.get(key, []), list, f"{field}.{key}")):
            expect(op, str, f"{field}.{key}[{i}]")
    expect(record.get("fused", False), bool, f"{field}.fused")
    for key in ("reads", "writes"):
        for i, tensor in enumerate(expect(record.get(key, []), list, f"{field}.{key}")):
            expect(tensor, dict, f"{field}.{key}[{i}]")
            expect(tensor.get("tier", "?"), str, f"{field}.{key}[{i}].tier")
            expect(tensor.get("spilled_from", ""), str, f"{field}.{key}[{i}].spilled_from")
    tile = record.get("tile")
    if tile is not None:
        expect(tile, list, f"{field}.tile")
        if len(tile) != 2:
            raise BundleError(f"npu payload field '{field}.tile' must be [rows, cols]")
        for i, t in enumerate(tile):
            expect(t, int, f"{field}.tile[{i}]")
    for key in ("tiles", "cycles", "macs"):
        expect(record.get(key, 0), int, f"{field}.{key}")
    return record


def _describe(name: str, record: dict[str, Any]) -> str:
    tiers = ",".join(r.get("tier", "?") for r in record.get("reads", []))
    out = ",".join(
        r.get("tier", "?") + (f"(spilled from {r['spilled_from']})" if "spilled_from" in r else "")
        for r in record.get("writes", [])
    )
    tile = record.get("tile")
    tiles = f"{record.get('tiles', 1)}x{tile[0]}x{tile[1]}" if tile else "none"
    fused = "+".join(record.get("ops", [])) if record.get("fused") else "no"
    return (
        f"dispatch {name}: engine={record.get('engine')} reads={tiers} writes={out} tiles={tiles} "
        f"fused={fused} cycles={record.get('cycles')}"
    )


class NpuProgram:
    """One region, validated and compiled: what ``init`` returns and ``execute`` runs."""

    def __init__(self, graph: Any, weights: memoryview | None):
        expect(graph, dict, "npu payload")
        fmt = expect_key(graph, "format", str, "npu payload")
        if fmt != FORMAT:
            raise IncompatiblePayload(f"payload format {fmt!r}; this runtime_lite runs {FORMAT!r}")
        self.region = expect(graph.get("region", "npu"), str, "npu payload.region")
        nodes = expect_key(graph, "nodes", list, "npu payload")
        template: list[Any] = [None] * len(nodes)
        kinds: list[str] = []
        for i, node in enumerate(nodes):
            field = f"nodes[{i}]"
            expect(node, dict, f"npu payload {field}")
            kind = expect_key(node, "op", str, f"npu payload {field}")
            if kind not in ("input", "const", "kernel"):
                raise BundleError(f"npu payload field '{field}.op' = {kind!r} is not input, const or kernel")
            kinds.append(kind)
            attrs = expect_key(node, "attrs", dict, f"npu payload {field}")
            if kind == "const":
                template[i] = self._constant(attrs, weights, f"npu payload {field}.attrs")
        self.args = tuple(
            self._arg(nodes, kinds, ref, i) for i, ref in enumerate(expect_key(graph, "arg_nodes", list, "npu payload"))
        )
        if sorted(a.index for a in self.args) != [i for i, k in enumerate(kinds) if k == "input"]:
            raise BundleError("npu payload field 'arg_nodes' must list every input node exactly once")
        heads = expect_key(graph, "heads", list, "npu payload")
        self.heads = tuple(_ref(h, f"heads[{i}]", len(nodes)) for i, h in enumerate(heads))
        self.template = template
        self.kernels = self._compile_kernels(nodes, kinds)
        self.peak_bytes = self._peak_bytes()

    @staticmethod
    def _constant(attrs: dict, weights: memoryview | None, field: str) -> np.ndarray:
        shape, dtype = _tensor(attrs, field)
        return view_constant(weights, shape, dtype, expect_key(attrs, "offset", int, field), field)

    @staticmethod
    def _arg(nodes: list, kinds: list[str], ref: Any, i: int) -> _Arg:
        index = expect_index(ref, len(nodes), f"npu payload arg_nodes[{i}]")
        if kinds[index] != "input":
            raise BundleError(f"npu payload field 'arg_nodes[{i}]' points at a {kinds[index]} node, not an input")
        shape, dtype = _tensor(nodes[index]["attrs"], f"nodes[{index}].attrs")
        return _Arg(index, expect_key(nodes[index], "name", str, f"npu payload nodes[{index}]"), shape, dtype)

    def _compile_kernels(self, nodes: list, kinds: list[str]) -> tuple[_Kernel, ...]:
        last_use: dict[int, int] = {}
        parsed = []
        for i, node in enumerate(nodes):
            if kinds[i] != "kernel":
                continue
            field = f"nodes[{i}]"
            inputs = tuple(
                _ref(r, f"{field}.inputs[{k}]", i)  # only earlier nodes: the graph cannot loop
                for k, r in enumerate(expect(node.get("inputs", []), list, f"npu payload {field}.inputs"))
            )
            for src in inputs:
                last_use[src] = i
            parsed.append((i, field, node, inputs))
        keep = set(self.heads) | {i for i, k in enumerate(kinds) if k != "kernel"}
        kernels = []
        for i, field, node, inputs in parsed:
            attrs = node["attrs"]
            name = expect_key(node, "name", str, f"npu payload {field}")
            shape, dtype = _tensor(attrs, f"{field}.attrs")  # both enforced on every run
            run = _compile_body(attrs.get("body"), len(inputs), f"npu payload {field}.attrs")
            record = _dispatch_record(attrs.get("dispatch", {}), f"npu payload {field}.attrs.dispatch")
            event = {  # the record's own keys first: it cannot override what a profile relies on
                **record,
                "backend": "npu",
                "module": self.region,
                "node": name,
                "composite": expect(attrs.get("composite", ""), str, f"npu payload {field}.attrs.composite"),
            }
            frees = tuple(sorted({s for s in inputs if last_use.get(s) == i and s not in keep}))
            kernels.append(_Kernel(i, name, inputs, run, shape, dtype, frees, event, _describe(name, record)))
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
        for k in self.kernels:
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
        return [values[h] for h in self.heads]


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


BACKEND = register_backend(NpuBackend())
