"""Error metrics used by the accuracy tests and benchmarks."""

from __future__ import annotations

import numpy as np


def relative_l2(actual: np.ndarray, expected: np.ndarray) -> float:
    """||actual - expected|| / ||expected|| in float64 (0 when both are all zeros)."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"shapes differ: {actual.shape} vs {expected.shape}")
    denominator = np.linalg.norm(expected)
    numerator = np.linalg.norm(actual - expected)
    return float(numerator / denominator) if denominator else float(numerator)
