"""Activation functions and (log-)softmax.

All of them accept ``out=`` so an activation that follows a convolution can reuse
the convolution's buffer instead of allocating a new one.
"""

from __future__ import annotations

import math

import numpy as np

from runtime_lite.kernels import kernel
from runtime_lite.kernels.bounds import bounded, clamp
from runtime_lite.kernels.elementwise import check_broadcast


@kernel("relu", inplace=(0,))
def relu(x, *, out=None):
    return bounded(np.maximum, x, 0, out)


@kernel("relu6", inplace=(0,))
def relu6(x, *, out=None):
    return clamp(x, 0, 6, out)


@kernel("leaky_relu", inplace=(0,))
def leaky_relu(x, *, alpha=0.01, out=None):
    negative = x * np.asarray(alpha, x.dtype)
    if 0 <= alpha <= 1:  # then max(x, alpha*x) is exactly leaky relu
        return np.maximum(x, negative, out=out)
    return np.where(x < 0, negative, x)


@kernel("prelu")
def prelu(x, slope):
    check_broadcast(x, slope)
    return np.where(x < 0, x * slope, x).astype(x.dtype, copy=False)


@kernel("elu")
def elu(x, *, alpha=1.0):
    negative = np.expm1(np.minimum(x, 0)) * np.asarray(alpha, x.dtype)
    return np.where(x > 0, x, negative).astype(x.dtype, copy=False)


@kernel("sigmoid", inplace=(0,))
def sigmoid(x, *, out=None):
    # 1 / (1 + exp(-x)) overflows to inf for large -x and then rounds to exactly 0,
    # which is the right limit; errors are silenced by the executor.
    y = np.negative(x, out=out)
    np.exp(y, out=y)
    y += np.ones((), x.dtype)
    return np.reciprocal(y, out=y)


@kernel("tanh", inplace=(0,))
def tanh(x, *, out=None):
    return np.tanh(x, out=out)


@kernel("hard_sigmoid", inplace=(0,))
def hard_sigmoid(x, *, alpha=0.2, beta=0.5, out=None):
    y = np.multiply(x, np.asarray(alpha, x.dtype), out=out)
    y += np.asarray(beta, x.dtype)
    return clamp(y, 0, 1, out=y)


@kernel("hard_swish", inplace=(0,))
def hard_swish(x, *, out=None):
    gate = hard_sigmoid(x, alpha=1.0 / 6.0, beta=0.5)
    return np.multiply(x, gate, out=out)


@kernel("softplus")
def softplus(x):
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).astype(x.dtype, copy=False)


@kernel("softsign")
def softsign(x):
    return x / (np.ones((), x.dtype) + np.abs(x))


_SQRT_PI = math.sqrt(math.pi)
_ERFC_COEFFS = (
    -1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
    0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277,
)  # fmt: skip


def _erf64(x: np.ndarray) -> np.ndarray:
    """erf in float64 without scipy: a Taylor series near zero, Chebyshev erfc beyond.

    The erfc fit (Numerical Recipes, fractional error < 1.2e-7) loses relative
    accuracy as erf -> 0, so |x| < 0.5 uses the series, exact to double rounding
    with 12 terms there.
    """
    x = np.asarray(x, np.float64)
    ax = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * ax)
    poly = np.full_like(t, _ERFC_COEFFS[-1])
    for c in reversed(_ERFC_COEFFS[:-1]):
        poly = poly * t + c
    far = 1.0 - t * np.exp(-ax * ax + poly)
    x2 = x * x
    term = x.copy()
    near = x.copy()
    for n in range(1, 12):
        term = term * -x2 / n
        near = near + term / (2 * n + 1)
    near *= 2.0 / _SQRT_PI
    return np.where(ax < 0.5, near, np.copysign(far, x))


@kernel("erf")
def erf(x):
    return _erf64(x).astype(x.dtype, copy=False)


@kernel("gelu")
def gelu(x, *, approximate="none"):
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + np.asarray(0.044715, x.dtype) * x * x * x)
        return (np.asarray(0.5, x.dtype) * x * (1 + np.tanh(inner))).astype(x.dtype, copy=False)
    return (0.5 * x * (1.0 + _erf64(x * (1.0 / math.sqrt(2.0))))).astype(x.dtype, copy=False)


@kernel("softmax")
def softmax(x, *, axis=-1):
    y = np.subtract(x, x.max(axis=axis, keepdims=True))
    np.exp(y, out=y)
    y /= y.sum(axis=axis, keepdims=True)
    return y


@kernel("log_softmax")
def log_softmax(x, *, axis=-1):
    y = np.subtract(x, x.max(axis=axis, keepdims=True))
    y -= np.log(np.exp(y).sum(axis=axis, keepdims=True))
    return y
