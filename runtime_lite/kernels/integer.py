"""Integer kernels: int8 x int8 products accumulated in int32, requantized with a fixed-point multiplier.

What the NPU computes for a quantized composite (``docs/quantization.md``), as
TFLite, CMSIS-NN and NPUs do: no float between the int8 operands and the int8
result. Every quantity is symmetric (zero point 0):

    acc[c] = sum(x_q * w_q[c]) + bias_q[c]                        (int32)
    y_q[c] = clamp(round_half_away(acc[c] * multiplier[c] / 2**shift[c]), act_min, act_max)

``multiplier`` is the real rescale ``s_x * s_w[c] / s_y`` as a Q31 integer in
[2**30, 2**31) (0 for a channel whose rescale is 0) and ``shift`` the total right
shift, 1 to 62 (``aot.compiler.quantize.fixed_point`` derives both). The product
``acc * multiplier`` is formed in int64 (|acc| < 2**31 and multiplier < 2**31, so it
cannot overflow) and rounded once, half away from zero. That is CMSIS-NN's
single-rounding requantization; TFLite's reference (SaturatingRoundingDoublingHighMul
then RoundingDivideByPOT) rounds twice and can differ by one step at ties.

The sums themselves run through the host's GEMM lowerings on integer-valued
floats. That is exact, not an approximation: every partial sum of K products of
int8 values is an integer of magnitude at most K * 128 * 128, which float32
represents exactly while that is below 2**24 (K <= 1024) and float64 below 2**53;
the dtype is picked from K, so the accumulator equals the int32 sum bit for bit
(the tests check it against a plain integer reference) and runs at BLAS speed.
"""

from __future__ import annotations

import math

import numpy as np

from runtime_lite.kernels.conv import _conv_cost, _conv_geometry, conv
from runtime_lite.kernels.geometry import check_conv_attrs
from runtime_lite.kernels.linalg import _dense_cost, dense
from runtime_lite.kernels.registry import kernel

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
#: Largest |int8 x int8| product: -128 * -128.
_MAX_PRODUCT = 128 * 128


def exact_float(reduction: int) -> type[np.floating]:
    """The narrowest float whose sums of ``reduction`` int8 products are all exact integers."""
    return np.float32 if reduction * _MAX_PRODUCT < 2**24 else np.float64


def _check_int8(op: str, **arrays: np.ndarray) -> None:
    for name, array in arrays.items():
        if array.dtype != np.int8:
            raise ValueError(f"{op}: {name} must be int8, got {array.dtype}")


def _check_channels(op: str, channels: int, bias, multiplier, shift) -> None:
    for name, array in (("bias", bias), ("multiplier", multiplier), ("shift", shift)):
        if array.dtype != np.int32 or array.shape != (channels,):
            raise ValueError(f"{op}: {name} must be int32[{channels}], got {array.dtype}{list(array.shape)}")
    if multiplier.size and (multiplier.min() < 0):
        raise ValueError(f"{op}: multiplier must be non-negative (a Q31 fraction)")
    if shift.size and (shift.min() < 1 or shift.max() > 62):
        raise ValueError(f"{op}: shift must lie in [1, 62], got [{shift.min()}, {shift.max()}]")


def requantize(acc: np.ndarray, multiplier: np.ndarray, shift: np.ndarray, act_min: int, act_max: int) -> np.ndarray:
    """int32 accumulators -> int8: ``round_half_away(acc * multiplier / 2**shift)``, clamped (one rounding)."""
    product = acc.astype(np.int64) * multiplier.astype(np.int64)
    shift = shift.astype(np.int64)
    magnitude = (np.abs(product) + (np.int64(1) << (shift - 1))) >> shift
    scaled = np.where(product < 0, -magnitude, magnitude)
    return np.clip(scaled, act_min, act_max).astype(np.int8)


def _accumulate(exact: np.ndarray, bias: np.ndarray, channel_shape: tuple[int, ...]) -> np.ndarray:
    """The exact sums plus the int32 bias, saturated to int32 as the accumulator register is."""
    acc = np.rint(exact).astype(np.int64) + bias.astype(np.int64).reshape(channel_shape)
    return np.clip(acc, INT32_MIN, INT32_MAX, out=acc)


def _check_activation(act_min: int, act_max: int) -> None:
    if not -128 <= act_min <= act_max <= 127:
        raise ValueError(f"act_min {act_min} and act_max {act_max} must satisfy -128 <= act_min <= act_max <= 127")


def _check_int8_conv_attrs(attrs: dict) -> None:
    check_conv_attrs(attrs)
    _check_activation(attrs["act_min"], attrs["act_max"])


def _widened(array: np.ndarray, dtype: type[np.floating]) -> np.ndarray:
    """A stand-in of ``array.astype(dtype)`` for the float kernels' costs: its shape and dtype, no memory."""
    return np.broadcast_to(np.zeros((), dtype), array.shape)


#: Output-sized int64/float64 temporaries of ``_accumulate`` and ``requantize`` (rint, the int64 sum,
#: the product, its magnitude, the signed result, the clip), counted without reuse.
_REQUANTIZE_TEMPORARIES = 8


def _int8_conv_cost(x, w, bias, multiplier, shift, *, strides, pads, dilations, groups, act_min, act_max) -> int:
    """The widened operands, the float convolution's own cost, and the requantization's temporaries."""
    wide = exact_float(math.prod(w.shape[1:]))
    xw, ww = _widened(x, wide), _widened(w, wide)
    _, out_shape = _conv_geometry(xw, ww, None, strides, pads, dilations, groups)
    outputs = x.shape[0] * w.shape[0] * math.prod(out_shape)
    return xw.nbytes + ww.nbytes + _conv_cost(xw, ww, strides=strides, pads=pads, dilations=dilations, groups=groups) \
        + _REQUANTIZE_TEMPORARIES * 8 * outputs  # fmt: skip


def _int8_dense_cost(x, w, bias, multiplier, shift, *, act_min, act_max) -> int:
    if w.ndim != 2 or x.ndim < 1:
        return 0  # refused by the kernel before it allocates
    wide = exact_float(w.shape[1])
    xw, ww = _widened(x, wide), _widened(w, wide)
    outputs = math.prod(x.shape[:-1]) * w.shape[0]
    return xw.nbytes + ww.nbytes + _dense_cost(xw, ww) + _REQUANTIZE_TEMPORARIES * 8 * outputs


@kernel("int8_conv", check=_check_int8_conv_attrs, cost=_int8_conv_cost)
def int8_conv(x, w, bias, multiplier, shift, *, strides, pads, dilations, groups, act_min, act_max):
    """A convolution (any spatial rank, grouped or depthwise) of int8 operands, int32 accumulation, int8 out."""
    _check_int8("int8_conv", x=x, w=w)
    _check_channels("int8_conv", w.shape[0], bias, multiplier, shift)
    wide = exact_float(math.prod(w.shape[1:]))
    exact = conv(x.astype(wide), w.astype(wide), None, strides=strides, pads=pads, dilations=dilations, groups=groups)
    along = (-1,) + (1,) * (exact.ndim - 2)
    acc = _accumulate(exact, bias, along)
    return requantize(acc, multiplier.reshape(along), shift.reshape(along), act_min, act_max)


def _check_int8_dense_attrs(attrs: dict) -> None:
    _check_activation(attrs["act_min"], attrs["act_max"])


@kernel("int8_dense", check=_check_int8_dense_attrs, cost=_int8_dense_cost)
def int8_dense(x, w, bias, multiplier, shift, *, act_min, act_max):
    """``x @ w.T`` of int8 operands (w laid out (units, in), as ``dense``), int32 accumulation, int8 out."""
    _check_int8("int8_dense", x=x, w=w)
    if w.ndim != 2 or x.ndim < 1 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"int8_dense: input {list(x.shape)} and weight {list(w.shape)} (units, in) do not fit")
    _check_channels("int8_dense", w.shape[0], bias, multiplier, shift)
    wide = exact_float(w.shape[1])
    acc = _accumulate(dense(x.astype(wide), w.astype(wide)), bias, (-1,))
    return requantize(acc, multiplier, shift, act_min, act_max)
