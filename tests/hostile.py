"""Hostile bundles, made from real ones, and a harness that survives what they do.

Byte-level damage is caught by checksums; what an attacker writes instead is a
well-formed bundle with valid checksums whose *meaning* is hostile: a stride of
10^6, a negative dilation, an in-place write into a model input, a plan that
tiles a scalar into gigabytes, 100,000 blob records over one blob. ``mutate``
draws such bundles from seed bundles (host, NPU and TensorRT partitions of two
small models that between them use every geometry kernel), re-packed with
correct checksums so that meaning-level validation has to catch them.

``Harness`` runs each case in worker processes with an address-space cap and a
per-case timeout, so a crash (SIGSEGV, SIGBUS), a hang or an allocation beyond
the budget is recorded as an outcome instead of taking the caller down. Used by
``tests/test_hostile_bundles.py`` (a few hundred cases in CI) and
``benchmarks/fuzz_campaign.py`` (the 100,000-case campaign in docs/RELIABILITY.md).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
import multiprocessing
import os
import random
import resource
import signal
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
from onnx import helper

from aot.packager.writer import BlobTable, encode_preamble, to_bytes

#: What a hostile case may make a run allocate (load(..., max_memory=...)) and how long it may run.
CASE_MAX_MEMORY = 64 << 20
CASE_MAX_RUN_SECONDS = 1.0
#: Hard limits of a worker: address space above what it had at start, and CPU time per case (wall: 6x).
WORKER_EXTRA_ADDRESS_SPACE = 1536 << 20
CASE_TIMEOUT_SECONDS = 10.0

CLEAN = ("rejected at load", "refused at run", "ran")


@dataclass
class Seed:
    """A real bundle taken apart: its header, its blobs, and inputs it runs on."""

    name: str
    header: dict[str, Any]
    payloads: list[bytes]
    inputs: list[np.ndarray]

    def pack(self, header: dict[str, Any], payloads: list[bytes] | None = None) -> bytes:
        blobs = BlobTable()
        blobs.payloads = [memoryview(p) for p in (payloads if payloads is not None else self.payloads)]
        blobs.digests = [hashlib.sha256(p).digest() for p in blobs.payloads]
        return to_bytes(header, blobs)


def _geometry_model():
    """Every geometry kernel on one small input: pads, pools, resize, tile, expand, slice, gather, matmul."""
    from tests.helpers import make_model, rand  # the test helpers build ONNX models from arrays

    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 0, 1, 0], strides=[1, 2], dilations=[2, 1], name="conv"),
        helper.make_node("ConvTranspose", ["c", "tw"], ["t"], strides=[2, 2], name="deconv"),
        helper.make_node("AveragePool", ["t"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="avg"),
        helper.make_node("Pad", ["a", "pads"], ["p"], name="pad"),
        helper.make_node("Resize", ["p", "", "scales"], ["r"], mode="linear", name="resize"),
        helper.make_node("Slice", ["r", "starts", "ends", "axes"], ["s"], name="slice"),
        helper.make_node("Tile", ["s", "reps"], ["tl"], name="tile"),
        helper.make_node("Expand", ["tl", "eshape"], ["e"], name="expand"),
        helper.make_node("ReduceMean", ["e"], ["m"], axes=[2], keepdims=0, name="mean"),
        helper.make_node("Gather", ["m", "idx"], ["g"], axis=2, name="gather"),
        helper.make_node("MatMul", ["g", "mw"], ["y"], name="matmul"),
    ]
    inits = {
        "w": rand(4, 2, 3, 3, seed=1),
        "tw": rand(4, 2, 2, 2, seed=2),
        "pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64),
        "scales": np.array([1, 1, 1.5, 0.75], np.float32),
        "starts": np.array([1], np.int64),
        "ends": np.array([-1], np.int64),
        "axes": np.array([3], np.int64),
        "reps": np.array([1, 1, 1, 2], np.int64),
        "eshape": np.array([2, 1, 1, 1], np.int64),
        "idx": np.array([0, 2, 3], np.int64),
        "mw": rand(3, 5, seed=3),
    }
    return make_model(nodes, {"x": rand(1, 2, 9, 11)}, ["y"], inits, opset=13)


def seeds() -> list[Seed]:
    """Host, NPU and TensorRT bundles of the small CNN and of the geometry model."""
    import aot
    from tests.conftest import small_cnn_model

    found = []
    models = {"cnn": (small_cnn_model(1, 13), (1, 3, 8, 8)), "geometry": (_geometry_model(), (1, 2, 9, 11))}
    for model_name, (model, shape) in models.items():
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        for targets in (["host"], ["npu"], ["tensorrt"]):
            result = aot.build(model, targets=targets, min_region_size=1)
            payloads = [bytes(p) for p in result.blobs.payloads]
            found.append(Seed(f"{model_name}-{targets[0]}", copy.deepcopy(result.header), payloads, [x]))
    return found


# -- mutations ----------------------------------------------------------------------------

HUGE = [2**31, 2**40, 2**62, 2**63 - 1, -(2**63)]


def hostile_int(rng: random.Random, like: int | None = None) -> int:
    """Values that break geometry: zero, negatives, huge, off by one, scaled."""
    choices = [0, -1, -2, 1, 2, 7, 10**6, -(10**6), *HUGE]
    if like is not None and not isinstance(like, bool):
        choices += [like + 1, like - 1, -like, like * 1000, like * 2**20]
    return rng.choice(choices)


def hostile_value(rng: random.Random, like: Any) -> Any:
    """A value of the same kind as ``like``, chosen to hurt; sometimes another kind entirely."""
    if rng.random() < 0.15:
        return rng.choice([None, True, 0.5, float("nan"), float("inf"), "x\ny", [], [[1]], {"a": 1}, b"\0"])
    if isinstance(like, bool):
        return not like
    if isinstance(like, int):
        return hostile_int(rng, like)
    if isinstance(like, float):
        return rng.choice([0.0, -1.0, float("nan"), float("inf"), -float("inf"), 1e300, 1e-300, like * 1e6])
    if isinstance(like, str):
        return rng.choice(["", "object", "float64", "V8", "reflect", "x" * 5000, "\n\x1b[2J", like + "_"])
    if isinstance(like, list):
        if like and rng.random() < 0.7:
            out = list(like)
            i = rng.randrange(len(out))
            out[i] = hostile_value(rng, out[i])
            return out
        return rng.choice([like[:-1], like + like[-1:] if like else [1], [hostile_int(rng)] * rng.randint(0, 8)])
    return hostile_value(rng, 0)


def _plans(header: dict, payloads: list[bytes]) -> Iterator[tuple[dict, Callable[[dict], None]]]:
    """Every host plan in a bundle (the header's, each TensorRT fallback's), with a way to store it back."""
    yield header["plan"], lambda plan: header.__setitem__("plan", plan)
    for module in header.get("modules", []):
        blob = module.get("payloads", {}).get("fallback")
        if blob is None:
            continue
        record = msgpack.unpackb(payloads[blob])

        def store(plan, record=record, blob=blob):
            record["plan"] = plan
            payloads[blob] = msgpack.packb(record, use_bin_type=True)

        yield record["plan"], store


def _npu_graphs(header: dict, payloads: list[bytes]) -> Iterator[tuple[dict, Callable[[dict], None]]]:
    for module in header.get("modules", []):
        blob = module.get("payloads", {}).get("graph")
        if blob is None:
            continue

        def store(graph, blob=blob):
            payloads[blob] = json.dumps(graph).encode()

        yield json.loads(payloads[blob]), store


def _pick_plan(rng, header, payloads):
    plans = list(_plans(header, payloads))
    return rng.choice(plans)


def mutate_attribute(rng, header, payloads) -> str:
    """One attribute of one instruction (host plan, TensorRT fallback, or NPU kernel body) made hostile."""
    sites = []
    for plan, store in _plans(header, payloads):
        for ins in plan["instructions"]:
            for key in ins.get("attrs", {}):
                sites.append((ins["attrs"], key, plan, store))
    for graph, store in _npu_graphs(header, payloads):
        for node in graph["nodes"]:
            for op in node["attrs"].get("body", []):
                for key in op.get("attrs", {}):
                    sites.append((op["attrs"], key, graph, store))
    if not sites:
        return "no attributes"
    attrs, key, root, store = rng.choice(sites)
    attrs[key] = hostile_value(rng, attrs[key])
    store(root)
    return f"attribute {key}"


def mutate_slots(rng, header, payloads) -> str:
    """Operand, result, free and in-place slots rewired: aliasing, in-place on inputs, early frees."""
    plan, store = _pick_plan(rng, header, payloads)
    instructions = plan["instructions"]
    if not instructions:
        return "empty plan"
    ins = rng.choice(instructions)
    key = rng.choice(["in", "out", "free", "inplace", "outputs", "inputs", "constants"])
    slots = plan["num_slots"]
    if key == "inplace":
        ins["inplace"] = rng.choice([0, 1, 2, -1, 10**9])
    elif key in ("outputs", "inputs"):
        plan[key] = [rng.randrange(max(slots, 1)) for _ in plan[key]] or [0]
    elif key == "constants":
        if plan["constants"]:
            pair = rng.choice(plan["constants"])
            pair[0] = rng.randrange(max(slots, 1))
    else:
        ins[key] = [rng.randrange(max(slots, 1)) for _ in ins.get(key, [0])] or [0]
    store(plan)
    return f"slots {key}"


def mutate_op(rng, header, payloads) -> str:
    """An instruction's op replaced by another kernel (wrong arity, wrong attributes, a view op...)."""
    from runtime_lite.kernels import KERNELS

    plan, store = _pick_plan(rng, header, payloads)
    if not plan["instructions"]:
        return "empty plan"
    rng.choice(plan["instructions"])["op"] = rng.choice(sorted(KERNELS))
    store(plan)
    return "op swapped"


AMPLIFIERS = [
    ("tile", {"repeats": [2**20, 2**20, 1, 1]}),
    ("tile", {"repeats": [1, 1, 4096, 4096]}),
    ("expand", {"shape": [2**16, 2**16, 1, 1]}),
    ("pad", {"pads": [0, 0, 10**5, 10**5, 0, 0, 10**5, 10**5], "mode": "constant", "value": 0.0}),
    # a crop past the axis, then a huge pad (found by the campaign: numpy's output was not d + b + e)
    ("pad", {"pads": [0, 0, -(10**5), -(10**5), 0, 0, 10**5, 2 * 10**5], "mode": "constant", "value": 0.0}),
    ("resize", {"mode": "nearest", "scales": [1, 1, 4096.0, 4096.0], "sizes": None,
                "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}),
    ("resize", {"mode": "linear", "scales": None, "sizes": [1, 1, 2**20, 1],
                "coordinate_transformation_mode": "half_pixel", "nearest_mode": "floor"}),
    ("conv2d", {"strides": [10**6, 1], "pads": [0, 0, 0, 0], "dilations": [-(10**6), 1], "groups": 1}),
    ("conv2d", {"strides": [1, 1], "pads": [10**5, 10**5, 10**5, 10**5], "dilations": [1, 1], "groups": 1}),
    ("max_pool2d", {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [10**6, 0, 10**6, 0],
                    "dilations": [1, 1], "ceil_mode": 0}),
    ("avg_pool2d", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [-5, -5],
                    "ceil_mode": 1, "count_include_pad": 0}),
    ("conv_transpose2d", {"strides": [10**4, 10**4], "pads": [0, 0, 0, 0], "dilations": [1, 1],
                          "output_padding": [0, 0], "groups": 1}),
]  # fmt: skip


def insert_amplifier(rng, header, payloads) -> str:
    """A kernel with enormous or impossible geometry spliced into a plan, reading existing values."""
    plan, store = _pick_plan(rng, header, payloads)
    op, attrs = rng.choice(AMPLIFIERS)
    defined = list(plan["inputs"]) + [pair[0] for pair in plan["constants"]]
    operands = [rng.choice(defined) for _ in range(2 if op.startswith("conv") else 1)]
    plan["num_slots"] += 1
    ins = {"op": op, "name": f"amplifier_{op}", "in": operands, "out": [plan["num_slots"] - 1], "attrs": dict(attrs)}
    plan["instructions"].insert(0, ins)
    store(plan)
    return f"amplifier {op}"


def repeat_instructions(rng, header, payloads) -> str:
    """One instruction repeated thousands of times, its results kept alive (no frees)."""
    plan, store = _pick_plan(rng, header, payloads)
    if not plan["instructions"]:
        return "empty plan"
    ins = copy.deepcopy(plan["instructions"][0])
    ins.pop("free", None)
    ins.pop("inplace", None)
    count = rng.choices([100, 1000, 20000], weights=[6, 3, 1])[0]
    extra = []
    for k in range(count):
        clone = dict(ins, out=[plan["num_slots"] + k])
        extra.append(clone)
    plan["num_slots"] += count
    plan["instructions"] = extra + plan["instructions"]
    store(plan)
    return f"repeated x{count}"


def mutate_records(rng, header, payloads) -> str:
    """Shapes and dtypes of constants, signature and NPU nodes changed, keeping sizes plausible."""
    choice = rng.choice(["constant", "signature", "npu"])
    if choice == "constant" and header["constants"]:
        record = rng.choice(header["constants"])
        key = rng.choice(["shape", "dtype", "blob"])
        if key == "shape":
            n = int(np.prod(record["shape"])) if record["shape"] else 1
            record["shape"] = rng.choice(
                [[n], [1, n], [n, 1, 1], [0, 2**63 - 1], [2**40, 0], list(reversed(record["shape"]))]
            )
        elif key == "dtype":
            record["dtype"] = rng.choice(["int32", "uint32", "float16", "int64", "bool", "object", "complex64"])
        else:
            record["blob"] = rng.randrange(len(payloads) + 2)
        return f"constant {key}"
    if choice == "signature":
        spec = rng.choice(header["signature"]["inputs"] + header["signature"]["outputs"])
        key = rng.choice(["shape", "dtype", "name"])
        spec[key] = {
            "shape": rng.choice([[1], ["N", "M", 8, 8], [-1, 3], [2**62, 2**62], ["N"] * 40]),
            "dtype": rng.choice(["float64", "int8", "object", "bool"]),
            "name": rng.choice(["a/b", "a\nb", "../../etc/passwd", "x" * 10000]),
        }[key]
        return f"signature {key}"
    for graph, store in _npu_graphs(header, payloads):
        node = rng.choice(graph["nodes"])
        key = rng.choice(["shape", "dtype", "inputs", "dispatch"])
        attrs = node["attrs"]
        if key == "shape":
            attrs["shape"] = [rng.choice([[1], [2**40], [0], [1, 2**31, 2**31], [-1]])]
        elif key == "dtype":
            attrs["dtype"] = [rng.choice(["object", "float64", "int8", "V4"])]
        elif key == "inputs":
            node["inputs"] = [[rng.randrange(len(graph["nodes"]) + 1), 0, 0]]
        else:
            attrs["dispatch"] = {"backend": 7, "node": [[]], "wall_s": "x", "module": {"a": 1}, "engine": "X"}
        store(graph)
        return f"npu {key}"
    return "no records"


def mutate_header_field(rng, header, payloads) -> str:
    """Any field anywhere in the header replaced by a value of any kind (the generic mutation)."""
    positions = list(paths(header))
    path = rng.choice(positions)
    target = header
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = hostile_value(rng, target[path[-1]])
    return "header field " + str(path[0])


def paths(node, prefix=()):
    """Every (container, key) position inside a decoded record, for structured mutation."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield prefix + (i,)
            yield from paths(v, prefix + (i,))


def mutate_counts(rng, header, payloads) -> str:
    """Issue 29's structural lies: a result slot too many or too few, two modules with one id, a constant
    whose non-zero dims span more than numpy can represent."""
    choice = rng.choice(["results", "module ids", "empty huge constant"])
    if choice == "results":
        plan, store = _pick_plan(rng, header, payloads)
        if not plan["instructions"]:
            return "empty plan"
        ins = rng.choice(plan["instructions"])
        if rng.random() < 0.5 or len(ins["out"]) < 2:
            ins["out"] = ins["out"] + [plan["num_slots"]]
            plan["num_slots"] += 1
        else:
            ins["out"] = ins["out"][:-1]
        store(plan)
    elif choice == "module ids" and len(header.get("modules", [])) > 1:
        header["modules"][-1]["id"] = header["modules"][0]["id"]
    elif header["constants"]:
        record = rng.choice(header["constants"])
        record["shape"] = rng.choice([[0, 2**40, 2**40], [2**40, 0, 2**30], [0] + [2**20] * 3])
    return f"counts {choice}"


MUTATIONS: dict[str, Callable[..., str]] = {
    "counts": mutate_counts,
    "attribute": mutate_attribute,
    "slots": mutate_slots,
    "op": mutate_op,
    "amplifier": insert_amplifier,
    "repeat": repeat_instructions,
    "records": mutate_records,
    "header field": mutate_header_field,
}


def raw_attack(rng: random.Random, seed: Seed) -> tuple[str, bytes]:
    """Attacks on the container itself: blob records, nesting, object counts, damaged bytes."""
    from runtime_lite.format.reader import read_bundle

    kind = rng.choice(["blob records", "nested", "empty maps", "bytes"])
    bundle = seed.pack(seed.header)
    if kind == "bytes":
        raw = bytearray(bundle)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(raw))
            raw[i] ^= 1 << rng.randrange(8)
        if rng.random() < 0.3:
            raw = raw[: rng.randrange(len(raw))]
        return kind, bytes(raw)
    header = read_bundle(bundle, verify=False).header  # with the blob records the writer laid out
    data = bundle[len(encode_preamble(header)) :]  # offsets are relative to here, so a new preamble fits
    if kind == "blob records":
        biggest = max(header["blobs"], key=lambda r: r["size"])
        header["blobs"] = header["blobs"] + [dict(biggest)] * rng.choice([1, 1000, 100_000])
    elif kind == "nested":
        nested: Any = "x"
        for _ in range(rng.choice([100, 500, 5000])):
            nested = [nested]
        header["model"] = {"name": nested}
    else:
        header["padding"] = [{}] * rng.choice([10**5, 10**6])
    try:
        return kind, encode_preamble(header) + data
    except (ValueError, TypeError):  # nesting beyond what msgpack itself writes: nothing to load
        return kind, b""


def mutate(rng: random.Random, seed: Seed) -> tuple[str, bytes]:
    """One hostile bundle drawn from ``seed``: (what was done, the bundle's bytes)."""
    if rng.random() < 0.1:
        kind, data = raw_attack(rng, seed)
        return f"{seed.name}: {kind}", data
    header = copy.deepcopy(seed.header)
    payloads = list(seed.payloads)
    done = []
    for _ in range(rng.choice([1, 1, 2, 3])):  # sometimes several at once
        try:
            done.append(MUTATIONS[rng.choice(list(MUTATIONS))](rng, header, payloads))
        except (KeyError, TypeError, AttributeError, IndexError, ValueError, OverflowError):
            break  # an earlier mutation broke the structure this one walks: the bundle is hostile enough
    what = " + ".join(done) or "unchanged"
    try:
        return f"{seed.name}: {what}", seed.pack(header, payloads)
    except (TypeError, ValueError, OverflowError):
        return f"{seed.name}: {what} (not encodable)", b""


# -- the harness ----------------------------------------------------------------------------


def _classify(data: bytes, inputs: list[np.ndarray]) -> str:
    """Load and run one bundle in this (worker) process; the outcome in a few words."""
    import runtime_lite
    from runtime_lite import BundleError, ExecutionError, InputError
    from runtime_lite.execution.limits import BudgetExceeded

    def one_line(e: BaseException) -> str | None:
        text = str(e)
        return None if "\n" not in text and "\r" not in text else f"multi-line message from {type(e).__name__}"

    try:
        module = runtime_lite.load(data, max_memory=CASE_MAX_MEMORY, max_run_seconds=CASE_MAX_RUN_SECONDS)
    except BundleError as e:
        return one_line(e) or "rejected at load"
    except BaseException as e:  # noqa: BLE001 - every other exception is a finding
        return f"FAIL load raised {type(e).__name__}: {str(e)[:200]}"
    try:
        outputs = module.run(inputs)
    except (ExecutionError, InputError) as e:
        cause = e.__cause__
        if isinstance(cause, MemoryError) and not isinstance(cause, BudgetExceeded):
            return f"FAIL allocation beyond the budget: {str(e)[:200]}"
        return one_line(e) or "refused at run"
    except BaseException as e:  # noqa: BLE001
        return f"FAIL run raised {type(e).__name__}: {str(e)[:200]}"
    if not all(type(o) is np.ndarray and o.flags.writeable for o in outputs):
        return "FAIL an output the caller does not own"
    return "ran"


def _worker(connection, address_space: int) -> None:
    import logging

    logging.disable(logging.WARNING)  # the cases' fallback and cache warnings: outcomes are what is counted
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (address_space, hard))
    while True:
        job = connection.recv()
        if job is None:
            return
        data, inputs, family = job
        connection.send(CLASSIFIERS[family](data, inputs))


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process (0 if it is gone), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _address_space_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class Harness:
    """Cases run in worker processes that may die; each outcome is counted, each failure kept."""

    workers: int = 2
    timeout: float = CASE_TIMEOUT_SECONDS
    outcomes: Counter = field(default_factory=Counter)
    failures: list[tuple[str, str, bytes]] = field(default_factory=list)
    seconds: float = 0.0
    #: How workers start: "fork" (fast), or "spawn" where the caller's process already ran an engine whose
    #: threads a forked child would inherit without (OpenVINO's: a forked worker hangs in it).
    start_method: str = "fork"

    def __post_init__(self) -> None:
        self._context = multiprocessing.get_context(self.start_method)
        self._pool: list[Any] = [None] * self.workers

    def _start(self, i: int):
        parent, child = self._context.Pipe()
        process = self._context.Process(
            target=_worker, args=(child, _address_space_now() + WORKER_EXTRA_ADDRESS_SPACE), daemon=True
        )
        process.start()
        child.close()
        self._pool[i] = (process, parent)
        return self._pool[i]

    def run(self, cases: Iterator[tuple[str, bytes, list[np.ndarray]]]) -> None:
        """Run every case; outcomes go to ``outcomes`` (by kind), failures to ``failures``."""
        start = time.perf_counter()
        busy: dict[int, tuple[str, bytes, float]] = {}
        cases = iter(cases)
        exhausted = False
        while not exhausted or busy:
            for i in range(self.workers):
                if i in busy or exhausted:
                    continue
                try:
                    what, data, inputs, *family = next(cases)  # a fourth item names the family (default: bundle)
                except StopIteration:
                    exhausted = True
                    break
                if not data:
                    self.outcomes["not encodable"] += 1
                    continue
                process, connection = self._pool[i] or self._start(i)
                connection.send((data, inputs, family[0] if family else "bundle"))
                busy[i] = (what, data, time.monotonic(), _cpu_seconds(process.pid))
            for i in list(busy):
                process, connection = self._pool[i]
                what, data, started, cpu_at_start = busy[i]
                if connection.poll(0.005):
                    try:
                        self._record(what, data, connection.recv())
                    except EOFError:
                        self._died(i, what, data)
                    del busy[i]
                elif not process.is_alive():
                    self._died(i, what, data)
                    del busy[i]
                elif self._hung(process.pid, started, cpu_at_start):
                    process.kill()
                    process.join()
                    self._pool[i] = None
                    self._record(what, data, f"FAIL hang (over {self.timeout:.0f} s)")
                    del busy[i]
        self.seconds += time.perf_counter() - start

    def _hung(self, pid: int, started: float, cpu_at_start: float) -> bool:
        """Over the timeout in CPU time (a loaded machine stretches wall time, not work), or 6x in wall time."""
        wall = time.monotonic() - started
        if wall <= self.timeout:
            return False
        return wall > 6 * self.timeout or _cpu_seconds(pid) - cpu_at_start > self.timeout

    def _died(self, i: int, what: str, data: bytes) -> None:
        process, _ = self._pool[i]
        process.join()
        code = process.exitcode
        self._pool[i] = None
        name = signal.Signals(-code).name if code is not None and code < 0 else f"exit {code}"
        self._record(what, data, f"FAIL crash ({name})")

    def _record(self, what: str, data: bytes, outcome: str) -> None:
        self.outcomes[outcome.split(":")[0] if outcome.startswith("FAIL") else outcome] += 1
        if outcome.startswith("FAIL"):
            self.failures.append((what, outcome, data))

    def close(self) -> None:
        for entry in self._pool:
            if entry is not None:
                process, connection = entry
                try:
                    connection.send(None)
                except OSError:
                    pass
                process.join(timeout=2)
                if process.is_alive():
                    process.kill()
        self._pool = [None] * self.workers


def _isolated_target(connection, address_space, fn, args):
    resource.setrlimit(resource.RLIMIT_AS, (address_space, resource.getrlimit(resource.RLIMIT_AS)[1]))
    try:
        connection.send(("returned", fn(*args)))
    except BaseException as e:  # noqa: BLE001 - the caller decides what is acceptable
        connection.send(("raised", f"{type(e).__name__}: {e}"))


def isolated(fn: Callable[..., Any], *args: Any, timeout: float = 30.0) -> tuple[str, Any]:
    """``fn(*args)`` in a forked child with an address-space cap and a timeout, so a regression fails a test
    instead of crashing, hanging or exhausting CI. Returns ("returned", value), ("raised", "Type: message"),
    ("crashed", signal name) or ("hung", seconds)."""
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    process = context.Process(
        target=_isolated_target, args=(child, _address_space_now() + WORKER_EXTRA_ADDRESS_SPACE, fn, args)
    )
    process.start()
    child.close()
    try:
        if parent.poll(timeout):
            try:
                return parent.recv()
            except EOFError:
                pass
        else:
            process.kill()
            return "hung", timeout
        process.join()
        code = process.exitcode
        return "crashed", signal.Signals(-code).name if code is not None and code < 0 else f"exit {code}"
    finally:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()


def cases(seed_list: list[Seed], count: int, rng: random.Random) -> Iterator[tuple[str, bytes, list[np.ndarray]]]:
    for _ in range(count):
        seed = rng.choice(seed_list)
        what, data = mutate(rng, seed)
        yield what, data, seed.inputs


# -- onnxruntime recipes (issue 27): a family of its own ----------------------------------------------------
#
# An onnxruntime module hands its recipe (ONNX protobuf) to onnxruntime, a C++ parser that would
# read external-data paths and run custom-domain kernels; runtime_lite checks the recipe first
# (runtime_lite/backends/onnxruntime/recipe_check.py). These mutations attack that check and,
# through what it admits, onnxruntime itself.

HOSTILE_LOCATIONS = ["../../../../etc/passwd", "/etc/shadow", "*/_ORT_MEM_ADDR_/*", "aot-bundle-weights/../x", ""]
HOSTILE_OPS = ["If", "Loop", "Scan", "FusedConv", "Identity", "", "Conv", "Gather", "Expand", "Reshape", "Resize"]


def onnxruntime_seeds(target: str = "onnxruntime") -> list[Seed]:
    """onnxruntime bundles of the small CNN and of the geometry model (and a wide layer: external weights);
    ``target`` another backend that runs the same recipes (``openvino``, ``auto``)."""
    import aot
    from tests.conftest import small_cnn_model

    found = []
    models = {"cnn": (small_cnn_model(1, 13), (1, 3, 8, 8)), "geometry": (_geometry_model(), (1, 2, 9, 11))}
    for model_name, (model, shape) in models.items():
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        result = aot.build(model, targets=[target], min_region_size=1, log=None)
        payloads = [bytes(p) for p in result.blobs.payloads]
        found.append(Seed(f"{model_name}-{target}", copy.deepcopy(result.header), payloads, [x]))
    return found


def _recipe_attack(rng: random.Random, model) -> str:
    """One change to the parsed recipe (an onnx ModelProto), chosen to hurt; what was done."""
    from onnx import TensorProto

    graph = model.graph
    kind = rng.choice(["location", "op", "domain", "opset", "attribute", "dims", "data_type", "ir"])
    if kind == "location" and graph.initializer:
        tensor = rng.choice(graph.initializer)
        tensor.data_location = TensorProto.EXTERNAL
        del tensor.external_data[:]
        entry = tensor.external_data.add()
        entry.key, entry.value = rng.choice(["location", "offset", "length", "checksum"]), rng.choice(HOSTILE_LOCATIONS)
        return f"initializer {tensor.name} external {entry.key}={entry.value!r}"
    if kind == "op" and graph.node:
        node = rng.choice(graph.node)
        node.op_type = rng.choice(HOSTILE_OPS)
        return f"node {node.name} op {node.op_type!r}"
    if kind == "domain" and graph.node:
        node = rng.choice(graph.node)
        node.domain = rng.choice(["com.microsoft", "ai.onnx.ml", "ai.onnx", "evil"])
        return f"node {node.name} domain {node.domain!r}"
    if kind == "opset":
        model.opset_import[0].version = rng.choice([1, 7, 12, 13, 21, 22, 99, -1, 2**40])
        return f"opset {model.opset_import[0].version}"
    if kind == "ir":
        model.ir_version = rng.choice([0, 3, 10, 11, 2**40])
        return f"ir_version {model.ir_version}"
    if kind == "attribute":
        nodes = [n for n in graph.node if n.attribute]
        if nodes:
            node = rng.choice(nodes)
            attribute = rng.choice(node.attribute)
            if attribute.ints:
                attribute.ints[rng.randrange(len(attribute.ints))] = hostile_int(rng)
            else:
                attribute.i = hostile_int(rng)
            return f"node {node.name} attribute {attribute.name} hostile"
    tensors = list(graph.initializer)
    if tensors:
        tensor = rng.choice(tensors)
        if kind == "dims" and tensor.dims:
            tensor.dims[rng.randrange(len(tensor.dims))] = hostile_int(rng)
            return f"initializer {tensor.name} dims {list(tensor.dims)}"
        tensor.data_type = rng.choice([0, 2, 7, 8, 11, 16, 99])
        return f"initializer {tensor.name} data_type {tensor.data_type}"
    return "unchanged"


def _weights_attack(rng: random.Random, specs: dict) -> str:
    """One change to the compile_specs' weight references or recipe constants."""
    weights = specs.get("weights") or []
    if weights and rng.random() < 0.7:
        ref = rng.choice(weights)
        key = rng.choice(["name", "payload", "constant"])
        ref[key] = hostile_value(rng, ref[key])
        return f"weight ref {key}={ref[key]!r}"
    specs["recipe_constants"] = [{"shape": [hostile_int(rng)], "dtype": "float32", "offset": 0, "nbytes": 4}]
    specs.setdefault("weights", []).append({"name": "extra", "payload": "recipe_weights", "constant": 0})
    return "a recipe constant beyond its payload"


def mutate_onnxruntime(rng: random.Random, seed: Seed) -> tuple[str, bytes]:
    """One hostile bundle from an onnxruntime seed: its recipe or weight references attacked."""
    import onnx

    header = copy.deepcopy(seed.header)
    payloads = list(seed.payloads)
    record = header["modules"][0]
    index = record["payloads"]["recipe"]
    kind = rng.choice(["recipe", "recipe", "recipe", "bytes", "weights"])
    if kind == "weights":
        what = _weights_attack(rng, record["compile_specs"])
    elif kind == "bytes":
        raw = bytearray(payloads[index])
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(len(raw))
            raw[i] ^= 1 << rng.randrange(8)
        if rng.random() < 0.3:
            raw = raw[: rng.randrange(len(raw))]
        payloads[index] = bytes(raw)
        what = "recipe bytes flipped"
    else:
        model = onnx.load_from_string(payloads[index])
        what = " + ".join(_recipe_attack(rng, model) for _ in range(rng.choice([1, 1, 2])))
        try:
            payloads[index] = model.SerializeToString()
        except (ValueError, TypeError) as e:  # protobuf refuses to encode it: nothing to load
            return f"{seed.name}: {what} (not encodable: {e})", b""
    try:
        return f"{seed.name}: {what}", seed.pack(header, payloads)
    except (TypeError, ValueError, OverflowError):
        return f"{seed.name}: {what} (not encodable)", b""


def onnxruntime_cases(
    seed_list: list[Seed], count: int, rng: random.Random
) -> Iterator[tuple[str, bytes, list[np.ndarray]]]:
    for _ in range(count):
        seed = rng.choice(seed_list)
        what, data = mutate_onnxruntime(rng, seed)
        yield what, data, seed.inputs


# -- issue 29: the budget family ------------------------------------------------------------------
#
# A chain spliced into a seed's host plan: the input tiled to 1 to 60 MiB (inside the 64 MiB
# budget), perhaps cast to another dtype, then any kernel (with its sample attributes, sometimes
# one made hostile) applied to it one to four times, every result kept alive. Each case runs under
# tracemalloc: whatever the kernel, the run's traced peak must stay within the budget (plus
# numpy's fixed overheads), i.e. the plan refused the instruction before its memory was asked for.

#: What numpy allocates besides what a cost counts (ufunc buffers, array headers), and the
#: signature checks' copies of the (small) outputs.
BUDGET_SLACK = 2 << 20


@functools.cache
def _sample_attributes() -> dict[str, dict[str, Any]]:
    """op -> (number of operands, attributes) of its first sample in tests/kernel_samples.py."""
    from tests.kernel_samples import attributes, kernel_of, samples

    found: dict[str, Any] = {}
    for case, (operands, given) in sorted(samples().items()):
        op = kernel_of(case)
        found.setdefault(op, (len(operands), attributes(case, given)))
    return found


def insert_budget_chain(rng: random.Random, header: dict, payloads: list[bytes]) -> str:
    from runtime_lite.kernels import KERNELS

    plan = header["plan"]
    source = plan["inputs"][0]
    x = header["signature"]["inputs"][0]
    in_bytes = math.prod(d if isinstance(d, int) else 1 for d in x["shape"]) * 4
    target = rng.choice([1, 8, 24, 40, 60]) << 20
    rows = rng.choice([64, 128, 256, 512])
    repeats = [1] * (len(x["shape"]) - 2) + [rows, max(1, target // (in_bytes * rows))]
    slot = plan["num_slots"]
    chain = [{"op": "tile", "name": "budget_tile", "in": [source], "out": [slot], "attrs": {"repeats": repeats}}]
    current, slot = slot, slot + 1
    if rng.random() < 0.4:
        to = rng.choice(["bool", "int8", "float16", "float64", "int64", "int32"])
        chain.append({"op": "cast", "name": "budget_cast", "in": [current], "out": [slot], "attrs": {"to": to}})
        current, slot = slot, slot + 1
    op = rng.choice(sorted(_sample_attributes()))
    arity, attrs = _sample_attributes()[op]
    attrs = copy.deepcopy(attrs)
    if attrs and rng.random() < 0.3:
        name = rng.choice(sorted(attrs))
        attrs[name] = hostile_value(rng, attrs[name])
    try:
        outputs = KERNELS[op].result_count(attrs)
    except (TypeError, KeyError, ValueError, AttributeError):
        outputs = 1
    for k in range(rng.choice([1, 1, 2, 4])):
        operands = [rng.choice([current, current, source]) for _ in range(arity)]
        out = list(range(slot, slot + outputs))
        chain.append({"op": op, "name": f"budget_{op}_{k}", "in": operands, "out": out, "attrs": attrs})
        slot += outputs
    plan["num_slots"] = slot
    plan["instructions"] = chain + plan["instructions"]
    return f"budget chain {op} on {target >> 20} MiB"


def budget_cases(seed_list: list[Seed], count: int, rng: random.Random) -> Iterator[tuple]:
    """Budget-family cases from the host seeds: (what, bundle, inputs, "budget")."""
    hosts = [s for s in seed_list if s.name.endswith("-host")]
    for _ in range(count):
        seed = rng.choice(hosts)
        header, payloads = copy.deepcopy(seed.header), list(seed.payloads)
        what = insert_budget_chain(rng, header, payloads)
        try:
            data = seed.pack(header, payloads)
        except (TypeError, ValueError, OverflowError):
            data = b""
        yield f"{seed.name}: {what}", data, seed.inputs, "budget"


def _classify_budget(data: bytes, inputs: list[np.ndarray]) -> str:
    """``_classify`` under tracemalloc: also a failure if the traced peak passed the budget."""
    import tracemalloc

    tracemalloc.start()
    try:
        outcome = _classify(data, inputs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if not outcome.startswith("FAIL") and peak > CASE_MAX_MEMORY + BUDGET_SLACK:
        return f"FAIL over budget: traced peak {peak:,} bytes ({outcome})"
    return outcome


# -- issue 29: the cache family ------------------------------------------------------------------
#
# An engine cache in a fresh directory, used by a legitimate process (put, get, get_or_build,
# timing cache, eviction) while an attacker who can write the directory plants symlinks at any
# component, forges entries (another key's engine with a rewritten record, a matching sha256,
# a random HMAC), squats lock names with directories, FIFOs and links, damages and deletes files
# and plants oversized timing caches. Invariants: nothing outside the cache is written; every
# engine served under a key is one the legitimate process stored under that key; no timing cache
# is read from outside the cache or beyond its bound; no operation raises or hangs.


def _tree(path: Path) -> list[tuple[str, int, str]]:
    found = []
    for item in sorted(path.rglob("*")):
        if item.is_file() and not item.is_symlink():
            found.append(
                (str(item.relative_to(path)), item.stat().st_size, hashlib.sha256(item.read_bytes()).hexdigest())
            )
        else:
            found.append((str(item.relative_to(path)), -1, ""))
    return found


def _through_link(path: Path, top: Path) -> bool:
    """Whether ``path`` (under ``top``) passes through a symlink: the attacker works inside the cache only,
    so that what lands outside it can only have been written by the cache's own code."""
    for parent in [path, *path.parents]:
        if parent == top:
            return False
        if parent.is_symlink():
            return True
    return True


def _plant(path: Path, data: bytes | str) -> None:
    """Replace whatever is at ``path`` (a FIFO would block a plain write) with a file holding ``data``."""
    if path.is_symlink() or path.exists() and not path.is_dir():
        path.unlink()
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def _regular_bytes(path: Path) -> bytes:
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise OSError("not a regular file")
    return path.read_bytes()


def _attack(rng: random.Random, root: Path, elsewhere: Path, keys: list[str], tmp: Path) -> str:
    """One thing someone with write access to the cache directory does; failures to do it are ignored."""
    from runtime_lite.backends.tensorrt.engine_cache import LAYOUT

    entries = root / LAYOUT
    if _through_link(entries, tmp) and rng.random() < 0.7:
        kind = "restore component"  # mostly undo a planted link, so attacks on entries keep happening
    else:
        kind = rng.choice(["link component", "restore component", "forge", "plant engine", "link engine", "squat lock",
                           "damage", "delete", "plant timing", "fifo"])  # fmt: skip
    if kind not in ("link component", "restore component") and (
        _through_link(entries, tmp) or _through_link(root / "timing", tmp)
    ):
        return kind + " (skipped: would write through a link)"
    key, other = rng.choice(keys), rng.choice(keys)
    try:
        if kind == "link component":
            component = rng.choice(["", "tensorrt-engines", "tensorrt-engines/v1", "timing"])
            path = root / component if component else root
            if _through_link(path.parent, tmp):
                return kind + " (skipped: would write through a link)"
            if path.is_dir() and not path.is_symlink():
                path.rename(tmp / f"moved-{rng.getrandbits(32)}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(elsewhere, target_is_directory=True)
        elif kind == "restore component":
            for path in (root / "timing", entries, entries.parent, root):
                if path.is_symlink():
                    path.unlink()
        elif kind == "forge":
            engine = _regular_bytes(entries / f"{other}.engine")
            record = json.loads(_regular_bytes(entries / f"{other}.json"))
            record["key"] = key
            if rng.random() < 0.5:
                record["hmac"] = hashlib.sha256(rng.randbytes(8)).hexdigest()
            _plant(entries / f"{key}.engine", engine)
            _plant(entries / f"{key}.json", json.dumps(record))
        elif kind in ("plant engine", "link engine"):
            entries.mkdir(parents=True, exist_ok=True)
            target = entries / f"{key}.engine"
            target.unlink(missing_ok=True)
            if kind == "link engine":
                target.symlink_to(elsewhere / "secret.engine")
                data = (elsewhere / "secret.engine").read_bytes()
            else:
                data = b"planted " + rng.randbytes(16)
                _plant(target, data)
            record = {"key": key, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "created": 0,
                      "ingredients": {}, "hmac": hashlib.sha256(rng.randbytes(8)).hexdigest()}  # fmt: skip
            _plant(entries / f"{key}.json", json.dumps(record))
        elif kind == "squat lock":
            entries.mkdir(parents=True, exist_ok=True)
            lock = entries / f"{key}.lock"
            if lock.is_dir() and not lock.is_symlink():
                return kind
            lock.unlink(missing_ok=True)
            how = rng.choice(["dir", "fifo", "link"])
            if how == "dir":
                (lock / "inside").mkdir(parents=True)
            elif how == "fifo":
                os.mkfifo(lock)
            else:
                lock.symlink_to(elsewhere / "lock-victim")
        elif kind == "damage":
            path = entries / f"{key}.{rng.choice(['engine', 'json'])}"
            data = _regular_bytes(path)
            _plant(path, data[: rng.randrange(len(data) + 1)] + rng.choice([b"", b"x", b"\0" * 100]))
        elif kind == "delete":
            (entries / f"{key}.{rng.choice(['engine', 'json', 'lock'])}").unlink()
        elif kind == "plant timing":
            timing = root / "timing"
            timing.mkdir(parents=True, exist_ok=True)
            path = timing / "trt-x.cache"
            path.unlink(missing_ok=True)
            if rng.random() < 0.5:
                path.symlink_to(elsewhere / "secret.engine")
            else:
                with open(path, "wb") as f:
                    f.truncate(rng.choice([1 << 30, 3 << 30]))  # sparse
        else:
            entries.mkdir(parents=True, exist_ok=True)
            path = entries / f"{key}.{rng.choice(['engine', 'json'])}"
            path.unlink(missing_ok=True)
            os.mkfifo(path)
    except (OSError, ValueError):
        pass
    return kind


def cache_scenario(seed: int) -> str:
    """One attacked cache's life (see above); "ran" or "FAIL ..." naming the broken invariant."""
    import tempfile

    from runtime_lite.backends.tensorrt.engine_cache import MAX_TIMING_CACHE_BYTES, EngineCache, engine_key

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        root, elsewhere = tmp / "cache", tmp / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "secret.engine").write_bytes(b"SECRET ENGINE " * 64)
        before = _tree(elsewhere)
        key_file = tmp / "private" / "engine-cache.key"
        keys = [engine_key(bytes([i]), {}) for i in range(3)]
        legit: dict[str, set[bytes]] = {k: set() for k in keys}
        secret = (elsewhere / "secret.engine").read_bytes()
        cache = EngineCache(root, key_file=key_file)
        done = []
        for step in range(rng.randint(4, 24)):
            if rng.random() < 0.45:
                done.append(_attack(rng, root, elsewhere, keys, tmp))
                continue
            if rng.random() < 0.3:
                cache = EngineCache(root, key_file=key_file, max_bytes=rng.choice([1 << 30, 4096]))  # another process
            key = rng.choice(keys)
            fresh = f"{key[:8]} build {step} ".encode() * rng.choice([1, 50])
            kind = rng.choice(["put", "get", "get_or_build", "timing", "entries"])
            done.append(kind)
            try:
                if kind == "put":
                    legit[key].add(fresh)
                    cache.put(key, fresh, {"step": step})
                elif kind == "get":
                    got = cache.get(key)
                    if got is not None and got not in legit[key]:
                        return f"FAIL served an engine never stored under its key: {got[:24]!r} after {done}"
                elif kind == "get_or_build":
                    legit[key].add(fresh)
                    got, _ = cache.get_or_build(key, lambda fresh=fresh: fresh, {"step": step})
                    if got not in legit[key]:
                        return f"FAIL get_or_build gave an engine never stored under its key: {got[:24]!r} after {done}"
                elif kind == "timing":
                    cache.write_timing("trt-x.cache", fresh)
                    got = cache.read_timing("trt-x.cache")
                    if got == secret or len(got) > MAX_TIMING_CACHE_BYTES:
                        return f"FAIL timing cache read from outside the cache or unbounded: after {done}"
                else:
                    cache.entries()
                    cache.evict()
            except Exception as e:  # noqa: BLE001 - every exception is a finding
                return f"FAIL cache {kind} raised {type(e).__name__}: {str(e)[:160]} after {done}"
        if _tree(elsewhere) != before:
            return f"FAIL something was written outside the cache: after {done}"
    return "ran"


def cache_cases(count: int, rng: random.Random) -> Iterator[tuple]:
    """Cache-family cases: (what, the scenario's seed as bytes, None, "cache")."""
    for _ in range(count):
        seed = rng.getrandbits(48)
        yield f"cache scenario {seed}", json.dumps({"seed": seed}).encode(), None, "cache"


def _classify_cache(data: bytes, inputs: Any) -> str:
    try:
        return cache_scenario(json.loads(data)["seed"])
    except Exception as e:  # noqa: BLE001 - the scenario itself broke: recorded, never a dead worker
        return f"FAIL cache scenario raised {type(e).__name__}: {str(e)[:160]}"


#: How a worker judges a case of each family (the fourth item of a case; "bundle" by default).
CLASSIFIERS: dict[str, Callable[[bytes, Any], str]] = {
    "bundle": _classify,
    "budget": _classify_budget,
    "cache": _classify_cache,
}
