"""How large products use the BLAS threads on this machine: measured once, cached, overridable.

``kernels/gemm.py`` can run a large product on T threads two ways:

- ``split``: OpenBLAS at one thread, the output cut into blocks that the caller and a
  pool take in turn. A core held by another process delays one block.
- ``blas``: OpenBLAS's own threads. It splits each product statically and waits for
  every share, so a descheduled thread costs a whole time slice per product (measured
  on an AMD EPYC with a co-tenant holding a core: ResNet-50 83 ms split, 686 ms blas),
  but on a quiet machine its kernels share their packed panels and, on some CPUs and
  OpenBLAS kernels, it is far faster (an Intel Xeon with AVX-512: ResNet-50 74 -> 58 ms).

Which wins depends on the CPU, the OpenBLAS kernel numpy picked and the thread count,
so a constant tuned on one machine leaves speed behind on another. At first use the
process times one mid-sized product (about 58M multiply-adds, a ResNet 3x3 layer's
shape) each way plus on one thread, alternating, best of a few (a few ms in all), and
``choose_policy`` picks from those timings. The verdict is cached in a small JSON file
per machine key (CPU model, numpy, OpenBLAS kernel and configuration, thread count)
under ``default_cache_dir()/host-tuning``, written atomically and read defensively:
a file that does not parse, names another key or holds out-of-range values is ignored
and rewritten.

A measurement in which OpenBLAS's threads lost to a single thread means another
process held a core while it ran: it picks ``split`` with the default threshold and is
cached for ``DISTURBED_TTL_S`` only, so a process after that measures again. Where ``blas`` is picked, gemm.py
keeps the split's robustness with a watchdog: a product that takes longer than one
thread would have (from the measured single-thread rate) means a co-tenant, and
products go back to the split for a while (``FALLBACK_SECONDS``, doubling while it persists).

Reproducibility: for a given machine and verdict, a product's path depends on its shape
only, so runs repeat bit for bit, except under ``blas`` while the watchdog has products on
the split: OpenBLAS's threads and the split (and even one and two OpenBLAS threads) round
differently, so those runs differ from quiet ones by float rounding. ``RUNTIME_LITE_GEMM=split``
(the split with the default thresholds, robust and reproducible) or ``=blas`` (OpenBLAS's
threads, no pool, no watchdog: reproducible, fastest on a dedicated host) skip the
measurement; ``auto`` is the default.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runtime_lite.files import atomic_write, default_cache_dir, read_regular

logger = logging.getLogger("runtime_lite.kernels.gemm_policy")

#: Bumped when the measurement or the record changes: older records are then ignored.
VERSION = 2
MODES = ("auto", "blas", "split")
#: Without a measurement (``RUNTIME_LITE_GEMM=split``): below this many multiply-adds a
#: product runs on the calling thread alone (measured on an AMD EPYC without AVX-512: at 2
#: to 4M the split took 1.5 to 1.9x as long, from about 10M it breaks even or wins).
DEFAULT_MIN_PARALLEL_MACS = 8_000_000
#: The measured threshold stays within these bounds whatever a noisy measurement says.
MIN_PARALLEL_MACS_RANGE = (1_000_000, 64_000_000)
#: OpenBLAS's threads are picked only when this much faster than the split: a close call
#: is not worth giving up the split's tolerance of a co-tenant between watchdog checks.
BLAS_MARGIN = 1.15
#: The calibration products: a ResNet-50 3x3 layer on a 28x28 map (128 x 1152 x 392, 58M
#: multiply-adds), and a small one (64 x 256 x 256, 4M) where the hand-off cost shows.
CALIBRATION_SHAPE = (128, 1152, 392)
SMALL_CALIBRATION_SHAPE = (64, 256, 256)
CALIBRATION_REPEATS = 5
#: ... stopping after the first round past this: under a co-tenant one OpenBLAS-threaded
#: product can take a whole time slice, and first use must stay cheap (quiet: about 10 ms).
CALIBRATION_BUDGET_S = 0.05
MAX_RECORD_BYTES = 64 << 10
#: A verdict from a disturbed measurement (the split, default threshold) is kept this long,
#: so that on a busy machine each new process does not pay a measurement slowed by the load.
DISTURBED_TTL_S = 600.0


@dataclass(frozen=True)
class Timings:
    """Best-of seconds for the two calibration products, each way."""

    threads: int
    macs: int
    single_s: float  #: OpenBLAS at one thread, on the caller
    split_s: float  #: OpenBLAS at one thread, blocks on the caller and the pool
    blas_s: float  #: OpenBLAS's own threads
    small_macs: int
    small_single_s: float
    small_split_s: float
    small_blas_s: float


@dataclass(frozen=True)
class Policy:
    """What gemm.py does with a large product on this machine, and why."""

    mode: str  #: "split" or "blas"
    min_parallel_macs: int  #: smaller products run on the calling thread at one BLAS thread
    single_macs_per_s: float  #: one BLAS thread's rate: the watchdog's yardstick (0: none)
    source: str  #: "measured", "cache", "environment" or "default"
    cacheable: bool = True  #: False when the measurement shows a co-tenant: then cached for a while only

    def record(self) -> dict[str, Any]:
        return {"mode": self.mode, "min_parallel_macs": self.min_parallel_macs,
                "single_macs_per_s": self.single_macs_per_s}  # fmt: skip

    @classmethod
    def from_record(cls, record: Any) -> Policy:
        """A policy from a cache record; ValueError for anything this module would not have written."""
        if not isinstance(record, dict):
            raise ValueError("the policy record is not an object")
        mode, macs, rate = record.get("mode"), record.get("min_parallel_macs"), record.get("single_macs_per_s")
        if mode not in ("split", "blas"):
            raise ValueError(f"mode {mode!r}")
        low, high = MIN_PARALLEL_MACS_RANGE
        if not isinstance(macs, int) or isinstance(macs, bool) or not low <= macs <= high:
            raise ValueError(f"min_parallel_macs {macs!r}")
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 1e6 <= rate <= 1e15:
            raise ValueError(f"single_macs_per_s {rate!r}")
        return cls(mode, macs, float(rate), "cache")


def requested_mode(environ: Mapping[str, str] = os.environ) -> str:
    """``RUNTIME_LITE_GEMM``: auto (default), blas or split; anything else warns and means auto."""
    value = environ.get("RUNTIME_LITE_GEMM", "").strip().lower() or "auto"
    if value not in MODES:
        warnings.warn(f"RUNTIME_LITE_GEMM={value!r} is not one of {', '.join(MODES)}: using auto", stacklevel=2)
        return "auto"
    return value


def default_policy(mode: str) -> Policy:
    """The policy without a measurement: the thresholds tuned on an AMD EPYC without AVX-512."""
    return Policy(mode, DEFAULT_MIN_PARALLEL_MACS, 0.0, "environment" if mode != "auto" else "default")


def disturbed(t: Timings) -> bool:
    """Whether another process held a core during the measurement: OpenBLAS's threads lost to one thread."""
    return t.blas_s >= t.single_s


def choose_policy(t: Timings) -> Policy:
    """The policy these timings call for (pure: the unit tests feed it timings).

    ``blas`` where OpenBLAS's threads beat the split by ``BLAS_MARGIN`` on the large
    product. The threshold for parallel products comes from both products, timed the
    chosen way: the large one gives the speed-up ``s`` over one thread, the small one
    the fixed cost ``c`` of going parallel (its time less its share of work at that
    speed-up). Parallel pays from ``c * rate / (1 - 1/s)`` multiply-adds, kept within
    ``MIN_PARALLEL_MACS_RANGE``; without a speed-up, only the largest products go parallel.
    """
    rate = t.macs / t.single_s
    if disturbed(t):  # the small products were timed under load too: keep the default threshold
        return Policy("split", DEFAULT_MIN_PARALLEL_MACS, rate, "measured", cacheable=False)
    mode = "blas" if t.blas_s * BLAS_MARGIN < t.split_s else "split"
    parallel_s, small_parallel_s = (t.blas_s, t.small_blas_s) if mode == "blas" else (t.split_s, t.small_split_s)
    return Policy(mode, parallel_threshold(rate, t.single_s / parallel_s, t.small_macs, small_parallel_s), rate,
                  "measured")  # fmt: skip


def parallel_threshold(rate: float, speedup: float, small_macs: int, small_parallel_s: float) -> int:
    """The product size from which going parallel beats one thread, within ``MIN_PARALLEL_MACS_RANGE``."""
    low, high = MIN_PARALLEL_MACS_RANGE
    if speedup <= 1.05:
        return high
    fixed_s = max(0.0, small_parallel_s - small_macs / (rate * speedup))
    return int(min(high, max(low, fixed_s * rate / (1 - 1 / speedup))))


def measure(
    ways: tuple[Callable[[], None], ...],
    macs: int,
    small_macs: int,
    threads: int,
    repeats: int = CALIBRATION_REPEATS,
    budget_s: float = CALIBRATION_BUDGET_S,
) -> Timings:
    """Best-of-``repeats`` seconds of each way, alternating so machine noise hits them alike.

    ``ways``: the large product on one thread, split, on OpenBLAS's threads, then the small
    product the same three ways. Rounds stop early once ``budget_s`` has passed (a busy
    machine): the verdict is then the best of fewer rounds, most likely ``disturbed``.
    """
    started = time.perf_counter()
    for way in ways:  # warm: OpenBLAS's buffers, the pool's threads
        way()
    best = [float("inf")] * len(ways)
    for _ in range(repeats):
        for i, way in enumerate(ways):
            start = time.perf_counter()
            way()
            best[i] = min(best[i], time.perf_counter() - start)
        if time.perf_counter() - started > budget_s:
            break
    single_s, split_s, blas_s, small_single_s, small_split_s, small_blas_s = best
    return Timings(threads, macs, single_s, split_s, blas_s, small_macs, small_single_s, small_split_s, small_blas_s)


def _cpu_model() -> str:
    """The CPU's model name and whether it has AVX-512 / AVX2 (Linux's /proc/cpuinfo; elsewhere the platform's word)."""
    try:
        with open("/proc/cpuinfo") as info:
            lines = info.read(1 << 16).splitlines()
    except (OSError, ValueError):
        return platform.processor() or platform.machine()
    fields: dict[str, str] = {}
    for line in lines:  # the first processor's fields ("model name\t: AMD EPYC")
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    model = fields.get("model name") or platform.machine()
    flags = set(fields.get("flags", "").split())
    return f"{model} ({'avx512f' if 'avx512f' in flags else 'avx2' if 'avx2' in flags else 'no avx2'})"


def machine_key(blas_config: str, threads: int) -> dict[str, Any]:
    """Everything the verdict depends on: a cached verdict is reused only where all of it matches."""
    return {"version": VERSION, "cpu": _cpu_model(), "cores": os.cpu_count(), "numpy": np.__version__,
            "blas": blas_config, "threads": threads}  # fmt: skip


def cache_path(key: Mapping[str, Any], root: Path | None = None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return (root if root is not None else default_cache_dir()) / "host-tuning" / f"{digest}.json"


def read_cached(path: Path, key: Mapping[str, Any], now: float | None = None) -> Policy | None:
    """The cached policy for ``key``, or None for a missing, unreadable, corrupt, foreign or expired file."""
    try:
        record = json.loads(read_regular(path, MAX_RECORD_BYTES, follow_symlinks=False))
        if not isinstance(record, dict) or record.get("key") != dict(key):
            raise ValueError("the record names another machine key")
        expires = record.get("expires")
        if expires is not None:
            if not isinstance(expires, (int, float)) or isinstance(expires, bool):
                raise ValueError(f"expires {expires!r}")
            if (time.time() if now is None else now) > expires:
                return None  # a verdict from a busy moment, due to be measured again
        return Policy.from_record(record.get("policy"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError) as error:
        logger.info("ignoring the host tuning record %s (%s); measuring again", path, error)
        return None


def write_cached(
    path: Path, key: Mapping[str, Any], policy: Policy, timings: Timings | None, ttl_s: float | None = None
) -> None:
    """Atomically (a reader never sees half a record); a read-only or missing home only logs."""
    record = {"key": dict(key), "policy": policy.record(), "timings": asdict(timings) if timings else None}
    if ttl_s is not None:
        record["expires"] = time.time() + ttl_s
    data = json.dumps(record, indent=1, sort_keys=True).encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda out: out.write(data))
    except OSError as error:
        logger.info("could not cache the host tuning in %s (%s)", path, error)


def resolve(key: Mapping[str, Any], measure_now: Callable[[], Timings], root: Path | None = None) -> Policy:
    """The policy for this process: the override, else the cached verdict, else a measurement (then cached)."""
    mode = requested_mode()
    if mode != "auto":
        return default_policy(mode)
    path = cache_path(key, root)
    cached = read_cached(path, key)
    if cached is not None:
        return cached
    timings = measure_now()
    policy = choose_policy(timings)
    logger.info("host GEMM policy %s from %s", policy, timings)
    write_cached(path, key, policy, timings, None if policy.cacheable else DISTURBED_TTL_S)
    return policy
