"""The faster CNN kernels (sigmoid through tanh, trailing-axis sums as BLAS products) against exact references."""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_lite.kernels import KERNELS
from runtime_lite.kernels.activation import _sigmoid_exp, _sigmoid_tanh, sigmoid

GRID = np.concatenate([np.linspace(-120, 120, 480_001, dtype=np.float32), np.float32([0.0, -0.0, 1e-30, -1e-30])])


@pytest.mark.parametrize("form", [_sigmoid_exp, _sigmoid_tanh, sigmoid], ids=["exp", "tanh", "picked"])
def test_float32_sigmoid_is_within_1e_7_of_the_float64_definition(form):
    reference = 1.0 / (1.0 + np.exp(-GRID.astype(np.float64)))
    with np.errstate(all="ignore"):
        got = form(GRID)
    assert got.dtype == np.float32
    error = np.abs(got.astype(np.float64) - reference)
    assert error.max() <= 1e-7, f"max absolute error {error.max():.2e} at x = {GRID[error.argmax()]}"
    assert np.all((got >= 0) & (got <= 1))


def test_the_sigmoid_form_is_measured_once_or_taken_from_the_environment(monkeypatch):
    from runtime_lite.kernels import measured

    calls = []

    def trials():
        calls.append(1)
        return {"exp": lambda: None, "tanh": lambda: time.sleep(0.002)}

    monkeypatch.setattr(measured, "_choices", {})
    assert measured.pick("probe", ("exp", "tanh"), trials) == "exp"  # the slower candidate is not picked
    assert measured.pick("probe", ("exp", "tanh"), trials) == "exp" and len(calls) == 1
    monkeypatch.setenv("RUNTIME_LITE_FORCED", "tanh")
    assert measured.pick("forced", ("exp", "tanh"), trials) == "tanh" and len(calls) == 1
    monkeypatch.setenv("RUNTIME_LITE_TYPO", "fast")
    with pytest.warns(RuntimeWarning, match=r"RUNTIME_LITE_TYPO='fast' is not one of auto, exp, tanh"):
        assert measured.pick("typo", ("exp", "tanh"), trials) == "exp"


def test_sigmoid_limits_nan_and_in_place():
    x = np.float32([np.inf, -np.inf, np.nan, 0.0])
    with np.errstate(all="ignore"):
        got = sigmoid(x.copy(), out=None)
        buffer = x.copy()
        in_place = sigmoid(buffer, out=buffer)
    assert got[0] == 1.0 and got[1] == 0.0 and np.isnan(got[2]) and got[3] == 0.5
    assert in_place is buffer or np.shares_memory(in_place, buffer)
    np.testing.assert_array_equal(in_place, got)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_sigmoid_keeps_other_dtypes_accurate(dtype):
    x = np.arange(-30, 31, dtype=dtype)
    with np.errstate(all="ignore"):
        got = sigmoid(x)
    reference = np.array([1.0 / (1.0 + math.exp(-float(v))) for v in x])
    assert got.dtype == x.dtype
    if dtype == np.float16:
        np.testing.assert_allclose(
            got.astype(np.float64), reference, rtol=2e-3, atol=2e-5
        )  # exp(-x) overflows float16 below -11: 0 there
    else:  # the exp form: relative accuracy all along the tail
        np.testing.assert_allclose(got, reference, rtol=1e-14)


@st.composite
def reductions(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=rank, max_size=rank)))
    axes = draw(st.none() | st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank, unique=True))
    if axes is not None and len({a % rank for a in axes}) != len(axes):
        axes = sorted({a % rank for a in axes})
    return shape, axes, draw(st.sampled_from([0, 1])), draw(st.sampled_from([np.float32, np.float64, np.int64]))


@settings(max_examples=300, deadline=None)
@given(reductions(), st.booleans(), st.sampled_from(["reduce_mean", "reduce_sum"]))
def test_mean_and_sum_match_numpy_over_any_axes(case, transposed, op):
    shape, axes, keepdims, dtype = case
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype) * 3
    if transposed and x.ndim > 1:  # a non-contiguous input takes numpy's own reduction
        x = x.swapaxes(0, -1)
    reduce = np.mean if op == "reduce_mean" else np.sum
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the kernel warns of nothing (an empty mean included)
        got = KERNELS[op].fn(x, axes=axes, keepdims=keepdims)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's own 'Mean of empty slice'
        wanted = np.asarray(reduce(x, axis=None if axes is None else tuple(axes), keepdims=bool(keepdims)))
        wanted = wanted.astype(x.dtype, copy=False)
    if op == "reduce_mean" and x.dtype.kind == "i" and x.size == 0:  # numpy's NaN cast to int64 is no value: 0
        wanted = np.zeros_like(wanted)
    assert got.shape == wanted.shape and got.dtype == wanted.dtype
    np.testing.assert_allclose(got, wanted, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_trailing_sums_propagate_infinities_and_nans_as_a_sum_does():
    x = np.float32([[1, np.inf, -np.inf], [np.nan, 1, 2], [np.inf, 1, 2], [1, 2, 3]]).reshape(4, 3, 1)
    with np.errstate(all="ignore"):
        got = KERNELS["reduce_sum"].fn(x, axes=[1, 2], keepdims=0)
    np.testing.assert_array_equal(got, np.float32([np.nan, np.nan, np.inf, 6]))


def test_trailing_mean_cost_bounds_its_allocations():
    import tracemalloc

    x = np.ones((1, 1152, 7, 7), np.float32)
    kernel = KERNELS["reduce_mean"]
    tracemalloc.start()
    kernel.fn(x, axes=[3, 2], keepdims=1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak <= kernel.cost(x, axes=[3, 2], keepdims=1)


def _depthwise(x, w):
    from runtime_lite.kernels.conv import conv

    return conv(x, w, None, strides=[1, 1], pads=[2, 2, 2, 2], dilations=[1, 1], groups=x.shape[1])


def test_depthwise_tap_weights_are_kept_only_for_read_only_weights_and_dropped_with_them():
    import gc

    from runtime_lite.kernels.conv import TAP_TILES

    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 48, 7, 7), dtype=np.float32)
    w = rng.standard_normal((48, 1, 5, 5), dtype=np.float32)
    held = TAP_TILES._bytes
    expected = _depthwise(x, w)  # writable weights: computed in a run, never kept
    assert TAP_TILES._bytes == held
    frozen = w.copy()
    frozen.flags.writeable = False
    np.testing.assert_array_equal(_depthwise(x, frozen), expected)
    assert TAP_TILES._bytes > held
    np.testing.assert_array_equal(_depthwise(x, frozen), expected)  # from the cache
    other = (w * 2).astype(np.float32)  # new weights, perhaps at the freed address: never the old tiles
    del frozen
    gc.collect()
    assert TAP_TILES._bytes == held
    other.flags.writeable = False
    np.testing.assert_allclose(_depthwise(x, other), expected * 2, rtol=1e-6, atol=1e-5)


def test_the_tap_weight_cache_holds_at_most_its_limit():
    from runtime_lite.kernels.conv import _TileCache

    cache = _TileCache(limit=3 * 25 * 7 * 16 * 4)
    weights = []
    for seed in range(6):
        w = np.random.default_rng(seed).standard_normal((16, 1, 5, 5), dtype=np.float32)
        w.flags.writeable = False
        weights.append(w)
        tiles = cache.get(w, (0, 1, 2, 3, 4), 7)
        assert tiles.shape == (5, 5, 7 * 16) and cache._bytes <= cache.limit
    assert len(cache._entries) == 3
    newest = cache._entries[next(reversed(cache._entries))][1]
    assert np.shares_memory(cache.get(weights[-1], (0, 1, 2, 3, 4), 7), newest)


def test_a_narrower_map_reads_the_widest_tap_weights_built():
    """A model run at many widths (a symbolic image width) builds each weight's tiles once, for the widest."""
    from runtime_lite.kernels.conv import _TileCache, _tiles

    cache = _TileCache(limit=1 << 20)
    w = np.random.default_rng(0).standard_normal((16, 1, 5, 5), dtype=np.float32)
    w.flags.writeable = False
    taps = (0, 1, 2, 3, 4)
    wide = cache.get(w, taps, 9)
    held = cache._bytes
    narrow = cache.get(w, taps, 4)
    assert cache._bytes == held and len(cache._entries) == 1 and np.shares_memory(narrow, wide)
    np.testing.assert_array_equal(narrow, _tiles(w, taps, 4))
    wider = cache.get(w, taps, 12)  # wider than any before: built anew, replacing the entry
    assert len(cache._entries) == 1 and cache._bytes == wider.nbytes
    np.testing.assert_array_equal(cache.get(w, taps, 9), _tiles(w, taps, 9))
