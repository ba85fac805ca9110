"""ONNX ops that are compositions of canonical ops (docs/coverage.md lists what the node tests say of each).

Each is written with ops that already have kernels, so nothing here needs a new kernel
and every backend pattern sees the ops it knows. Registered into ``converters.CONVERTERS``
when the ONNX frontend is imported.
"""

from __future__ import annotations

import math

import numpy as np

from aot.frontend.onnx.context import NodeContext
from aot.frontend.onnx.converters import _rank_op, _spatial_attrs, converter, single
from aot.ir.graph import Value


def _static(ctx: NodeContext, i: int = 0) -> tuple[int, ...]:
    return tuple(ctx.static_dims(i))


# -- signal windows: constants once their size is ------------------------------------------


def _window(ctx: NodeContext, coefficients: tuple[float, ...]) -> Value:
    """sum_k (-1)^k a_k cos(2 pi k n / N), N = size (periodic) or size - 1 (symmetric), in float64 then cast."""
    size = int(ctx.require_const(0, "size").reshape(-1)[0])
    n = np.arange(size, dtype=np.float64)
    denominator = size if ctx.attr("periodic", 1) else size - 1
    window = np.zeros(size)
    for k, a in enumerate(coefficients):
        window += (-1) ** k * a * np.cos(2 * np.pi * k * n / denominator)
    return ctx.constant(window.astype(ctx.dtype_attr("output_datatype", 1)))


converter("HannWindow")(single(lambda ctx: _window(ctx, (0.5, 0.5))))
converter("HammingWindow")(single(lambda ctx: _window(ctx, (25 / 46, 21 / 46))))
converter("BlackmanWindow")(single(lambda ctx: _window(ctx, (0.42, 0.5, 0.08))))


@converter("EyeLike")
@single
def _eye_like(ctx):
    x = ctx.inputs[0]
    rows, cols = _static(ctx)
    dtype = ctx.dtype_attr("dtype") if ctx.has_attr("dtype") else x.type.dtype
    return ctx.constant(np.eye(rows, cols, k=ctx.attr("k", 0), dtype=dtype))


# -- normalisations -------------------------------------------------------------------------


@converter("LpNormalization")
@single
def _lp_normalization(ctx):
    x = ctx.inputs[0]
    axis, p = ctx.attr("axis", -1) % x.type.rank, ctx.attr("p", 2)
    if p == 1:
        norm = ctx.emit("reduce_sum", ctx.emit("abs", x), axes=[axis], keepdims=1)
    elif p == 2:
        norm = ctx.emit("sqrt", ctx.emit("reduce_sum", ctx.emit("multiply", x, x), axes=[axis], keepdims=1))
    else:
        raise ctx.unsupported(f"p={p} (1 and 2 are defined)")
    zero = ctx.emit("equal", norm, ctx.constant(0, x.type.dtype))  # an all-zero slice stays zero (not 0 / 0)
    return ctx.emit("divide", x, ctx.emit("where", zero, ctx.constant(1, x.type.dtype), norm))


@converter("MeanVarianceNormalization")
@single
def _mean_variance_normalization(ctx):
    x = ctx.inputs[0]
    axes = [a % x.type.rank for a in ctx.attr("axes", [0, 2, 3])]
    mean = ctx.emit("reduce_mean", x, axes=axes, keepdims=1)
    deviation = ctx.emit("subtract", x, mean)
    variance = ctx.emit("reduce_mean", ctx.emit("multiply", deviation, deviation), axes=axes, keepdims=1)
    std = ctx.emit("sqrt", variance)
    return ctx.emit("divide", deviation, ctx.emit("add", std, ctx.constant(1e-9, x.type.dtype)))


@converter("GroupNormalization")
@single
def _group_normalization(ctx):
    """Statistics per group of channels (over the group's channels and positions), then scale and bias per channel.

    Opset 18 gave scale and bias one value per group; opset 21 one per channel.
    """
    x, scale, bias = ctx.inputs[:3]
    groups, epsilon = int(ctx.attr("num_groups")), float(ctx.attr("epsilon", 1e-5))
    shape = _static(ctx)
    channels = shape[1]
    grouped = ctx.emit("reshape", x, shape=[shape[0], groups, -1])
    mean = ctx.emit("reduce_mean", grouped, axes=[2], keepdims=1)
    deviation = ctx.emit("subtract", grouped, mean)
    variance = ctx.emit("reduce_mean", ctx.emit("multiply", deviation, deviation), axes=[2], keepdims=1)
    inv_std = ctx.emit("reciprocal", ctx.emit("sqrt", ctx.emit("add", variance, ctx.constant(epsilon, x.type.dtype))))
    y = ctx.emit("reshape", ctx.emit("multiply", deviation, inv_std), shape=list(shape))
    per_channel = [channels] + [1] * (len(shape) - 2)
    if scale.type.shape[0] != channels:  # opset 18: per group
        repeat = channels // groups
        scale, bias = (ctx.emit("reshape", ctx.emit("tile", ctx.emit("reshape", v, shape=[groups, 1]),
                       repeats=[1, repeat]), shape=[channels]) for v in (scale, bias))  # fmt: skip
    y = ctx.emit("multiply", y, ctx.emit("reshape", scale, shape=per_channel))
    return ctx.emit("add", y, ctx.emit("reshape", bias, shape=per_channel))


# -- one-hot and argmax-like ----------------------------------------------------------------


@converter("Hardmax")
@single
def _hardmax(ctx):
    """1 at the first maximum along axis, 0 elsewhere (opset 13; before, over the flattened trailing dims)."""
    x = ctx.inputs[0]
    rank = x.type.rank
    axis = ctx.attr("axis", -1 if ctx.opset >= 13 else 1) % rank
    shape = _static(ctx)
    flat = ctx.opset < 13
    if flat:
        x = ctx.emit("reshape", x, shape=[math.prod(shape[:axis]), math.prod(shape[axis:])])
        axis = 1
    index = ctx.emit("argmax", x, axis=axis, keepdims=1, select_last_index=0)
    positions = np.arange(x.type.shape[axis]).reshape([-1 if a == axis else 1 for a in range(x.type.rank)])
    hot = ctx.emit("equal", index, ctx.constant(positions, "int64"))
    y = ctx.emit("cast", hot, to=x.type.dtype)
    return ctx.emit("reshape", y, shape=list(shape)) if flat else y


@converter("OneHot")
@single
def _one_hot(ctx):
    indices, _, values = ctx.inputs[:3]
    depth = int(ctx.require_const(1, "depth").reshape(-1)[0])
    rank = indices.type.rank + 1
    axis = ctx.attr("axis", -1) % rank
    index = indices if indices.type.dtype == "int64" else ctx.emit("cast", indices, to="int64")
    index = ctx.emit("unsqueeze", index, axes=[axis])
    wrapped = ctx.emit(  # negative indices count from depth
        "where", ctx.emit("less", index, ctx.constant(0, "int64")), ctx.emit("add", index, ctx.constant(depth, "int64")),
        index,
    )  # fmt: skip
    positions = np.arange(depth).reshape([-1 if a == axis else 1 for a in range(rank)])
    hot = ctx.emit("equal", wrapped, ctx.constant(positions, "int64"))
    off = ctx.emit("slice", values, starts=[0], ends=[1], axes=[0], steps=[1])
    on = ctx.emit("slice", values, starts=[1], ends=[2], axes=[0], steps=[1])
    return ctx.emit("where", hot, on, off)


# -- data movement --------------------------------------------------------------------------


@converter("SpaceToDepth")
@single
def _space_to_depth(ctx):
    n, c, h, w = _static(ctx)
    b = int(ctx.attr("blocksize"))
    y = ctx.emit("reshape", ctx.inputs[0], shape=[n, c, h // b, b, w // b, b])
    crd = ctx.attr("mode", "DCR") == "CRD"  # the block offsets after the channel (CRD) or before it (DCR)
    y = ctx.emit("transpose", y, perm=[0, 1, 3, 5, 2, 4] if crd else [0, 3, 5, 1, 2, 4])
    return ctx.emit("reshape", y, shape=[n, c * b * b, h // b, w // b])


@converter("DepthToSpace")
@single
def _depth_to_space(ctx):
    n, c, h, w = _static(ctx)
    b = int(ctx.attr("blocksize"))
    if ctx.attr("mode", "DCR") == "DCR":
        y = ctx.emit("reshape", ctx.inputs[0], shape=[n, b, b, c // (b * b), h, w])
        y = ctx.emit("transpose", y, perm=[0, 3, 4, 1, 5, 2])
    else:
        y = ctx.emit("reshape", ctx.inputs[0], shape=[n, c // (b * b), b, b, h, w])
        y = ctx.emit("transpose", y, perm=[0, 1, 4, 2, 5, 3])
    return ctx.emit("reshape", y, shape=[n, c // (b * b), h * b, w * b])


@converter("CenterCropPad")
@single
def _center_crop_pad(ctx):
    """Crop (the larger part kept at the start's side, as the spec's floor) or zero-pad each axis to its size."""
    x = ctx.inputs[0]
    shape = _static(ctx)
    sizes = ctx.ints(1, "shape")
    axes = [a % len(shape) for a in ctx.attr("axes", list(range(len(shape))))]
    for axis, size in zip(axes, sizes):
        have = shape[axis]
        if size < have:
            start = (have - size) // 2
            x = ctx.emit("slice", x, starts=[start], ends=[start + size], axes=[axis], steps=[1])
        elif size > have:
            before = (size - have) // 2
            pads = [0] * (2 * len(shape))
            pads[axis], pads[axis + len(shape)] = before, size - have - before
            x = ctx.emit("pad", x, pads=pads, mode="constant", value=0.0)
    return x


# -- pooling --------------------------------------------------------------------------------


@converter("LpPool")
@single
def _lp_pool(ctx):
    """(sum over the window of |x|^p)^(1/p): a sum pool (an average counting the padding, times the window) of |x|^p."""
    x = ctx.inputs[0]
    nd = x.type.rank - 2
    p = float(ctx.attr("p", 2))
    kernel_shape = list(ctx.attr("kernel_shape"))
    attrs = _spatial_attrs(ctx, nd, kernel_shape, _static(ctx)[2:])
    dtype = x.type.dtype
    powered = ctx.emit("power", ctx.emit("abs", x), ctx.constant(p, dtype))
    pooled = ctx.emit(_rank_op(ctx, "avg_pool", nd), powered, kernel_shape=kernel_shape,
                      ceil_mode=ctx.attr("ceil_mode", 0), count_include_pad=1, **attrs)  # fmt: skip
    summed = ctx.emit("multiply", pooled, ctx.constant(float(math.prod(kernel_shape)), dtype))
    return ctx.emit("power", summed, ctx.constant(1.0 / p, dtype))


@converter("AffineGrid")
@single
def _affine_grid(ctx):
    """The sampling grid of a batch of 2-d affine transforms: base coordinates (x, y, 1) times theta's rows."""
    theta = ctx.inputs[0]
    size = ctx.ints(1, "size")
    if len(size) != 4:
        raise ctx.unsupported(f"a {len(size) - 2}-d grid (2-d is supported)")
    n, _, h, w = size
    align = ctx.attr("align_corners", 0)

    def linspace(steps: int) -> np.ndarray:
        if steps <= 1:
            return np.zeros(max(steps, 0))
        line = np.linspace(-1.0, 1.0, steps)
        return line if align else line * (steps - 1) / steps

    ys, xs = np.meshgrid(linspace(h), linspace(w), indexing="ij")
    base = np.stack([xs, ys, np.ones_like(xs)], axis=-1).reshape(1, h * w, 3).astype(theta.type.dtype)
    grid = ctx.emit("matmul", ctx.constant(base), ctx.emit("transpose", theta, perm=[0, 2, 1]))
    return ctx.emit("reshape", grid, shape=[n, h, w, 2])
