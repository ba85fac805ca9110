"""How a tensor's int8 bound (amax) is chosen from its calibration histogram.

Every method reads the same histogram of |x| (``BINS`` bins over [0, top]) that one
calibration pass collected, so trying all of them costs no further run of the model:

- ``minmax``: the largest |x| seen. Nothing clips; rare outliers stretch the step.
- ``percentile``: the given percentile of |x|; a fixed share of values clips.
- ``entropy``: the bound whose 128-level quantized histogram is closest to the observed
  one in KL divergence (TensorRT's default calibrator; the algorithm of NVIDIA's
  pytorch-quantization ``_compute_amax_entropy`` and MXNet's ``_get_optimal_threshold``:
  values past the bound fold into the last bin of the reference, the candidate spreads
  each level's count evenly over the bins that held data).
- ``mse``: the bound minimizing the expected squared quantization error over the
  histogram, values taken uniform within a bin: rounding error inside the bound, clipping
  error past it (as NVIDIA's ``_compute_amax_mse``, with the error per bin integrated
  instead of taken at the bin centre, which aliases when a bin is wider than a step).

Candidate bounds are bin edges; entropy tries 512 evenly spaced ones and mse, whose error
is smoother in the bound, 128, then every edge around the best of those: a few
milliseconds a tensor (the divergence is noisy in the bound: fewer tries miss its minimum).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: The methods that choose amax from a histogram (``auto`` in config.py tries each).
HISTOGRAM_METHODS = ("minmax", "percentile", "entropy", "mse")
#: int8 levels on one side of zero for the entropy method (2**(8-1)), as TensorRT uses.
QUANTIZED_BINS = 128
INT8_MAX = 127


def _search(cost: Callable[[np.ndarray], np.ndarray], first: int, bins: int, coarse: int) -> int:
    """The bin count in [first, bins] of least ``cost``: ``coarse`` evenly spaced tries, then every one
    around the best of them (the last minimum where several tie, as pytorch-quantization takes)."""
    stride = max(1, -(-(bins - first) // coarse))
    tries = np.unique(np.append(np.arange(first, bins + 1, stride), bins))
    best = int(tries[_last_argmin(cost(tries))])
    fine = np.arange(max(first, best - stride), min(bins, best + stride) + 1)
    return int(fine[_last_argmin(cost(fine))])


def _last_argmin(values: np.ndarray) -> int:
    return len(values) - 1 - int(np.argmin(values[::-1]))


def percentile_amax(hist: np.ndarray, top: float, percentile: float) -> float:
    cumulative = np.cumsum(hist)
    bin_index = int(np.searchsorted(cumulative, cumulative[-1] * percentile / 100.0))
    return (bin_index + 1) * top / len(hist)


def entropy_amax(hist: np.ndarray, top: float) -> float:
    """The bound (a bin edge) of least KL divergence between the clipped reference and its 128-level copy."""
    bins = hist.astype(np.float64)
    if len(bins) > 1:
        bins[0] = bins[1]  # the zeros of a relu would dominate the divergence (pytorch-quantization does the same)
    total = len(bins)
    if total <= QUANTIZED_BINS or bins.sum() == 0:
        return top

    def divergence(i: int) -> float:
        reference = bins[:i].copy()
        reference[-1] += bins[i:].sum()
        level = (np.arange(i) * QUANTIZED_BINS) // i  # which of the 128 levels each bin falls in
        held = bins[:i] > 0
        per_level = np.bincount(level, weights=bins[:i], minlength=QUANTIZED_BINS)
        occupied = np.bincount(level, weights=held, minlength=QUANTIZED_BINS)
        candidate = np.where(held, per_level[level] / np.maximum(occupied[level], 1), 0.0)
        p, q = reference / reference.sum(), candidate / max(candidate.sum(), 1e-300)
        mask = p > 0
        if np.any(q[mask] == 0):
            return np.inf  # the candidate has no mass where the data has
        return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))

    i = _search(lambda bounds: np.array([divergence(int(b)) for b in bounds]), QUANTIZED_BINS, total, 512)
    return i * top / total


def _rounding_integral(t: np.ndarray, step: np.ndarray) -> np.ndarray:
    """F(t) = integral from 0 to t of (u - step * round(u / step))**2 du (round half up)."""
    k = np.floor(t / step + 0.5)
    v = t - step * k
    cube = step**3
    return k * cube / 12 + (v**3 + cube / 8) / 3 - cube / 24


def mse_amax(hist: np.ndarray, top: float) -> float:
    """The bound (a bin edge) of least expected squared error: rounding inside it, clipping past it."""
    counts = hist.astype(np.float64)
    total = len(counts)
    held = np.flatnonzero(counts)  # only bins that hold data contribute
    if held.size == 0:
        return top
    width = top / total
    lower, upper, weight = held * width, (held + 1) * width, counts[held] / width

    def error(bounds: np.ndarray) -> np.ndarray:
        amax = bounds[:, None] * width
        step = amax / INT8_MAX
        rounding = _rounding_integral(upper, step) - _rounding_integral(lower, step)
        clipping = ((upper - amax) ** 3 - (lower - amax) ** 3) / 3
        return np.where(held[None, :] < bounds[:, None], rounding, clipping) @ weight

    return _search(error, 1, total, 128) * width


def choose_amax(method: str, hist: np.ndarray, top: float, peak: float, percentile: float) -> float:
    """``method``'s bound, never past the largest |x| seen (a bin edge can lie above it)."""
    if method == "minmax" or top == 0.0:
        return peak
    if method == "percentile":
        amax = percentile_amax(hist, top, percentile)
    elif method == "entropy":
        amax = entropy_amax(hist, top)
    elif method == "mse":
        amax = mse_amax(hist, top)
    else:
        raise ValueError(f"unknown calibration method {method!r}")
    return min(peak, amax)
