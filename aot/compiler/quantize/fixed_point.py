"""Real rescale factors as the NPU's fixed-point (multiplier, shift) pairs.

``real ~= multiplier / 2**shift`` with ``multiplier`` a Q31 integer in [2**30, 2**31)
and ``shift`` the total right shift in [1, 62], which is what
``runtime_lite.kernels.integer.requantize`` applies to an int32 accumulator.
A rescale below 2**-32 loses mantissa bits (the shift is capped at 62); one of
2**30 or more cannot be represented and is an error (the scales are then absurd).
"""

from __future__ import annotations

import numpy as np

from aot.errors import BuildError

MAX_SHIFT = 62


def quantize_multiplier(real: np.ndarray, what: str = "rescale") -> tuple[np.ndarray, np.ndarray]:
    """Per-channel int32 multipliers and right shifts for non-negative ``real`` factors."""
    real = np.asarray(real, np.float64).reshape(-1)
    if not np.all(np.isfinite(real)) or (real < 0).any():
        raise BuildError(f"{what}: fixed-point rescale factors must be finite and non-negative")
    mantissa, exponent = np.frexp(real)  # real = mantissa * 2**exponent, mantissa in [0.5, 1)
    multiplier = np.rint(mantissa * 2.0**31).astype(np.int64)
    carry = multiplier == 2**31  # the mantissa rounded up to 1.0
    multiplier[carry] //= 2
    exponent = exponent.astype(np.int64) + carry
    shift = 31 - exponent
    if (shift < 1).any():
        raise BuildError(f"{what}: a rescale factor of {real.max():.3g} is too large for a Q31 multiplier")
    deep = shift > MAX_SHIFT
    if deep.any():  # keep the shift in range by dropping mantissa bits
        multiplier[deep] = np.rint(real[deep] * 2.0**MAX_SHIFT).astype(np.int64)
        shift[deep] = MAX_SHIFT
    zero = real == 0
    multiplier[zero], shift[zero] = 0, 1
    return multiplier.astype(np.int32), shift.astype(np.int32)
