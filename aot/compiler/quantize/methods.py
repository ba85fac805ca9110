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
  error past it (as NVIDIA's ``_compute_amax_mse``, in closed form for every bin edge at
  once instead of quantizing the bin centres for a hundred candidates).

Candidate bounds are bin edges. mse tries every one; entropy tries 256 evenly spaced ones,
then every edge around the best of those: a few milliseconds a tensor (the divergence is
noisy in the bound: fewer tries miss its minimum).
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


def entropy_amax(hist: np.ndarray, top: float, coarse: int = 256) -> float:
    """The bound (a bin edge) of least KL divergence between the clipped reference and its 128-level copy."""
    bins = hist.astype(np.float64)
    if len(bins) > 1:
        bins[0] = bins[1]  # the zeros of a relu would dominate the divergence (pytorch-quantization does the same)
    total = len(bins)
    if total <= QUANTIZED_BINS or bins.sum() == 0:
        return top
    tail = np.append(np.cumsum(bins[::-1])[::-1], 0.0)  # tail[i] = sum of bins[i:]
    held = bins > 0

    def divergence(i: int) -> float:
        level = (np.arange(i) * QUANTIZED_BINS) // i  # which of the 128 levels each bin falls in
        per_level = np.bincount(level, weights=bins[:i], minlength=QUANTIZED_BINS)
        occupied = np.bincount(level, weights=held[:i], minlength=QUANTIZED_BINS)
        candidate = np.where(held[:i], (per_level / np.maximum(occupied, 1))[level], 0.0)
        reference = bins[:i].copy()
        reference[-1] += tail[i]  # values past the bound clip to it
        p, q = reference / reference.sum(), candidate / max(candidate.sum(), 1e-300)
        mask = p > 0
        if not q[mask].all():
            return np.inf  # the candidate has no mass where the data has
        return float(np.dot(p[mask], np.log(p[mask] / q[mask])))

    i = _search(lambda bounds: np.array([divergence(int(b)) for b in bounds]), QUANTIZED_BINS, total, coarse)
    return i * top / total


def mse_amax(hist: np.ndarray, top: float) -> float:
    """The bound (a bin edge) of least expected squared error: rounding inside it, clipping past it.

    Values are uniform within a bin. Past the bound the error is (x - amax)**2, integrated
    per bin; below half a step x rounds to 0 and the error is x**2; elsewhere inside it is
    step**2 / 12 (uniform rounding error). Moments summed from either end give every
    bound's error at once.
    """
    counts = hist.astype(np.float64)
    total = len(counts)
    if counts.sum() == 0:
        return top
    width = top / total
    lower = np.arange(total) * width
    upper = lower + width
    density = counts / width
    # per bin, the integrals of 1, x and x**2 over the bin's values
    count = density * (upper - lower)
    first = density * (upper**2 - lower**2) / 2
    second = density * (upper**3 - lower**3) / 3

    def suffix(m: np.ndarray) -> np.ndarray:  # suffix[b] = sum of m[b:], for b in 0..total
        return np.append(np.cumsum(m[::-1])[::-1], 0.0)

    def prefix(m: np.ndarray) -> np.ndarray:  # prefix[b] = sum of m[:b]
        return np.append(0.0, np.cumsum(m))

    bounds = np.arange(1, total + 1)
    amax = bounds * width
    step = amax / INT8_MAX
    past0, past1, past2 = suffix(count)[bounds], suffix(first)[bounds], suffix(second)[bounds]
    clipping = past2 - 2 * amax * past1 + amax**2 * past0  # integral of (x - amax)**2 past the bound
    to_zero = np.minimum(np.floor(step / 2 / width).astype(np.int64), bounds)  # bins that round to 0
    below0, below2 = prefix(count), prefix(second)
    rounding = below2[to_zero] + (below0[bounds] - below0[to_zero]) * step**2 / 12
    return float(amax[_last_argmin(clipping + rounding)])


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
