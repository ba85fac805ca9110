"""A hostile-client campaign against a running ``runtime-lite serve``, over loopback, bounded in cases and time.

Shared by tests/test_serving_ray.py (a small campaign in CI) and benchmarks/bench_serving_hostile.py
(a large one). Families of attack, each a generator of cases sent over raw sockets (so
lengths can lie and bodies can stall):

- ``malformed``: JSON damaged byte-wise and field-wise (hostile values in every field);
- ``nested``: nesting from 10 to 100,000 deep, in every position;
- ``shapes``: impossible shapes (huge dims, zeros, ranks up to 100, non-integers);
- ``lengths``: Content-Length, Inference-Header-Content-Length and binary_data_size that lie;
- ``bombs``: gzip and deflate bodies inflating far past what they declare, damaged streams;
- ``slow``: connections that send headers and part of a body, then wait, beside good clients;
- ``concurrency``: hostile and good requests from many threads at once.

A case *escapes* when the server answers it with a 5xx, with an error that is not one
line of JSON (ours) or an HTTP error of HAProxy's own (408, 400 for broken framing),
with nothing at all, or not within its deadline. After each family the server must
still answer a good request bit-identically, and its replicas' peak RSS must have grown
by less than ``rss_bound`` (read from /proc: VmHWM, the kernel's high-water mark).
Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import collections
import functools
import gzip
import json
import random
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HOST = "127.0.0.1"
MODEL = "fixed"  # unbatched: a good answer must be bit-identical to a direct run
GOOD_X = [0.25, -1.5, 3.0, 0.125]


@dataclass
class Case:
    family: str
    label: str
    raw: bytes  # the whole request as sent (head and body); ``stall`` sends it, then waits
    stall: bool = False  # the body is incomplete on purpose: the server must time the request out
    statuses: tuple[int, ...] = (400, 413, 415)  # what a correct server answers


@dataclass
class Outcome:
    cases: int = 0
    escapes: list[str] = field(default_factory=list)
    statuses: collections.Counter = field(default_factory=collections.Counter)
    seconds: float = 0.0


def http_request(path: str, body: bytes, headers: dict[str, str] | None = None, length: int | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {HOST}", "Connection: close"]
    lines.append(f"Content-Length: {len(body) if length is None else length}")
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def infer_path(model: str = MODEL) -> str:
    return f"/v2/models/{model}/infer"


def good_body(x: list[float] = GOOD_X) -> bytes:
    return json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": x}]}).encode()


def send(raw: bytes, port: int, timeout: float) -> tuple[int | None, bytes]:
    """Send ``raw`` and read the answer until the server closes: (status, or None for no answer; body)."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        try:
            sock.sendall(raw)
        except OSError:
            pass  # the server may refuse and close before the body is sent: its answer is what counts
        chunks = []
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except (TimeoutError, OSError):
            pass
    data = b"".join(chunks)
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        return int(head.split(b" ", 2)[1]), body
    except (IndexError, ValueError):
        return None, data


def judge(case: Case, status: int | None, body: bytes) -> str | None:
    """Why the answer is an escape, or None if it is what a correct server answers."""
    if status is None:
        return "no answer"
    if case.stall:
        return None if status in (408, 413) else f"stalled body answered {status}"
    if status >= 500:
        return f"{status}: {body[:200]!r}"
    if status not in case.statuses:
        return f"unexpected {status}: {body[:200]!r}"
    if status == 200:  # a mutation that left a valid request (a digit for a digit, true for 1.0)
        if b'"outputs"' not in body:
            return f"200 without outputs: {body[:200]!r}"
        if b"NaN" in body or b"Infinity" in body:  # no case sends NaN on purpose: null or an overflow got through
            return f"200 computed from values that are not numbers: {body[:200]!r}"
        return None
    if status == 400 and b'"error"' not in body and case.family == "lengths":
        return None  # HAProxy's own 400 for framing it cannot parse
    try:
        message = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return f"{status} without a JSON error: {body[:200]!r}"
    if "\n" in message or len(message) > 2000:
        return f"{status} error is not one line: {message[:200]!r}"
    return None


# --- families --------------------------------------------------------------------------------------------

HOSTILE_VALUES: list[object] = [
    None, True, 0, -1, 2**70, -(2**70), 1.5, float("inf"), "", "x" * 1000, "\u0000\n\u2028", [], {},
    [None], [[]], {"a": None}, [2**70], [-1], [0] * 100, ["FP32"], "FP32", "BYTES", "x",
]  # fmt: skip
FIELDS = ["name", "shape", "datatype", "data", "parameters"]


def _request(**fields: object) -> dict:
    return {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": GOOD_X, **fields}]}


def _json(value: object) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


def malformed(rng: random.Random, n: int) -> Iterator[Case]:
    base = good_body()
    for i in range(n):
        kind = i % 4
        if kind == 0:  # a hostile value in one field of the input
            field_name = rng.choice(FIELDS)
            body = _json(_request(**{field_name: rng.choice(HOSTILE_VALUES)}))
        elif kind == 1:  # a hostile value in a top-level field
            top = rng.choice(["inputs", "outputs", "parameters", "id"])
            body = _json({**json.loads(base), top: rng.choice(HOSTILE_VALUES)})
        elif kind == 2:  # bytes flipped or cut
            data = bytearray(base)
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            body = bytes(data[: rng.randint(1, len(data))])
        else:  # null, strings, huge numbers among the values
            values: list[object] = list(GOOD_X)
            values[rng.randrange(4)] = rng.choice([None, "1", 2**70, [1], {}, 1e300, True])
            body = _json(_request(data=values))
        # a flip may leave a valid request (a digit for a digit): 200 is then the right answer
        yield Case("malformed", f"{kind}", http_request(infer_path(), body), statuses=(200, 400, 413))


def nested(rng: random.Random, n: int) -> Iterator[Case]:
    for i in range(n):
        depth = rng.choice([10, 65, 100, 990, 1000, 5000, 100_000])
        inner = "[" * depth + "1" + "]" * depth
        where = i % 4
        if where == 0:
            text = inner
        elif where == 1:
            text = f'{{"inputs": {inner}}}'
        elif where == 2:
            text = json.dumps(_request(data="@")).replace('"@"', inner)
        else:
            text = json.dumps({**_request(), "id": "@"}).replace('"@"', inner)
        yield Case("nested", f"depth {depth} at {where}", http_request(infer_path(), text.encode()))


def shapes(rng: random.Random, n: int) -> Iterator[Case]:
    for _ in range(n):
        rank = rng.choice([0, 1, 2, 3, 64, 65, 100])
        dims = [rng.choice([0, 1, 4, 2**31, 2**62, 2**70, -1, 1.5, True, None]) for _ in range(rank)]
        data = rng.choice([[], GOOD_X, [0.0] * rng.randint(0, 64)])
        # the draw can make the one valid shape ([1, 4], with 4 values): then, and only then, 200 is right
        valid = [type(d) for d in dims] == [int, int] and dims == [1, 4] and len(data) == 4
        raw = http_request(infer_path(), _json(_request(shape=dims, data=data)))
        yield Case("shapes", f"rank {rank} {dims[:4]}", raw, statuses=(200,) if valid else (400, 413, 415))


def lengths(rng: random.Random, n: int, stall_ok: bool) -> Iterator[Case]:
    for i in range(n):
        kind = i % 4
        body = good_body()
        if kind == 0:  # Content-Length below the body: the rest is a second, broken request
            raw = http_request(infer_path(), body, length=rng.randint(0, len(body) - 1))
            yield Case("lengths", "short content-length", raw, statuses=(200, 400, 408))
        elif kind == 1 and stall_ok:  # Content-Length beyond the body: the server waits, then times out
            raw = http_request(infer_path(), body, length=len(body) + rng.randint(1, 1 << 20))
            yield Case("lengths", "long content-length", raw, stall=True)
        elif kind == 2:  # Inference-Header-Content-Length lies
            header = _json(
                {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}]}
            )
            blob = np.array(GOOD_X, np.float32).tobytes()
            claimed = rng.choice([-1, 0, len(header) - 1, len(header) + 1, len(header) + 100, 2**70, "x"])
            raw = http_request(infer_path(), header + blob, {"Inference-Header-Content-Length": str(claimed)})
            yield Case("lengths", f"header length {claimed}", raw)
        else:  # binary_data_size lies
            size = rng.choice([0, 15, 17, 2**31, -16, 2**70])
            header = _json(
                {
                    "inputs": [
                        {"name": "x", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": size}}
                    ]
                }
            )
            blob = np.array(GOOD_X, np.float32).tobytes()
            raw = http_request(infer_path(), header + blob, {"Inference-Header-Content-Length": str(len(header))})
            yield Case("lengths", f"binary_data_size {size}", raw)


def _deflate(parts: Iterator[bytes], encoding: str) -> bytes:
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return b"".join(compressor.compress(p) for p in parts) + compressor.flush()


@functools.lru_cache(maxsize=64)
def _bomb(kind: int, encoding: str, mib: int) -> tuple[bytes, str | None]:
    """A compressed body inflating to ``mib`` MiB, and its Inference-Header-Content-Length (compressed once each)."""
    block = 1 << 20
    if kind == 0:  # JSON numbers that would parse to gigabytes of Python objects
        head = b'{"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": ['
        return _deflate(iter([head, *(b"0," * (block // 2) for _ in range(mib)), b"0]}]}"]), encoding), None
    if kind == 1:  # a binary section far past what the header declares
        header = _json(
            {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}]}
        )
        return _deflate(iter([header, *(bytes(block) for _ in range(mib))]), encoding), str(len(header))
    # nested lists, the costliest JSON per byte
    return _deflate(iter([b'{"inputs": [', *(b"[]," * (block // 3) for _ in range(mib)), b"[]]}"]), encoding), None


def bombs(rng: random.Random, n: int, inflated_mib: int) -> Iterator[Case]:
    sizes = sorted({1, min(16, inflated_mib), min(64, inflated_mib), inflated_mib})
    for i in range(n):
        encoding = rng.choice(["gzip", "deflate"])
        kind = i % 4
        mib = rng.choice(sizes)
        headers = {"Content-Encoding": encoding}
        if kind < 3:
            body, header_length = _bomb(kind, encoding, mib)
            if header_length is not None:
                headers["Inference-Header-Content-Length"] = header_length
        else:  # a damaged stream, or the wrong encoding named
            good = gzip.compress(good_body())
            body = rng.choice([good[:-8], good + b"junk", b"\x1f\x8b" + bytes(64), good])
            headers["Content-Encoding"] = rng.choice(["deflate", "br", "gzip, gzip", "gzip"])
        raw = http_request(infer_path(), body, headers)
        yield Case("bombs", f"{kind} {encoding} {mib} MiB", raw, statuses=(200, 400, 413, 415))


def stalled(n: int) -> Iterator[Case]:
    """Headers and half a body, then silence: what 32 such connections did to the server before the fix."""
    body = good_body()
    for i in range(n):
        raw = http_request(infer_path(), body[: len(body) // 2], length=len(body))
        yield Case("slow", f"stalled {i}", raw, stall=True)


# --- running it --------------------------------------------------------------------------------------------


def replica_memory(pids: list[int]) -> dict[int, tuple[int, int]]:
    """pid -> (VmRSS, VmHWM) in bytes, from /proc."""
    found = {}
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        found[pid] = tuple(int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM"))  # type: ignore[assignment]
    return found


@dataclass
class Campaign:
    """The families run one after another against a server on ``port``; ``expected`` is the good answer."""

    port: int
    expected: np.ndarray
    replica_pids: Callable[[], list[int]]
    request_timeout_s: float
    seed: int = 2029
    rss_bound: int = 160 << 20
    log: Callable[[str], None] = print
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def good_answer(self) -> str | None:
        status, body = send(http_request(infer_path(), good_body()), self.port, timeout=30)
        if status != 200:
            return f"good request answered {status}: {body[:200]!r}"
        answer = np.array(json.loads(body)["outputs"][0]["data"], np.float32).reshape(self.expected.shape)
        if not np.array_equal(answer, self.expected):
            return f"good request answered {answer.tolist()}, expected {self.expected.tolist()}"
        return None

    def run_family(self, name: str, cases: Iterable[Case], threads: int = 4) -> Outcome:
        outcome = Outcome()
        baseline = replica_memory(self.replica_pids())
        start = time.perf_counter()
        lock, take = threading.Lock(), threading.Lock()
        queue = iter(cases)  # made as they are sent: a family never holds all its bodies at once

        def worker() -> None:
            while True:
                with take:
                    case = next(queue, None)
                if case is None:
                    return
                timeout = self.request_timeout_s + 15 if case.stall else 60
                began = time.monotonic()
                status, body = send(case.raw, self.port, timeout=timeout)
                why = judge(case, status, body)
                if why is None and time.monotonic() - began > timeout:
                    why = "over its deadline"
                with lock:
                    outcome.cases += 1
                    outcome.statuses[status] += 1
                    if why is not None:
                        outcome.escapes.append(f"{case.family} [{case.label}]: {why}")

        pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        outcome.seconds = time.perf_counter() - start
        self._after(name, outcome, baseline)
        return outcome

    def _after(self, name: str, outcome: Outcome, baseline: dict[int, tuple[int, int]]) -> None:
        self.outcomes[name] = outcome
        wrong = self.good_answer()
        if wrong:
            self.problems.append(f"after {name}: {wrong}")
        after = replica_memory(self.replica_pids())
        for pid, (rss, peak) in after.items():
            before = baseline.get(pid, (rss, rss))[1]
            if peak - before > self.rss_bound:
                self.problems.append(
                    f"after {name}: replica {pid} peak RSS grew {(peak - before) >> 20} MiB (bound {self.rss_bound >> 20})"
                )
        peaks = ", ".join(f"{rss >> 20}/{peak >> 20} MiB" for rss, peak in after.values())
        self.log(
            f"{name}: {outcome.cases} cases in {outcome.seconds:.1f} s, {len(outcome.escapes)} escapes, "
            f"statuses {dict(sorted(outcome.statuses.items(), key=str))}; replicas RSS/peak {peaks}"
        )

    def slow_family(self, stalled_connections: int, good_requests: int) -> Outcome:
        """Stalled bodies on ``stalled_connections`` sockets, while good clients must still be answered."""
        outcome = Outcome()
        baseline = replica_memory(self.replica_pids())
        start = time.perf_counter()
        results: list[tuple[Case, int | None, bytes, float]] = []
        lock = threading.Lock()

        def stall(case: Case) -> None:
            began = time.monotonic()
            status, body = send(case.raw, self.port, timeout=self.request_timeout_s + 15)
            with lock:
                results.append((case, status, body, time.monotonic() - began))

        stallers = [threading.Thread(target=stall, args=(c,), daemon=True) for c in stalled(stalled_connections)]
        for thread in stallers:
            thread.start()
        time.sleep(0.5)  # every stalled connection is open and waiting
        for _ in range(good_requests):
            began = time.monotonic()
            wrong = self.good_answer()
            outcome.cases += 1
            if wrong or time.monotonic() - began > self.request_timeout_s:
                outcome.escapes.append(f"slow: a good request beside stalled ones: {wrong or 'too slow'}")
        for thread in stallers:
            thread.join()
        for case, status, body, seconds in results:
            outcome.cases += 1
            outcome.statuses[status] += 1
            why = judge(case, status, body)
            if why is None and seconds > self.request_timeout_s + 10:
                why = f"answered after {seconds:.0f} s"
            if why is not None:
                outcome.escapes.append(f"slow [{case.label}]: {why}")
        outcome.seconds = time.perf_counter() - start
        self._after("slow", outcome, baseline)
        return outcome

    def run(
        self,
        scale: int,
        bomb_mib: int = 64,
        stalled_connections: int = 70,
        during_concurrency: Callable[[], None] | None = None,
    ) -> dict[str, Outcome]:
        """Every family at ``scale`` cases each (bombs and nesting fewer: each costs a megabyte or more).

        ``during_concurrency`` runs in a thread while the concurrency family does (a SIGHUP reload, say).
        """
        rng = random.Random(self.seed)
        self.run_family("malformed", malformed(rng, scale))
        self.run_family("nested", nested(rng, max(8, scale // 4)))
        self.run_family("shapes", shapes(rng, scale))
        self.run_family("lengths", lengths(rng, scale, stall_ok=True), threads=64)  # a quarter of them stall
        self.run_family("bombs", bombs(rng, max(8, scale // 8), bomb_mib), threads=2)
        self.slow_family(stalled_connections, good_requests=3)
        mixed = list(malformed(rng, scale)) + list(shapes(rng, scale))
        rng.shuffle(mixed)
        side = threading.Thread(target=during_concurrency, daemon=True) if during_concurrency else None
        if side is not None:
            side.start()
        self.run_family("concurrency", mixed, threads=16)
        if side is not None:
            side.join()
        return self.outcomes

    @property
    def escapes(self) -> list[str]:
        return [e for outcome in self.outcomes.values() for e in outcome.escapes]
