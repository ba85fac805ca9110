"""The host GEMM policy: picked from measured timings, cached per machine, overridable.

The timings here are given as inputs (no timing assertions): ``choose_policy`` is a pure
function of them, and ``resolve`` is handed a stand-in measurement that counts its calls.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from runtime_lite.kernels import gemm, gemm_policy
from runtime_lite.kernels.gemm_policy import Policy, Timings, choose_policy, resolve
from tests.missing import missing

KEY = {"version": gemm_policy.VERSION, "cpu": "test CPU (avx512f)", "cores": 2, "numpy": "2.x", "blas": "OpenBLAS test",
       "threads": 2}  # fmt: skip


def timings(single_s=1.0e-3, split_s=0.6e-3, blas_s=0.55e-3, macs=100_000_000, small=(40e-6, 40e-6, 40e-6)) -> Timings:
    """The large product's times as given; the small one (4M multiply-adds): one thread, split, OpenBLAS's threads."""
    return Timings(2, macs, single_s, split_s, blas_s, 4_000_000, *small)


class CountingMeasurement:
    """A stand-in for the micro-benchmark: returns fixed timings and counts how often it was asked."""

    def __init__(self, result: Timings) -> None:
        self.result, self.calls = result, 0

    def __call__(self) -> Timings:
        self.calls += 1
        return self.result


@pytest.fixture(autouse=True)
def _auto_mode(monkeypatch):
    monkeypatch.delenv("RUNTIME_LITE_GEMM", raising=False)


def test_openblas_threads_are_picked_only_when_clearly_faster_than_the_split():
    assert choose_policy(timings(split_s=0.60e-3, blas_s=0.40e-3)).mode == "blas"
    assert choose_policy(timings(split_s=0.60e-3, blas_s=0.56e-3)).mode == "split"  # within BLAS_MARGIN
    assert choose_policy(timings(split_s=0.50e-3, blas_s=0.70e-3)).mode == "split"


def test_a_measurement_with_a_co_tenant_picks_the_split_and_is_not_cached():
    policy = choose_policy(timings(single_s=1e-3, split_s=0.9e-3, blas_s=8e-3))  # OpenBLAS's threads lost to one
    assert policy.mode == "split" and not policy.cacheable
    assert policy.min_parallel_macs == gemm_policy.DEFAULT_MIN_PARALLEL_MACS  # the hand-off was timed under load too


def test_the_parallel_threshold_follows_the_speed_up_and_the_fixed_cost_of_going_parallel():
    # 1e11 multiply-adds/s on one thread; split 2x faster on the large product. The small product
    # (4M: 40 us on one thread) took 40 us split, 20 us of work at 2x plus 20 us fixed: parallel
    # pays from 20 us * 1e11 / (1 - 1/2) = 4M multiply-adds.
    policy = choose_policy(timings(single_s=1e-3, split_s=0.5e-3, blas_s=0.6e-3, small=(40e-6, 40e-6, 30e-6)))
    assert policy.mode == "split" and policy.min_parallel_macs == pytest.approx(4_000_000, rel=1e-6)
    assert policy.single_macs_per_s == pytest.approx(1e11)
    # the same machine under the blas verdict reads the OpenBLAS-threaded small product instead
    blas = choose_policy(timings(single_s=1e-3, split_s=0.9e-3, blas_s=0.5e-3, small=(40e-6, 80e-6, 30e-6)))
    assert blas.mode == "blas" and blas.min_parallel_macs == pytest.approx(2_000_000, rel=1e-6)
    low, high = gemm_policy.MIN_PARALLEL_MACS_RANGE
    assert choose_policy(timings(split_s=0.5e-3, small=(40e-6, 20e-6, 20e-6))).min_parallel_macs == low
    assert choose_policy(timings(split_s=0.5e-3, small=(40e-6, 1.0, 1.0))).min_parallel_macs == high
    no_speed_up = choose_policy(timings(single_s=1e-3, split_s=0.99e-3, blas_s=0.99e-3))
    assert no_speed_up.min_parallel_macs == high  # only the largest products go parallel


def test_the_verdict_is_measured_once_then_read_from_the_cache(tmp_path):
    measurement = CountingMeasurement(timings(split_s=0.6e-3, blas_s=0.4e-3))
    first = resolve(KEY, measurement, root=tmp_path)
    second = resolve(KEY, measurement, root=tmp_path)
    assert measurement.calls == 1
    assert (first.mode, first.source) == ("blas", "measured")
    assert (second.mode, second.source, second.min_parallel_macs) == ("blas", "cache", first.min_parallel_macs)
    other_machine = resolve({**KEY, "cpu": "another CPU"}, measurement, root=tmp_path)
    assert measurement.calls == 2 and other_machine.source == "measured"
    record = json.loads(gemm_policy.cache_path(KEY, tmp_path).read_text())
    assert record["key"] == KEY and record["timings"]["blas_s"] == 0.4e-3


def test_a_disturbed_verdict_is_kept_for_a_while_then_measured_again(tmp_path):
    measurement = CountingMeasurement(timings(single_s=1e-3, blas_s=5e-3))
    assert resolve(KEY, measurement, root=tmp_path).mode == "split"
    assert resolve(KEY, measurement, root=tmp_path).source == "cache" and measurement.calls == 1
    path = gemm_policy.cache_path(KEY, tmp_path)
    assert gemm_policy.read_cached(path, KEY, now=time.time() + gemm_policy.DISTURBED_TTL_S + 1) is None
    quiet = CountingMeasurement(timings(split_s=0.6e-3, blas_s=0.4e-3))
    record = json.loads(path.read_text())
    record["expires"] = time.time() - 1  # the while has passed
    path.write_text(json.dumps(record))
    assert resolve(KEY, quiet, root=tmp_path).mode == "blas" and quiet.calls == 1
    assert "expires" not in json.loads(path.read_text())  # a quiet verdict is kept for good


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff not json",
        b'{"key": ',  # half a record
        b"[1, 2, 3]",
        json.dumps(
            {"key": KEY, "policy": {"mode": "fastest", "min_parallel_macs": 8_000_000, "single_macs_per_s": 1e11}}
        ).encode(),  # fmt: skip
        json.dumps(
            {"key": KEY, "policy": {"mode": "blas", "min_parallel_macs": -1, "single_macs_per_s": 1e11}}
        ).encode(),
        json.dumps(
            {"key": KEY, "policy": {"mode": "blas", "min_parallel_macs": 8_000_000, "single_macs_per_s": "fast"}}
        ).encode(),  # fmt: skip
        json.dumps(
            {
                "key": {**KEY, "cpu": "someone else"},
                "policy": {"mode": "blas", "min_parallel_macs": 8_000_000, "single_macs_per_s": 1e11},
            }
        ).encode(),  # fmt: skip
    ],
    ids=[
        "binary",
        "truncated",
        "not-an-object",
        "unknown-mode",
        "negative-threshold",
        "rate-not-a-number",
        "foreign-key",
    ],
)
def test_a_corrupt_cache_file_is_ignored_and_rewritten(tmp_path, content):
    _check_rewritten(tmp_path, content)


def test_an_expiry_that_is_not_a_time_is_ignored_and_rewritten(tmp_path):
    record = {"key": KEY, "expires": "never",
              "policy": {"mode": "split", "min_parallel_macs": 8_000_000, "single_macs_per_s": 1e11}}  # fmt: skip
    _check_rewritten(tmp_path, json.dumps(record).encode())


def _check_rewritten(tmp_path, content: bytes) -> None:
    path = gemm_policy.cache_path(KEY, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    measurement = CountingMeasurement(timings(split_s=0.6e-3, blas_s=0.4e-3))
    policy = resolve(KEY, measurement, root=tmp_path)
    assert measurement.calls == 1 and policy.mode == "blas"
    assert gemm_policy.read_cached(path, KEY) == Policy("blas", policy.min_parallel_macs, policy.single_macs_per_s,
                                                        "cache")  # fmt: skip


def test_a_symlink_in_the_cache_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"key": KEY, "policy": {"mode": "blas", "min_parallel_macs": 8_000_000,
                                                           "single_macs_per_s": 1e11}}))  # fmt: skip
    path = gemm_policy.cache_path(KEY, tmp_path / "root")
    path.parent.mkdir(parents=True)
    path.symlink_to(target)
    assert gemm_policy.read_cached(path, KEY) is None


def test_an_unwritable_cache_still_gives_a_policy(tmp_path):
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")  # the cache root is a file: mkdir fails
    measurement = CountingMeasurement(timings(split_s=0.6e-3, blas_s=0.4e-3))
    assert resolve(KEY, measurement, root=blocked).mode == "blas"


@pytest.mark.parametrize("mode", ["blas", "split", " Split "])
def test_the_environment_overrides_without_measuring(tmp_path, monkeypatch, mode):
    monkeypatch.setenv("RUNTIME_LITE_GEMM", mode)
    measurement = CountingMeasurement(timings())
    policy = resolve(KEY, measurement, root=tmp_path)
    assert measurement.calls == 0 and policy.mode == mode.strip().lower() and policy.source == "environment"
    assert policy.min_parallel_macs == gemm_policy.DEFAULT_MIN_PARALLEL_MACS
    assert not (tmp_path / "host-tuning").exists()


def test_an_unknown_override_warns_and_measures(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNTIME_LITE_GEMM", "turbo")
    measurement = CountingMeasurement(timings())
    with pytest.warns(UserWarning, match="RUNTIME_LITE_GEMM='turbo'"):
        resolve(KEY, measurement, root=tmp_path)
    assert measurement.calls == 1


def test_the_machine_key_names_the_cpu_numpy_blas_and_threads():
    key = gemm_policy.machine_key("OpenBLAS 0.3 SkylakeX", 2)
    assert key["numpy"] == np.__version__ and key["blas"] == "OpenBLAS 0.3 SkylakeX" and key["threads"] == 2
    assert key["cpu"] and key["cores"] == os.cpu_count()


def test_measure_reports_the_best_of_each_way():
    calls = []
    ways = tuple(lambda i=i: calls.append(i) for i in range(6))
    result = gemm_policy.measure(ways, macs=10, small_macs=2, threads=2, repeats=3)
    assert calls == list(range(6)) * 4  # warm-up, then alternating
    assert (result.macs, result.small_macs) == (10, 2)
    assert all(0 <= s < 1 for s in (result.single_s, result.split_s, result.blas_s, result.small_blas_s))


def test_measure_stops_early_on_a_busy_machine():
    calls = []
    ways = tuple(lambda i=i: calls.append(i) for i in range(6))
    gemm_policy.measure(ways, macs=10, small_macs=2, threads=2, repeats=5, budget_s=0.0)  # every round past it
    assert calls == list(range(6)) * 2  # warm-up and one round


class RecordingBlas:
    """A stand-in for OpenBLAS's thread switch: records the counts it is set to."""

    def __init__(self) -> None:
        self.threads, self.set_to = 2, []

    def __enter__(self):
        self.set_to.append(1)

    def __exit__(self, *exc):
        self.set_to.append(self.threads)


def _host(mode: str) -> gemm._Host:
    policy = Policy(mode, 1_000_000, 1e11, "test")
    return gemm._Host(RecordingBlas(), ThreadPoolExecutor(1), policy)


def test_the_watchdog_sends_products_to_the_split_after_slow_ones_and_back_after_healthy_ones():
    host = _host("blas")
    assert host.blas_threads_now()
    slow = 1e-3 * gemm.SLOW_FACTOR + 1e-3  # 1 ms on one thread; this took far longer
    host.judge(100_000_000, slow)  # one slow product: threads waking after an idle gap, one lost time slice
    assert host.blas_threads_now()
    host.judge(100_000_000, 0.6e-3)  # a healthy one in between: the count starts again
    host.judge(100_000_000, slow)
    assert host.blas_threads_now()
    host.judge(100_000_000, slow)  # twice in a row: a co-tenant
    assert not host.blas_threads_now()
    assert host.parallel_macs(False) == max(1_000_000, gemm_policy.DEFAULT_MIN_PARALLEL_MACS)  # the split's own
    assert host.parallel_macs(True) == 1_000_000
    host._split_until = time.monotonic() - 1  # the fallback has run out
    assert host.blas_threads_now()
    host.judge(100_000_000, 0.6e-3)  # healthy: the fallback period starts short again
    assert host._fallback_s == gemm.FALLBACK_SECONDS
    for _ in range(20):  # a co-tenant that stays: the fallback doubles, within its bound
        host.judge(100_000_000, 1.0)
    assert host._fallback_s == gemm.MAX_FALLBACK_SECONDS
    assert not _host("split").blas_threads_now()


@pytest.mark.parametrize("mode", ["split", "blas"])
@pytest.mark.parametrize("a_shape, b_shape", [((197, 768), (768, 700)), ((1, 12, 197, 64), (1, 12, 64, 197))])
def test_both_policies_compute_the_same_product(monkeypatch, mode, a_shape, b_shape):
    blas = gemm._find_openblas()  # not gemm._pool(): that would keep this test's policy for the rest of the session
    if blas is None:  # CI's numpy wheel bundles a multi-threaded OpenBLAS: there the path must be tested
        missing("numpy's BLAS is not a multi-threaded OpenBLAS here: products go to numpy.matmul unchanged")
    forced = gemm._Host(blas, ThreadPoolExecutor(blas.threads - 1), Policy(mode, 1_000_000, 1e11, "test"))
    monkeypatch.setattr(gemm, "_state", forced)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(a_shape, dtype=np.float32), rng.standard_normal(b_shape, dtype=np.float32)
    np.testing.assert_allclose(gemm.matmul(a, b), np.matmul(a.astype(np.float64), b), rtol=1e-4, atol=1e-3)
