"""Drive a ``runtime-lite serve`` process from outside, as users do: a subprocess, tritonclient, bounded load.

Shared by tests/test_serving_ray.py (short runs in CI) and benchmarks/bench_serving.py (long runs).
Everything listens on loopback and every wait has a deadline.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback never goes through a proxy


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with _DIRECT.open(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class ServerProcess:
    """``python -m runtime_lite serve ARGS`` in the background; ``stop()`` sends SIGTERM and returns the exit status."""

    def __init__(
        self,
        args: Sequence[str],
        log: Path,
        port: int | None = None,
        start_timeout: float = 240.0,
        own_session: bool = False,
    ):
        self.port = port or free_port()
        self.url = f"127.0.0.1:{self.port}"
        self.log = log
        #: Every process the server starts inherits this in its environment: ``leftovers()`` finds them by it.
        self.mark = f"serve-{uuid.uuid4().hex}"
        #: The statuses /v2/health/ready answered while the server started ("refused": nothing listening yet).
        self.ready_statuses: list[int | str] = []
        command = [sys.executable, "-m", "runtime_lite", "serve", *args, "--port", str(self.port)]
        self._log_file = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            command,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RUNTIME_LITE_TEST_SERVER": self.mark},
            start_new_session=own_session,  # a process group of its own, to be signalled whole
        )
        self._wait_ready(start_timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"serve exited with {self.process.returncode}:\n{self.output()}")
            try:
                status = http_get(f"http://{self.url}/v2/health/ready", timeout=2)[0]
            except OSError:
                status = "refused"
            if not self.ready_statuses or self.ready_statuses[-1] != status:
                self.ready_statuses.append(status)
            if status == 200 and "SIGTERM" in self.output():
                return
            time.sleep(0.1)
        self.process.kill()
        raise RuntimeError(f"serve was not ready after {timeout:.0f} s:\n{self.output()}")

    def output(self) -> str:
        if not self._log_file.closed:
            self._log_file.flush()
        return self.log.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def leftovers(self) -> list[str]:
        """Processes still running that this server started (found by the mark in their environment)."""
        found = []
        needle = f"RUNTIME_LITE_TEST_SERVER={self.mark}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    stat = (entry / "stat").read_text()
                    if stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X"):
                        found.append(f"{entry.name} {(entry / 'cmdline').read_bytes()[:80]!r}")
            except OSError:
                continue
        return found

    def kill_leftovers(self) -> None:
        """SIGKILL what ``leftovers()`` finds, so a failing test leaves nothing behind either."""
        for line in self.leftovers():
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except OSError:
                pass

    def stop(self, timeout: float = 90.0, group: bool = False, signum: int | None = None) -> int:
        """Signal the server (default SIGTERM; ``group``: its whole process group, as systemd or a terminal's
        Ctrl-C do) and wait for its exit."""
        signum = signal.SIGTERM if signum is None else signum
        if self.process.poll() is None:
            if group:
                os.killpg(self.process.pid, signum)
            else:
                self.process.send_signal(signum)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()
        return self.process.returncode


def replica_pids() -> list[int]:
    """Processes of Ray Serve replicas on this machine (Ray titles them ``ray::ServeReplica:...``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"ServeReplica:runtime_lite" in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@dataclass
class LoadResult:
    """What a bounded load saw: answers checked, statuses of refusals, latencies of successes."""

    ok: int = 0
    wrong: int = 0
    statuses: collections.Counter = field(default_factory=collections.Counter)
    messages: collections.Counter = field(default_factory=collections.Counter)
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies, q)) * 1e3 if self.latencies else float("nan")

    @property
    def throughput(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


def triton_inputs(feeds: dict[str, np.ndarray]) -> list:
    """tritonclient's InferInput per array, binary data (tritonclient.http's default)."""
    import tritonclient.http as triton
    from tritonclient.utils import np_to_triton_dtype

    inputs = []
    for name, array in feeds.items():
        tensor = triton.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def run_load(
    url: str,
    model: str,
    make_inputs: Callable[[int], dict[str, np.ndarray]],
    check: Callable[[int, dict[str, np.ndarray]], bool],
    threads: int,
    requests: int,
    max_seconds: float,
    retries: int = 0,
) -> LoadResult:
    """``requests`` infer calls from ``threads`` tritonclient threads (each its own connection), stopping at
    ``max_seconds`` whatever is left. A 5xx answer or a dropped connection is retried up to ``retries`` times after
    a growing pause (0.1 s doubling to 2 s), as a client of an idempotent service would: a replica that Ray restarts
    on a loaded machine can take seconds, which back-to-back retries would use up at once."""
    import tritonclient.http as triton
    from tritonclient.utils import InferenceServerException

    result, lock = LoadResult(), threading.Lock()
    counter = iter(range(requests))
    deadline = time.monotonic() + max_seconds

    def failed(status: str, message: str) -> None:
        with lock:
            result.statuses[status] += 1
            result.messages[message[:160]] += 1

    def worker() -> None:
        client = triton.InferenceServerClient(url, connection_timeout=30, network_timeout=60)
        for i in counter:
            if time.monotonic() > deadline:
                return
            inputs = triton_inputs(make_inputs(i))
            for attempt in range(retries + 1):
                start = time.perf_counter()
                try:
                    answer = client.infer(model, inputs)
                except InferenceServerException as e:
                    failed(str(e.status()), str(e))
                    if attempt < retries and str(e.status()).startswith("5"):
                        time.sleep(min(2.0, 0.1 * 2**attempt))
                        continue
                    break
                except Exception as e:  # a socket error or timeout: counted, never a silently dead worker
                    failed(type(e).__name__, str(e))
                    if attempt < retries:
                        time.sleep(min(2.0, 0.1 * 2**attempt))
                        client = triton.InferenceServerClient(url, connection_timeout=30, network_timeout=60)
                        continue
                    break
                elapsed = time.perf_counter() - start
                outputs = {o["name"]: answer.as_numpy(o["name"]) for o in answer.get_response()["outputs"]}
                good = check(i, outputs)
                with lock:
                    result.ok += good
                    result.wrong += not good
                    result.latencies.append(elapsed)
                break

    start = time.perf_counter()
    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(max_seconds + 120)
    result.seconds = time.perf_counter() - start
    return result


def scrape(port: int, metric: str) -> dict[str, float]:
    """Prometheus samples whose name starts with ``metric``: the sample line (labels included) -> value."""
    status, body = http_get(f"http://127.0.0.1:{port}/metrics")
    if status != 200:
        return {}
    samples = {}
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(metric):
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return samples
