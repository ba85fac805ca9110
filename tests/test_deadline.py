"""A deadline that one instruction cannot outrun (issue 40): large products check it between pieces.

The issue's case: ``max_run_seconds=0.5`` against one 6144x6144 matmul ran 20.9 s before
the refusal, since the deadline was checked only between instructions. The timing
assertion is relative to the same product timed in the same test, with a wide margin
(the deadline allows a sixteenth of the product; the refusal must come before half of
it), so it holds on a loaded 2-core machine.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from onnx import helper

import aot
import runtime_lite
from runtime_lite.execution.limits import RunLimits
from runtime_lite.kernels import gemm
from tests.helpers import make_model, rand

SIZE = 2048  # 8.6 G multiply-adds: 32 pieces of DEADLINE_PIECE_MACS


@pytest.fixture(scope="module")
def matmul_bundle() -> bytes:
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": rand(SIZE, SIZE)}, ["y"], {"w": rand(SIZE, SIZE, seed=1)}
    )
    return aot.build(model, targets=["host"], log=None).to_bytes()


def _best_of(run, times: int = 2) -> float:
    best = float("inf")
    for _ in range(times):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def test_a_deadline_stops_one_large_matmul_well_before_it_would_finish(matmul_bundle):
    x = rand(SIZE, SIZE, seed=2)
    full = runtime_lite.load(matmul_bundle)
    full.run([x])  # the GEMM policy's one-off measurement happens here, not in the timing
    product_seconds = _best_of(lambda: full.run([x]))
    allowed = product_seconds / 16  # the product is 16x more than the deadline allows
    limited = runtime_lite.load(matmul_bundle, max_run_seconds=allowed)
    start = time.perf_counter()
    with pytest.raises(runtime_lite.ExecutionError, match="max_run_seconds") as refused:
        limited.run([x])
    elapsed = time.perf_counter() - start
    print(f"full product {product_seconds:.3f} s, deadline {allowed:.3f} s, refused after {elapsed:.3f} s")
    assert elapsed < product_seconds / 2, (elapsed, product_seconds, str(refused.value))
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((700, 900), (900, 600)), ((3, 300, 400), (400, 500)), ((5, 1, 200, 300), (2, 300, 100)),
     ((64, 100, 100), (64, 100, 100)), ((50, 2000), (2000, 3000))],
)  # fmt: skip
def test_a_product_in_pieces_equals_the_whole(monkeypatch, a_shape, b_shape):
    """Pieces of any layout (rows, columns, runs of batched matrices, broadcast batches) compute the product;
    the tolerance is float32 summation order (the pieces and the whole may block K differently)."""
    monkeypatch.setattr(gemm, "DEADLINE_PIECE_MACS", 1 << 16)  # many pieces
    a, b = rand(*a_shape, seed=3), rand(*b_shape, seed=4)
    token = RunLimits.from_options(None, 1000.0).activate()
    try:
        got = gemm.matmul(a, b)
    finally:
        RunLimits.reset(token)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3 * np.sqrt(a_shape[-1]))


def test_a_product_that_cannot_finish_in_the_time_left_is_refused_before_it_starts(monkeypatch):
    """At the machine's measured rate (gemm_policy's single-thread rate times the threads), here fixed at
    10 G multiply-adds per second so that the test does not depend on this machine's policy."""
    monkeypatch.setattr(gemm, "measured_rate", lambda host: 1e10)
    a = rand(1024, 1024)  # 1.07 G multiply-adds: about 0.1 s at that rate
    token = RunLimits.from_options(None, 0.01).activate()  # 8 x 0.01 s < 0.1 s: refused
    try:
        with pytest.raises(TimeoutError, match="at this machine's measured rate"):  # the estimate's refusal
            gemm.matmul(a, a)
    finally:
        RunLimits.reset(token)
    token = RunLimits.from_options(None, 1000.0).activate()  # plenty of time: computed, in pieces
    try:
        np.testing.assert_allclose(gemm.matmul(a, a), np.matmul(a, a), rtol=1e-4, atol=1e-2)
    finally:
        RunLimits.reset(token)
