"""The fast transformer kernels (float32 erf / gelu, folded matmuls, layer norm) against exact references."""

from __future__ import annotations

import math
import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from runtime_lite.kernels import gemm
from runtime_lite.kernels.activation import erf, gelu
from runtime_lite.kernels.linalg import dense, matmul
from runtime_lite.kernels.normalization import layer_norm

#: Dense grid over erf's whole float32 range, plus tiny (normal) magnitudes where erf(x) ~ 2x/sqrt(pi).
GRID = np.concatenate(
    [
        np.linspace(-10, 10, 400_001, dtype=np.float32),
        np.geomspace(1.2e-38, 1, 20_001).astype(np.float32),
        -np.geomspace(1.2e-38, 1, 20_001).astype(np.float32),
        np.array([0.0, -0.0, np.inf, -np.inf], np.float32),
    ]
)


def test_float32_erf_is_within_1e_6_of_math_erf():
    reference = np.array([math.erf(float(v)) for v in GRID])
    got = erf(GRID)
    assert got.dtype == np.float32
    error = np.abs(got.astype(np.float64) - reference) / np.maximum(np.abs(reference), np.finfo(np.float32).tiny)
    assert error.max() <= 1e-6, f"max relative error {error.max():.2e} at x = {GRID[error.argmax()]}"


def test_float32_gelu_matches_the_float64_definition():
    x = GRID[np.isfinite(GRID)]
    reference = np.array([0.5 * float(v) * math.erfc(-float(v) / math.sqrt(2.0)) for v in x])
    got = gelu(x, approximate="none")
    # 0.5 x (1 + erf) cancels for x << 0 (onnxruntime's Gelu too): there the error scales with |x|.
    error = np.abs(got.astype(np.float64) - reference) / (np.maximum(np.abs(reference), np.abs(x)) + 1e-45)
    assert error.max() <= 1e-6, f"max error {error.max():.2e} at x = {x[error.argmax()]}"


def test_gelu_in_place_and_on_views():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 40_000), dtype=np.float32) * 4
    expected = gelu(x.copy(), approximate="none")
    view = x.T  # not contiguous
    assert np.array_equal(gelu(view, approximate="none"), expected.T)
    out = x.copy()
    assert gelu(out, approximate="none", out=out) is out
    assert np.array_equal(out, expected)
    transposed = x.copy().T  # in place on a transposed view: blocks cannot flatten it without a copy
    assert gelu(transposed, approximate="none", out=transposed) is transposed
    assert np.array_equal(transposed, expected.T)


def test_float64_erf_keeps_float64():
    x = np.linspace(-3, 3, 101)
    got = erf(x)
    assert got.dtype == np.float64
    assert np.allclose(got, [math.erf(v) for v in x], rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    "a_shape, permutation",
    [((197, 1, 768), None), ((1, 96, 14, 14), (0, 2, 3, 1)), ((2, 3, 5, 7), None), ((4, 7), None)],
)
def test_matmul_folds_leading_dims_into_one_gemm(a_shape, permutation):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(a_shape, dtype=np.float32)
    if permutation:
        a = a.transpose(permutation)
    b = rng.standard_normal((a.shape[-1], 11), dtype=np.float32)
    expected = np.einsum("...k,kn->...n", a.astype(np.float64), b.astype(np.float64))
    got = matmul(a, b)
    assert got.shape == expected.shape
    assert np.allclose(got, expected, rtol=1e-4, atol=1e-4)
    got_dense = dense(a, np.ascontiguousarray(b.T), np.ones(11, np.float32))
    assert np.allclose(got_dense, expected + 1, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((197, 768), (768, 700)), ((1, 12, 197, 64), (1, 12, 64, 197)), ((12, 50, 64), (64, 50)), ((3, 40), (40, 5))],
)
def test_threaded_gemm_matches_numpy(a_shape, b_shape):
    rng = np.random.default_rng(2)
    a = rng.standard_normal(a_shape, dtype=np.float32)
    b = rng.standard_normal(b_shape, dtype=np.float32)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    got = gemm.matmul(a, b)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.allclose(got, expected, rtol=1e-4, atol=1e-3)


def test_threaded_gemm_from_many_threads_at_once():
    rng = np.random.default_rng(3)
    pairs = [(rng.standard_normal((64, 256), dtype=np.float32), rng.standard_normal((256, 320), dtype=np.float32))
             for _ in range(8)]  # fmt: skip
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda p: gemm.matmul(*p), pairs * 3))
    for (a, b), got in zip(pairs * 3, results):
        assert np.allclose(got, a @ b, rtol=1e-4, atol=1e-3)


def test_threaded_gemm_in_a_forked_child():
    a = np.ones((256, 512), np.float32)
    b = np.ones((512, 256), np.float32)
    gemm.matmul(a, b)  # the parent's pool exists now
    pid = os.fork()
    if pid == 0:  # the child: a fresh pool, same answer
        os._exit(0 if np.array_equal(gemm.matmul(a, b), np.full((256, 256), 512, np.float32)) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize(
    "shape, axis, param_shape",
    [
        ((1, 56, 56, 96), -1, (96,)),  # ConvNeXt's channels-last norm
        ((1, 197, 768), -1, (1, 768)),  # a broadcastable scale with a leading 1
        ((2, 3, 4, 5), 1, (3, 4, 5)),  # several normalised axes
        ((2, 3, 4, 5), -2, (5,)),  # a scale broadcast over one of them
        ((7,), 0, (7,)),
        ((3, 0, 4), -1, (4,)),  # empty
    ],
)
@pytest.mark.parametrize("layout", ["contiguous", "strided", "float16"])
def test_layer_norm_matches_float64(shape, axis, param_shape, layout):
    rng = np.random.default_rng(len(shape) * 10 + axis)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    scale, bias = (rng.standard_normal(param_shape).astype(np.float32) for _ in range(2))
    if layout == "strided":
        x = np.repeat(x, 2, axis=-1)[..., ::2]
    elif layout == "float16":
        x, scale, bias = x.astype(np.float16), scale.astype(np.float16), bias.astype(np.float16)
    axes = tuple(range(axis % len(shape), len(shape)))
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):  # the empty case's mean
        expected = (x64 - x64.mean(axes, keepdims=True)) / np.sqrt(x64.var(axes, keepdims=True) + 1e-5) * scale + bias
    got = layer_norm(x, scale, bias, axis=axis, epsilon=1e-5)
    assert got.shape == expected.shape and got.dtype == x.dtype
    tolerance = 1e-2 if layout == "float16" else 1e-5
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)
    if layout != "float16":  # float16 adds the bias before rounding to float16
        np.testing.assert_array_equal(layer_norm(x, scale, None, axis=axis, epsilon=1e-5) + bias, got)


def test_blocks_run_under_the_callers_numpy_error_state():
    """Pool workers see the caller's errstate: a run's silenced overflow stays silent on every thread."""
    started = threading.Barrier(2, timeout=5)

    def overflow() -> None:
        try:
            started.wait()  # both threads hold a block, so one of them is a pool worker
        except threading.BrokenBarrierError:
            pass  # a single-threaded BLAS: the caller runs every block
        np.exp(np.full(8, 1000, np.float32))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(over="ignore"):
            gemm.run_blocks([overflow, overflow])
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        gemm.run_blocks([overflow, overflow])
