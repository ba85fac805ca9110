"""Activation functions and (log-)softmax.

All of them accept ``out=`` so an activation that follows a convolution can reuse
the convolution's buffer instead of allocating a new one.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from runtime_lite.kernels import gemm
from runtime_lite.kernels.bounds import bounded, clamp
from runtime_lite.kernels.cost import like, nbytes, promoted, ufunc_cost, work_itemsize
from runtime_lite.kernels.elementwise import check_broadcast
from runtime_lite.kernels.measured import pick
from runtime_lite.kernels.registry import kernel


def _leaky_relu_cost(x, *, alpha, out=None) -> int:
    """``x * alpha`` always; outside [0, 1] a mask and a fresh ``where`` result even in place."""
    return 2 * x.nbytes + x.size


def _prelu_cost(x, slope) -> int:
    size = math.prod(np.broadcast_shapes(x.shape, slope.shape))
    return size * (1 + 2 * promoted(x, slope).itemsize + x.dtype.itemsize)


def _elu_cost(x, *, alpha) -> int:
    return 5 * nbytes(x.shape, work_itemsize(x)) + x.size


def _softmax_cost(times: int):
    """``times`` tensors the size of the input, and the per-row max and sum."""

    def cost(x, *, axis) -> int:
        rows = x.size // x.shape[axis] if x.ndim and x.shape[axis] else x.size
        return times * nbytes(x.shape, work_itemsize(x)) + 2 * nbytes((rows,), work_itemsize(x))

    return cost


def _erf_cost(x, *_, out=None, approximate="none", **__) -> int:
    """float32: the result and each running block's scratch; other dtypes: a dozen float64 temporaries."""
    result = 0 if out is not None else x.nbytes
    if approximate == "tanh":
        return result + 8 * nbytes(x.shape, work_itemsize(x))
    if x.dtype == np.float32:
        copy = 0 if x.flags.c_contiguous else x.nbytes
        return result + copy + 8 * nbytes((min(_BLOCK, x.size),), 4) * gemm.concurrent_blocks()
    return result + 14 * nbytes(x.shape, max(8, x.dtype.itemsize))


@kernel("relu", inplace=(0,), cost=like())
def relu(x, *, out=None):
    return bounded(np.maximum, x, 0, out)


@kernel("relu6", inplace=(0,), cost=like())
def relu6(x, *, out=None):
    return clamp(x, 0, 6, out)


@kernel("leaky_relu", inplace=(0,), cost=_leaky_relu_cost)
def leaky_relu(x, *, alpha, out=None):
    negative = x * np.asarray(alpha, x.dtype)
    if 0 <= alpha <= 1:  # then max(x, alpha*x) is exactly leaky relu
        return np.maximum(x, negative, out=out)
    return np.where(x < 0, negative, x)


@kernel("prelu", cost=_prelu_cost)
def prelu(x, slope):
    check_broadcast(x, slope)
    return np.where(x < 0, x * slope, x).astype(x.dtype, copy=False)


@kernel("elu", cost=_elu_cost)
def elu(x, *, alpha):
    negative = np.expm1(np.minimum(x, 0)) * np.asarray(alpha, x.dtype)
    return np.where(x > 0, x, negative).astype(x.dtype, copy=False)


@kernel("sigmoid", inplace=(0,), cost=like())
def sigmoid(x, *, out=None):
    """float32: ``1 / (1 + exp(-x))`` or ``0.5 + 0.5 * tanh(x / 2)``, whichever numpy runs faster here.

    Where numpy dispatches AVX-512 its float32 tanh is twice as fast as its exp (four
    passes at tanh's speed: EfficientNet-B0's sigmoids 1.9x faster); with AVX2 it is
    slower (kernels/measured.py). The tanh form's error is absolute, at most 6e-8 (the
    exp form: 9e-8), so far in the negative tail it is relatively less exact (2e-5 where
    sigmoid > 1e-3) and reaches 0 below -17, where the exp form reaches it below -88:
    onnxruntime's own logistic (MLAS: a rational fit, clamped at +-18) has the same
    absolute-error character. Other dtypes always take the exp form.
    """
    if x.dtype == np.float32 and pick("sigmoid", ("exp", "tanh"), _sigmoid_trials) == "tanh":
        return _sigmoid_tanh(x, out)
    return _sigmoid_exp(x, out)


def _sigmoid_exp(x, out=None):
    # 1 / (1 + exp(-x)) overflows to inf for large -x and then rounds to exactly 0,
    # which is the right limit; errors are silenced by the executor.
    y = np.asarray(np.negative(x, out=out))  # asarray: numpy hands back a scalar for a 0-d x, not writable in place
    np.exp(y, out=y)
    y += np.ones((), y.dtype)
    return np.reciprocal(y, out=y)


def _sigmoid_tanh(x, out=None):
    half = np.asarray(0.5, x.dtype)
    y = np.asarray(np.multiply(x, half, out=out))
    np.tanh(y, out=y)
    y *= half
    y += half
    return y


def _sigmoid_trials() -> dict:
    """The two forms on a 256 kB float32 sample, for ``pick`` to time."""
    sample = np.linspace(-8, 8, 1 << 16, dtype=np.float32)
    scratch = np.empty_like(sample)
    return {"exp": lambda: _sigmoid_exp(sample, scratch), "tanh": lambda: _sigmoid_tanh(sample, scratch)}


@kernel("tanh", inplace=(0,), cost=ufunc_cost(np.tanh))
def tanh(x, *, out=None):
    return np.tanh(x, out=out)


@kernel("hard_sigmoid", inplace=(0,), cost=like())
def hard_sigmoid(x, *, alpha, beta, out=None):
    y = np.asarray(np.multiply(x, np.asarray(alpha, x.dtype), out=out))  # a 0-d x gives a scalar: make it writable
    y += np.asarray(beta, x.dtype)
    return clamp(y, 0, 1, out=y)


@kernel("hard_swish", inplace=(0,), cost=like(scratch=1))
def hard_swish(x, *, out=None):
    gate = hard_sigmoid(x, alpha=1.0 / 6.0, beta=0.5)
    return np.multiply(x, gate, out=out)


@kernel("softplus", cost=like(scratch=4))
def softplus(x):
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).astype(x.dtype, copy=False)


@kernel("softsign", cost=like(scratch=2))
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


#: erf(z) ~ z * P(z^2) / Q(z^2) for |z| <= 4 (erf is 1 in float32 beyond 3.92): the rational
#: fit XLA and Eigen use for float32, coefficients highest degree first. Max relative error
#: 4.5e-7 against math.erf over float32 (tests/test_activation_accuracy.py).
_ERF32_P = (
    -2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
    -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02,
)  # fmt: skip
_ERF32_Q = (
    -1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
    -1.42647390514189e-02,
)  # fmt: skip
_ERF32_CLIP = 4.0
#: Elements per block (256 KB of float32): the block's few scratch rows stay in L2/L3, so the ~25
#: numpy passes of the rational run at cache speed instead of streaming the tensor 25 times.
#: 64k rather than 32k: half the numpy calls; gelu on 1x56x56x384 7.7 -> 7.1 ms, 1x14x14x1536
#: 1.9-2.2 -> 1.6-1.9 ms, ConvNeXt-tiny 0.92x (0.76..1.18) in a 15-round A/B.
_BLOCK = 65536


def _horner(coefficients: np.ndarray, s: np.ndarray, out: np.ndarray) -> np.ndarray:
    np.multiply(s, coefficients[0], out=out)
    for c in coefficients[1:-1]:
        out += c
        out *= s
    out += coefficients[-1]
    return out


def _scaled_coefficients(scale: float, tail: float) -> tuple[np.ndarray, np.ndarray, float]:
    """P and Q for ``tail + erf(scale * c)`` written as ``tail + c * P(c^2) / Q(c^2)``, float32.

    Folding ``scale`` into the coefficients (``z^2 = scale^2 c^2``) saves a pass per block.
    """
    p = np.array(_ERF32_P, np.float64) * scale ** (2 * np.arange(len(_ERF32_P))[::-1]) * scale
    q = np.array(_ERF32_Q, np.float64) * scale ** (2 * np.arange(len(_ERF32_Q))[::-1])
    return p.astype(np.float32), q.astype(np.float32), tail


_ERF_COEFFS = _scaled_coefficients(1.0, 0.0)
# gelu(x) = x * (0.5 + 0.5 * erf(x / sqrt 2)): the 0.5 and 1/sqrt(2) go into P.
_GELU_P, _GELU_Q, _GELU_TAIL = _scaled_coefficients(1.0 / math.sqrt(2.0), 0.5)
_GELU_P = (_GELU_P.astype(np.float64) * 0.5).astype(np.float32)


def blockwise(
    x: np.ndarray, out: np.ndarray | None, step: Callable[[np.ndarray, np.ndarray], None], block: int | None = None
) -> np.ndarray:
    """``step(x_block, out_block)`` over cache-sized blocks of the flattened tensor, on every thread.

    A kernel made of many numpy passes (a rational erf: ~25) streams the tensor once per
    pass; on blocks of ``block`` elements (``_BLOCK`` by default) each pass reads what the last one left in cache.
    A non-contiguous ``out`` (in place on a transposed view) gets the result copied in:
    its flattening would be a copy, and the blocks' writes would be lost.
    """
    block = _BLOCK if block is None else block
    flat_x = np.ascontiguousarray(x).reshape(-1)
    y = np.empty(x.shape, x.dtype) if out is None or not out.flags.c_contiguous else out
    flat_y = y.reshape(-1)
    n = flat_x.size
    gemm.run_blocks([lambda i=i: step(flat_x[i : i + block], flat_y[i : i + block]) for i in range(0, n, block)])
    if out is not None and y is not out:
        np.copyto(out, y)
        return out
    return y


def _erf_rational32(x: np.ndarray, p_coeffs, q_coeffs, clip: float, tail: float, times_x: bool, out) -> np.ndarray:
    """Blockwise ``[x *] (tail + c P(c^2) / Q(c^2))`` with ``c = clip(x)``, float32 throughout."""
    bounds = np.full(min(_BLOCK, x.size), -clip, np.float32), np.full(min(_BLOCK, x.size), clip, np.float32)

    def step(xs: np.ndarray, ys: np.ndarray) -> None:
        k = xs.size
        c = np.minimum(xs, bounds[1][:k])  # contiguous bounds: numpy's SIMD loop (see bounds.py)
        np.maximum(c, bounds[0][:k], out=c)
        s = np.multiply(c, c)
        p = _horner(p_coeffs, s, np.empty_like(s))
        q = _horner(q_coeffs, s, np.empty_like(s))
        p /= q  # before the multiply by c, so a subnormal c meets a normal ratio
        p *= c
        if tail:
            p += np.float32(tail)
        np.multiply(p, xs, out=ys) if times_x else np.copyto(ys, p)

    return blockwise(x, out, step)


@kernel("erf", cost=_erf_cost)
def erf(x):
    if x.dtype == np.float32:
        p, q, tail = _ERF_COEFFS
        return _erf_rational32(x, p, q, _ERF32_CLIP, tail, False, None)
    return _erf64(x).astype(x.dtype, copy=False)


@kernel("gelu", inplace=(0,), cost=_erf_cost)
def gelu(x, *, approximate, out=None):
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + np.asarray(0.044715, x.dtype) * x * x * x)
        return np.multiply(np.asarray(0.5, x.dtype) * x, 1 + np.tanh(inner), out=out).astype(x.dtype, copy=False)
    if x.dtype == np.float32:
        return _erf_rational32(x, _GELU_P, _GELU_Q, _ERF32_CLIP * math.sqrt(2.0), _GELU_TAIL, True, out)
    y = 0.5 * x * (1.0 + _erf64(x * (1.0 / math.sqrt(2.0))))
    return y.astype(x.dtype, copy=False) if out is None else np.copyto(out, y, casting="same_kind") or out


@kernel("softmax", cost=_softmax_cost(1))
def softmax(x, *, axis):
    if x.size == 0:  # an empty axis has no max (a zero-length sequence's attention scores): nothing to compute
        return x.copy()
    y = np.subtract(x, x.max(axis=axis, keepdims=True))
    np.exp(y, out=y)
    y /= y.sum(axis=axis, keepdims=True)
    return y


@kernel("log_softmax", cost=_softmax_cost(2))
def log_softmax(x, *, axis):
    if x.size == 0:
        return x.copy()
    y = np.subtract(x, x.max(axis=axis, keepdims=True))
    y -= np.log(np.exp(y).sum(axis=axis, keepdims=True))
    return y
