"""The scalar max/min fast path must be numpy's own ufunc, element for element."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_lite.kernels.bounds import ROW, bounded, clamp

SIZES = st.sampled_from([0, 1, 7, ROW - 1, ROW, ROW + 1, 3 * ROW + 5])
FLOATS = st.sampled_from([np.float32, np.float64, np.float16])


def _data(size: int, dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(size) * 8).astype(dtype)
    if size:
        x[rng.integers(0, size, max(1, size // 50))] = np.nan
        x[0] = -0.0
    return x


@settings(max_examples=40, deadline=None)
@given(size=SIZES, dtype=FLOATS, seed=st.integers(0, 2**16), value=st.floats(-4, 4, width=16))
def test_bounded_matches_numpy(size, dtype, seed, value):
    x = _data(size, dtype, seed)
    for ufunc in (np.maximum, np.minimum):
        expected = ufunc(x, np.asarray(value, dtype))
        got = bounded(ufunc, x, value)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


@settings(max_examples=40, deadline=None)
@given(
    size=SIZES, dtype=FLOATS, seed=st.integers(0, 2**16), low=st.none() | st.just(0.0), high=st.none() | st.just(6.0)
)
def test_clamp_matches_clip_in_place_and_not(size, dtype, seed, low, high):
    x = _data(size, dtype, seed)
    expected = x if low is None and high is None else np.clip(x, low, high)
    np.testing.assert_array_equal(clamp(x, low, high), expected)
    y = x.copy()
    assert clamp(y, low, high, out=y) is y
    np.testing.assert_array_equal(y, expected)
    out = np.empty_like(x)
    assert clamp(x, low, high, out=out) is out
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8])
def test_integers_and_non_contiguous_views(dtype):
    x = np.arange(-2 * ROW, 2 * ROW).astype(dtype).reshape(4, ROW)
    np.testing.assert_array_equal(clamp(x, 3, 90), np.clip(x, 3, 90))
    strided = x[:, ::3]  # not contiguous: numpy's own path
    np.testing.assert_array_equal(bounded(np.maximum, strided, 5), np.maximum(strided, 5))
    out = np.empty((4, ROW), dtype)[:, ::3]
    bounded(np.minimum, strided, 5, out)
    np.testing.assert_array_equal(out, np.minimum(strided, 5))
