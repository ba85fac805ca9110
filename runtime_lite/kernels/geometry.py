"""Checks on the geometry a bundle gives a kernel: strides, pads, dilations, kernel and output sizes.

A bundle is untrusted, and most of numpy keeps a bad value safe (slicing clamps,
``np.take`` checks its indices), but a strided window view does not: the
convolution's im2col reads memory wherever its strides point. So geometry is
checked twice. At load, ``check_*_attrs`` (bound to the kernel in the registry)
refuse attribute values no model can have (a zero stride, a negative dilation,
pads of the wrong length) with a BundleError naming the instruction. At run,
``spatial_geometry`` checks the attributes against the operands' real shapes
before anything is read or allocated, and the window view refuses any geometry
it cannot prove stays inside its buffer.
"""

from __future__ import annotations

from collections.abc import Sequence

from runtime_lite.errors import describe

#: The largest stride, dilation, pad or kernel size a bundle may ask for (more is an attack, not a model).
MAX_EXTENT = 1 << 31


def _ints(attrs: dict, key: str, length: int | None, minimum: int) -> list[int]:
    values = attrs.get(key)
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"attribute {key} must be a list of integers, got {describe(values)}")
    if length is not None and len(values) != length:
        raise ValueError(f"attribute {key} needs {length} values, got {len(values)}")
    for v in values:
        if not minimum <= v <= MAX_EXTENT:
            raise ValueError(f"attribute {key} = {describe(values)} has a value outside [{minimum}, {MAX_EXTENT}]")
    return values


def _int(attrs: dict, key: str, minimum: int, maximum: int = MAX_EXTENT) -> int:
    value = attrs.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise ValueError(f"attribute {key} must be an integer in [{minimum}, {maximum}], got {describe(value)}")
    return value


def _spatial_rank(attrs: dict) -> int:
    strides = attrs.get("strides")
    if not isinstance(strides, list) or not 1 <= len(strides) <= 3:
        raise ValueError(f"attribute strides must list 1 to 3 spatial strides, got {describe(strides)}")
    return len(strides)


def check_conv_attrs(attrs: dict) -> None:
    nd = _spatial_rank(attrs)
    _ints(attrs, "strides", nd, 1)
    _ints(attrs, "dilations", nd, 1)
    _ints(attrs, "pads", 2 * nd, 0)
    _int(attrs, "groups", 1)


def same_pads(sizes: Sequence[int], kernel_shape, strides, dilations, lower: bool) -> list[int]:
    """ONNX's auto_pad SAME: the pads (begins then ends) that make each output ceil(size / stride).

    The odd pixel goes at the end (SAME_UPPER) or the start (SAME_LOWER). The frontend
    folds it where the size is known; ``same_pad`` computes it per run where it is not.
    """
    nd = len(sizes)
    pads = [0] * (2 * nd)
    for i, size in enumerate(sizes):
        out = -(-size // strides[i])
        total = max((out - 1) * strides[i] + (kernel_shape[i] - 1) * dilations[i] + 1 - size, 0)
        small, large = total // 2, total - total // 2
        pads[i], pads[i + nd] = (large, small) if lower else (small, large)
    return pads


def check_same_pad_attrs(attrs: dict) -> None:
    nd = _spatial_rank(attrs)
    _ints(attrs, "strides", nd, 1)
    _ints(attrs, "dilations", nd, 1)
    _ints(attrs, "kernel_shape", nd, 1)


def check_conv_transpose_attrs(attrs: dict) -> None:
    check_conv_attrs(attrs)
    _ints(attrs, "output_padding", len(attrs["strides"]), 0)


def check_pool_attrs(attrs: dict) -> None:
    nd = _spatial_rank(attrs)
    _ints(attrs, "kernel_shape", nd, 1)
    _ints(attrs, "strides", nd, 1)
    _ints(attrs, "dilations", nd, 1)
    _ints(attrs, "pads", 2 * nd, 0)
    _int(attrs, "ceil_mode", 0, 1)


def spatial_geometry(
    op: str,
    in_shape: Sequence[int],
    kernel_shape: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
) -> None:
    """Refuse a window geometry that does not fit the operand (before any memory is read)."""
    nd = len(in_shape)
    if not (len(kernel_shape) == len(strides) == len(dilations) == nd and len(pads) == 2 * nd):
        raise ValueError(
            f"{op}: a {nd}-d input needs {nd} kernel dims, strides and dilations and {2 * nd} pads, got "
            f"kernel {list(kernel_shape)}, strides {list(strides)}, dilations {list(dilations)}, pads {list(pads)}"
        )
    for i in range(nd):
        if kernel_shape[i] < 1 or strides[i] < 1 or dilations[i] < 1 or pads[i] < 0 or pads[i + nd] < 0:
            raise ValueError(f"{op}: spatial axis {i} has kernel {kernel_shape[i]}, stride {strides[i]}, "
                             f"dilation {dilations[i]}, pads {pads[i]}/{pads[i + nd]}")  # fmt: skip
        span = dilations[i] * (kernel_shape[i] - 1) + 1
        if span > in_shape[i] + pads[i] + pads[i + nd]:
            raise ValueError(
                f"{op}: dim {i + 2} (spatial axis {i}): a window spans {span} but the padded input has "
                f"{in_shape[i] + pads[i] + pads[i + nd]}"
            )


def window_fits(size: int, k: int, stride: int, dilation: int, out: int) -> bool:
    """Whether ``out`` windows of ``k`` taps, ``dilation`` apart, every ``stride`` stay inside ``size`` elements."""
    return k >= 1 and stride >= 1 and dilation >= 1 and out >= 1 and (out - 1) * stride + (k - 1) * dilation < size
