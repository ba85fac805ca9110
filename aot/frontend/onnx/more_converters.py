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
    """The sampling grid of a batch of affine transforms: base coordinates (x, y[, z], 1) times theta's rows."""
    theta = ctx.inputs[0]
    size = ctx.ints(1, "size")
    if len(size) not in (4, 5):
        raise ctx.unsupported(f"a {len(size) - 2}-d grid (2-d and 3-d are supported)")
    n, spatial = size[0], size[2:]
    align = ctx.attr("align_corners", 0)

    def linspace(steps: int) -> np.ndarray:
        if steps <= 1:
            return np.zeros(max(steps, 0))
        line = np.linspace(-1.0, 1.0, steps)
        return line if align else line * (steps - 1) / steps

    axes = np.meshgrid(*[linspace(d) for d in spatial], indexing="ij")  # (z,) y, x
    base = np.stack([*axes[::-1], np.ones_like(axes[0])], axis=-1).reshape(1, -1, len(spatial) + 1)
    grid = ctx.emit("matmul", ctx.constant(base.astype(theta.type.dtype)), ctx.emit("transpose", theta, perm=[0, 2, 1]))
    return ctx.emit("reshape", grid, shape=[n, *spatial, len(spatial)])


@converter("ReverseSequence")
@single
def _reverse_sequence(ctx):
    """Each batch entry's first sequence_lens[b] steps reversed, the rest kept: a gather of constant positions."""
    x = ctx.inputs[0]
    shape = _static(ctx)
    lengths = [int(v) for v in ctx.require_const(1, "sequence_lens").reshape(-1)]
    time_axis, batch_axis = ctx.attr("time_axis", 0), ctx.attr("batch_axis", 1)
    steps = shape[time_axis]
    index = np.zeros((steps, len(lengths)), dtype=np.int64)
    for b, length in enumerate(lengths):
        index[:, b] = [length - 1 - t if t < length else t for t in range(steps)]
    if time_axis > batch_axis:
        index = index.T
    index = index.reshape(index.shape + (1,) * (len(shape) - 2))
    return ctx.emit("gather_elements", x, ctx.constant(np.broadcast_to(index, shape).copy()), axis=time_axis)


# -- recurrent layers, unrolled over a sequence length known at build time ----------------

_ACTIVATIONS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Relu": "relu"}
_DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


class _Recurrence:
    """What RNN, GRU and LSTM share: weights per direction, the gates' activations, the time steps."""

    def __init__(self, ctx: NodeContext):
        self.ctx = ctx
        kind = ctx.node.op_type
        self.kind = kind
        x = ctx.inputs[0]
        if ctx.attr("layout", 0):
            x = ctx.emit("transpose", x, perm=[1, 0, 2])
        self.x = x
        self.steps = x.type.shape[0]
        self.hidden = int(ctx.attr("hidden_size"))
        self.dtype = x.type.dtype
        names = list(ctx.attr("activations", [])) or _DEFAULT_ACTIVATIONS[kind] * 2
        if ctx.has_attr("activation_alpha") or ctx.has_attr("activation_beta") or ctx.attr("input_forget", 0):
            raise ctx.unsupported("activation_alpha/beta or input_forget")
        if any(n not in _ACTIVATIONS for n in names):
            raise ctx.unsupported(f"activations {names} (Sigmoid, Tanh and Relu are supported)")
        self.activations = [_ACTIVATIONS[n] for n in names]
        self.clip = ctx.attr("clip")
        lengths = ctx.input(4)
        if lengths is not None:
            values = ctx.require_const(4, "sequence_lens")
            if not isinstance(self.steps, int):
                raise ctx.unsupported("sequence_lens with a sequence length known only at run time")
            if not (values == self.steps).all():
                raise ctx.unsupported("sequences shorter than the input (sequence_lens below its length)")
        direction = ctx.attr("direction", "forward")
        self.directions = ["forward", "reverse"] if direction == "bidirectional" else [direction]

    def weights(self, index: int, d: int) -> Value | None:
        v = self.ctx.input(index)
        if v is None:
            return None
        return self.ctx.emit(
            "squeeze", self.ctx.emit("slice", v, starts=[d], ends=[d + 1], axes=[0], steps=[1]), axes=[0]
        )

    def part(self, v: Value, k: int, axis: int = -1) -> Value:
        """The k-th gate's block of hidden_size along axis."""
        h = self.hidden
        axis = axis % v.type.rank
        return self.ctx.emit("slice", v, starts=[k * h], ends=[(k + 1) * h], axes=[axis], steps=[1])

    def act(self, value: Value, which: int, d: int, clipped: bool = True) -> Value:
        if self.clip is not None and clipped:  # the gates' inputs, never the LSTM cell state (as onnxruntime)
            value = self.ctx.emit("clip", value, min=-float(self.clip), max=float(self.clip))
        per_direction = len(self.activations) // len(self.directions) if len(self.directions) > 1 else None
        names = self.activations[d * per_direction :] if per_direction else self.activations
        return self.ctx.emit(names[which], value)

    def initial(self, index: int, d: int, like: Value) -> Value:
        state = self.weights(index, d)
        if state is not None:
            return state
        batch_zeros = self.ctx.emit("multiply", self.ctx.emit("slice", like, starts=[0], ends=[self.hidden],
                                    axes=[1], steps=[1]), self.ctx.constant(0, self.dtype))  # fmt: skip
        return batch_zeros


def _step_order(rec: _Recurrence, direction: str) -> list[int]:
    return list(range(rec.steps))[:: -1 if direction == "reverse" else 1]


def _time_loop(ctx: NodeContext, rec: _Recurrence) -> list[Value]:
    """A sequence length known only at run time: one ``recurrent`` op, whose kernel runs the time loop."""
    gates, dirs = _GATES[rec.kind], len(rec.directions)
    inputs = [rec.x, ctx.inputs[1], ctx.inputs[2]]
    bias = ctx.input(3)
    inputs.append(bias if bias is not None else ctx.constant(np.zeros((dirs, 2 * gates * rec.hidden), rec.dtype)))
    flags = {}
    for index, flag in ((5, "initial_h"), (6, "initial_c"), (7, "peepholes")):
        given = ctx.input(index) if rec.kind == "LSTM" or index == 5 else None
        flags[flag] = int(given is not None)
        if given is not None:
            inputs.append(given)
    per_direction = len(_DEFAULT_ACTIVATIONS[rec.kind])
    names = rec.activations  # as many as the directions need; the defaults come doubled
    activations = names[: per_direction * dirs] if len(names) >= per_direction * dirs else names * dirs
    results = ctx.emit_node("recurrent", inputs, kind=rec.kind.lower(), hidden_size=rec.hidden,
                            direction=ctx.attr("direction", "forward"), activations=activations,
                            clip=None if rec.clip is None else float(rec.clip),
                            linear_before_reset=int(ctx.attr("linear_before_reset", 0)), **flags)  # fmt: skip
    if ctx.attr("layout", 0):
        results = [ctx.emit("transpose", results[0], perm=[2, 0, 1, 3])] + [
            ctx.emit("transpose", v, perm=[1, 0, 2]) for v in results[1:]
        ]
    return results[: len(ctx.node.output)]


def _recurrent(ctx: NodeContext) -> list[Value]:
    rec = _Recurrence(ctx)
    if not isinstance(rec.steps, int):
        return _time_loop(ctx, rec)
    gates = _GATES[rec.kind]
    ys, hs, cs = [], [], []
    for d, direction in enumerate(rec.directions):
        w, r, b = rec.weights(1, d), rec.weights(2, d), rec.weights(3, d)
        projected = ctx.emit("matmul", rec.x, ctx.emit("transpose", w, perm=[1, 0]))  # [seq, batch, G*h]
        r_t = ctx.emit("transpose", r, perm=[1, 0])
        wb = rb = None
        if b is not None:
            wb, rb = (ctx.emit("slice", b, starts=[k * gates * rec.hidden], ends=[(k + 1) * gates * rec.hidden],
                      axes=[0], steps=[1]) for k in (0, 1))  # fmt: skip
            projected = ctx.emit("add", projected, wb)
        first = ctx.emit("squeeze", ctx.emit("slice", projected, starts=[0], ends=[1], axes=[0], steps=[1]), axes=[0])
        h = rec.initial(5, d, first)
        c = rec.initial(6, d, first) if rec.kind == "LSTM" else None
        peep = rec.weights(7, d) if rec.kind == "LSTM" else None
        outputs: dict[int, Value] = {}
        for t in _step_order(rec, direction):
            xt = ctx.emit("squeeze", ctx.emit("slice", projected, starts=[t], ends=[t + 1], axes=[0], steps=[1]),
                          axes=[0])  # fmt: skip
            hr = ctx.emit("matmul", h, r_t)
            if rb is not None:
                hr = ctx.emit("add", hr, rb)
            if rec.kind == "RNN":
                h = rec.act(ctx.emit("add", xt, hr), 0, d)
            elif rec.kind == "GRU":
                z = rec.act(ctx.emit("add", rec.part(xt, 0), rec.part(hr, 0)), 0, d)
                reset = rec.act(ctx.emit("add", rec.part(xt, 1), rec.part(hr, 1)), 0, d)
                if ctx.attr("linear_before_reset", 0):
                    candidate = ctx.emit("add", rec.part(xt, 2), ctx.emit("multiply", reset, rec.part(hr, 2)))
                else:
                    recurrent = ctx.emit("matmul", ctx.emit("multiply", reset, h), rec.part(r_t, 2))
                    if rb is not None:
                        recurrent = ctx.emit("add", recurrent, rec.part(rb, 2))
                    candidate = ctx.emit("add", rec.part(xt, 2), recurrent)
                candidate = rec.act(candidate, 1, d)
                keep = ctx.emit("multiply", z, h)
                h = ctx.emit("add", ctx.emit("subtract", candidate, ctx.emit("multiply", z, candidate)), keep)
            else:
                total = ctx.emit("add", xt, hr)
                i_pre, o_pre, f_pre, c_pre = (rec.part(total, k) for k in range(4))
                if peep is not None:
                    i_pre = ctx.emit("add", i_pre, ctx.emit("multiply", rec.part(peep, 0), c))
                    f_pre = ctx.emit("add", f_pre, ctx.emit("multiply", rec.part(peep, 2), c))
                i, f = rec.act(i_pre, 0, d), rec.act(f_pre, 0, d)
                c = ctx.emit("add", ctx.emit("multiply", f, c), ctx.emit("multiply", i, rec.act(c_pre, 1, d)))
                if peep is not None:
                    o_pre = ctx.emit("add", o_pre, ctx.emit("multiply", rec.part(peep, 1), c))
                h = ctx.emit("multiply", rec.act(o_pre, 0, d), rec.act(c, 2, d, clipped=False))
            outputs[t] = h
        ys.append(ctx.emit("concat", *[ctx.emit("unsqueeze", outputs[t], axes=[0, 1]) for t in range(rec.steps)],
                           axis=0))  # fmt: skip
        hs.append(ctx.emit("unsqueeze", h, axes=[0]))
        if c is not None:
            cs.append(ctx.emit("unsqueeze", c, axes=[0]))
    y = ys[0] if len(ys) == 1 else ctx.emit("concat", *ys, axis=1)  # [seq, dirs, batch, hidden]
    y_h = hs[0] if len(hs) == 1 else ctx.emit("concat", *hs, axis=0)  # [dirs, batch, hidden]
    results = [y, y_h]
    if cs:
        results.append(cs[0] if len(cs) == 1 else ctx.emit("concat", *cs, axis=0))
    if ctx.attr("layout", 0):
        results = [ctx.emit("transpose", results[0], perm=[2, 0, 1, 3])] + [
            ctx.emit("transpose", v, perm=[1, 0, 2]) for v in results[1:]
        ]
    return results[: len(ctx.node.output)]


converter("RNN", "GRU", "LSTM")(_recurrent)


# -- integer and quantized linear algebra ---------------------------------------------------


def _centered(ctx: NodeContext, x: Value, zero_point: Value | None) -> Value:
    """x - zero_point in int32, as the integer ops define it."""
    x = ctx.emit("cast", x, to="int32")
    if zero_point is None:
        return x
    return ctx.emit("subtract", x, ctx.emit("cast", zero_point, to="int32"))


@converter("MatMulInteger")
@single
def _matmul_integer(ctx):
    a, b = ctx.inputs[:2]
    return ctx.emit("matmul", _centered(ctx, a, ctx.input(2)), _centered(ctx, b, ctx.input(3)))


def _integer_conv(ctx: NodeContext, x: Value, x_zero: Value | None, w: Value, w_zero: Value | None) -> Value:
    """(x - x_zero) conv (w - w_zero) in int32, exact: ConvInteger's and QLinearConv's product.

    numpy has no integer convolution, so it runs on a float convolution that holds every partial sum
    exactly: float32 where constant weights bound the sums below 2**24 (a depthwise or a small 1x1
    layer, so the common case keeps float32's speed and weight size), else float64 (below 2**53).
    """
    nd = w.type.rank - 2
    kernel_shape = ctx.attr("kernel_shape", list(w.type.shape[2:]))
    attrs = _spatial_attrs(ctx, nd, kernel_shape)
    if w_zero is not None and w_zero.type.rank == 1:  # one zero point per output channel
        w_zero = ctx.emit("reshape", w_zero, shape=[-1] + [1] * (nd + 1))
    wc = _centered(ctx, w, w_zero)
    x_info = np.iinfo(x.type.dtype)
    x_span = x_info.max - x_info.min  # |x - x_zero| never exceeds it
    if wc.is_constant and wc.data.ndim == nd + 2 and wc.data.size:
        per_output = np.abs(wc.data.astype(np.int64)).reshape(wc.data.shape[0], -1).sum(axis=1)
        bound = int(per_output.max()) * x_span
    else:
        w_info = np.iinfo(w.type.dtype)
        bound = (w_info.max - w_info.min) * x_span * max(math.prod(d if isinstance(d, int) else 1 << 20
                                                                  for d in w.type.shape[1:]), 1)  # fmt: skip
    if bound >= 2**53:
        raise ctx.unsupported(f"integer sums up to {bound} (float64 holds up to 2**53 exactly)")
    dtype = "float32" if bound < 2**24 else "float64"
    xc = ctx.emit("cast", _centered(ctx, x, x_zero), to=dtype)
    y = ctx.emit(_rank_op(ctx, "conv", nd), xc, ctx.emit("cast", wc, to=dtype), groups=ctx.attr("group", 1), **attrs)
    return ctx.emit("cast", y, to="int32")


def _requantized(ctx: NodeContext, acc: Value, scale: Value, y_zero: Value | None, dtype: str) -> Value:
    """acc * scale + y_zero, rounded half to even and saturated to ``dtype``, in float64: how onnx's
    reference ends QLinearConv and QLinearMatMul (an int32 array times the scales' product)."""
    y = ctx.emit("multiply", ctx.emit("cast", acc, to="float64"), ctx.emit("cast", scale, to="float64"))
    if y_zero is not None:
        y = ctx.emit("add", y, ctx.emit("cast", y_zero, to="float64"))
    info = np.iinfo(dtype)
    y = ctx.emit("clip", ctx.emit("round", y), min=float(info.min), max=float(info.max))
    return ctx.emit("cast", y, to=dtype)


@converter("ConvInteger")
@single
def _conv_integer(ctx):
    """An exact integer convolution (``_integer_conv``), int32 out."""
    x, w = ctx.inputs[:2]
    return _integer_conv(ctx, x, ctx.input(2), w, ctx.input(3))


def _single(v: Value | None) -> bool:
    """A scale or zero point that holds one value (per tensor)."""
    return v is None or not v.type.rank or math.prod(d if isinstance(d, int) else 2 for d in v.type.shape) == 1


def dequantized(ctx: NodeContext, x: Value, scale: Value, zero: Value | None, axis: int) -> Value:
    """``dequantize(x, scale, zero)``, per ``axis`` where the scale or zero point has one value per channel."""
    return ctx.emit("dequantize", *[v for v in (x, scale, zero) if v is not None], axis=axis % max(x.type.rank, 1))


def dequantized_bias(ctx: NodeContext, bias: Value, scale: Value) -> Value:
    """The int32 bias of a quantized conv or matrix product as ``dequantize(bias, x_scale * w_scale)``: the form
    onnxruntime's QDQ fusions take back into the integer kernel's bias (a float bias keeps the op float)."""
    bias = ctx.emit("cast", bias, to="int32") if bias.type.dtype != "int32" else bias
    zero = ctx.constant(np.zeros([d if isinstance(d, int) else 1 for d in scale.type.shape], np.int32))
    return ctx.emit("dequantize", bias, scale, zero, axis=0)


def requantized(ctx: NodeContext, y: Value, scale: Value, zero: Value | None, dtype: str) -> Value:
    """``quantize(y, scale, zero)`` to ``dtype``: round half to even, saturate (per tensor)."""
    if not (_single(scale) and _single(zero)):
        raise ctx.unsupported(f"a per-channel output scale or zero point {scale.type} (one per tensor is)")
    return ctx.emit("quantize", *[v for v in (y, scale, zero) if v is not None], axis=0, dtype=dtype)


@converter("QLinearConv")
@single
def _qlinear_conv(ctx):
    """onnxruntime's QOperator convolution (the model zoo's *-int8 models), as the QDQ form of the same
    function: ``quantize(conv(dequantize(x), dequantize(w), dequantize(bias)))``. The weight and the int32 bias
    stay integer constants (the bundle stores them so), onnxruntime regions fuse the chain back into its
    QLinearConv, and the host computes it in float32: the sums in float instead of int32, so a result near a
    rounding boundary can land one step away from the integer kernel's (tests/test_qoperator.py)."""
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero = (ctx.input(i) for i in range(8))
    bias = ctx.input(8)
    nd = w.type.rank - 2
    kernel_shape = ctx.attr("kernel_shape", list(w.type.shape[2:]))
    attrs = _spatial_attrs(ctx, nd, kernel_shape)
    inputs = [dequantized(ctx, x, x_scale, x_zero, 1), dequantized(ctx, w, w_scale, w_zero, 0)]
    if bias is not None:
        inputs.append(dequantized_bias(ctx, bias, ctx.emit("multiply", x_scale, w_scale)))
    y = ctx.emit(_rank_op(ctx, "conv", nd), *inputs, groups=ctx.attr("group", 1), **attrs)
    dtype = y_zero.type.dtype if y_zero is not None else x.type.dtype
    return requantized(ctx, y, y_scale, y_zero, dtype)


@converter("QLinearMatMul")
@single
def _qlinear_matmul(ctx):
    """``quantize(matmul(dequantize(a), dequantize(b)))``: onnx's definition with the product in float32 (b per
    column where its scale is), the QDQ form onnxruntime fuses into QLinearMatMul; a per-row scale of a
    takes the exact integer product instead."""
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = ctx.inputs[:8]
    dtype = y_zero.type.dtype if y_zero is not None else a.type.dtype
    if _single(a_scale) and _single(a_zero) and b.type.rank >= 2:
        a_f = dequantized(ctx, a, a_scale, a_zero, 1)
        y = ctx.emit("matmul", a_f, dequantized(ctx, b, b_scale, b_zero, b.type.rank - 1))
        return requantized(ctx, y, y_scale, y_zero, dtype)
    product = ctx.emit("matmul", _centered(ctx, a, a_zero), _centered(ctx, b, b_zero))
    scale = ctx.emit("divide", ctx.emit("multiply", a_scale, b_scale), y_scale)
    return _requantized(ctx, product, scale, y_zero, dtype)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(ctx):
    """uint8 quantisation with the scale and zero point that map [min(0, x), max(0, x)] onto [0, 255]."""
    x = ctx.inputs[0]
    dtype = x.type.dtype
    high = ctx.emit("maximum", ctx.emit("reduce_max", x, axes=None, keepdims=0), ctx.constant(0, dtype))
    low = ctx.emit("minimum", ctx.emit("reduce_min", x, axes=None, keepdims=0), ctx.constant(0, dtype))
    span = ctx.emit("subtract", high, low)
    span = ctx.emit("where", ctx.emit("equal", span, ctx.constant(0, dtype)), ctx.constant(1, dtype), span)
    scale = ctx.emit("divide", span, ctx.constant(255, dtype))
    zero = ctx.emit("round", ctx.emit("clip", ctx.emit("negative", ctx.emit("divide", low, scale)), min=0.0, max=255.0))
    y = ctx.emit("add", ctx.emit("round", ctx.emit("divide", x, scale)), zero)
    y = ctx.emit("cast", ctx.emit("clip", y, min=0.0, max=255.0), to="uint8")
    return [y, scale, ctx.emit("cast", zero, to="uint8")]


# -- detection ------------------------------------------------------------------------------


@converter("RoiAlign")
@single
def _roi_align(ctx):
    """torchvision's detection heads (MultiScaleRoIAlign): one ``roi_align`` kernel, since each ROI's
    sampling grid depends on its box. Opset 10 had no coordinate_transformation_mode and sampled as
    output_half_pixel does (torchvision's aligned=False); from 16 the default is half_pixel (aligned=True)."""
    x, rois, indices = ctx.inputs[:3]
    if x.type.rank != 4:
        raise ctx.unsupported(f"a rank-{x.type.rank} input (4-d feature maps are supported)")
    mode = ctx.attr("mode", "avg")
    if mode not in ("avg", "max"):
        raise ctx.unsupported(f"mode {mode!r} (avg and max are supported)")
    coord = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
    if coord not in ("half_pixel", "output_half_pixel"):
        raise ctx.unsupported(f"coordinate_transformation_mode {coord!r}")
    if x.type.dtype not in ("float16", "float32", "float64"):
        raise ctx.unsupported(f"a {x.type.dtype} input (floats are supported)")
    rois = ctx.emit("cast", rois, to=x.type.dtype) if rois.type.dtype != x.type.dtype else rois
    indices = ctx.emit("cast", indices, to="int64") if indices.type.dtype != "int64" else indices
    return ctx.emit(
        "roi_align", x, rois, indices, mode=mode,
        output_height=int(ctx.attr("output_height", 1)), output_width=int(ctx.attr("output_width", 1)),
        sampling_ratio=int(ctx.attr("sampling_ratio", 0)), spatial_scale=float(ctx.attr("spatial_scale", 1.0)),
        coordinate_transformation_mode=coord,
    )  # fmt: skip


# -- spectra: DFT, STFT, MelWeightMatrix as products with constant matrices -------------------


def _last(ctx: NodeContext, x: Value, index: int) -> Value:
    """x[..., index] (the real or imaginary part of a [..., 2] complex tensor)."""
    part = ctx.emit("slice", x, starts=[index], ends=[index + 1], axes=[x.type.rank - 1], steps=[1])
    return ctx.emit("squeeze", part, axes=[x.type.rank - 1])


def _complex_last(ctx: NodeContext, re: Value, im: Value | None) -> Value:
    """[..., 2] from real and imaginary parts, or [..., 1] from a real result."""
    parts = [ctx.emit("unsqueeze", v, axes=[v.type.rank]) for v in (re, im) if v is not None]
    return parts[0] if len(parts) == 1 else ctx.emit("concat", *parts, axis=re.type.rank)


def _spectrum(ctx: NodeContext, re: Value, im: Value | None, n: int, inverse: bool, onesided: bool) -> tuple:
    """The DFT of length ``n`` over the last axis of (re, im) as matrix products: numpy.fft's fft (forward),
    ifft (inverse) or, inverse and onesided, irfft (a one-sided spectrum to a real signal: im of the result None).
    Samples past ``n`` are dropped and missing ones are zeros, so the input axis keeps its length."""
    length = re.type.shape[-1]
    t = np.arange(length)[:, None]
    if inverse and onesided:
        k = np.arange(length)[:, None]
        used = k[:, 0] < n // 2 + 1
        weight = np.where((k[:, 0] == 0) | (2 * k[:, 0] == n), 1.0, 2.0) * used / n
        angle = 2 * np.pi * ((k * np.arange(n)[None, :]) % n) / n
        cos, sin = np.cos(angle) * weight[:, None], np.sin(angle) * weight[:, None]
        real = ctx.emit("matmul", re, ctx.constant(cos.astype(re.type.dtype)))
        if im is not None:
            real = ctx.emit("subtract", real, ctx.emit("matmul", im, ctx.constant(sin.astype(re.type.dtype))))
        return real, None
    bins = n // 2 + 1 if onesided and not inverse else n
    angle = 2 * np.pi * ((t * np.arange(bins)[None, :]) % n) / n
    inside = (t < n) / (n if inverse else 1)
    cos = ctx.constant((np.cos(angle) * inside).astype(re.type.dtype))
    sin = ctx.constant(((1 if inverse else -1) * np.sin(angle) * inside).astype(re.type.dtype))
    y_re, y_im = ctx.emit("matmul", re, cos), ctx.emit("matmul", re, sin)
    if im is not None:  # (re + i im)(cos + i sin) = re cos - im sin + i (re sin + im cos)
        y_re = ctx.emit("subtract", y_re, ctx.emit("matmul", im, sin))
        y_im = ctx.emit("add", y_im, ctx.emit("matmul", im, cos))
    return y_re, y_im


def _scalar_const(ctx: NodeContext, i: int, what: str) -> int | None:
    return int(ctx.require_const(i, what).reshape(-1)[0]) if ctx.input(i) is not None else None


@converter("DFT")
@single
def _dft(ctx):
    """ONNX DFT (opset 17: axis an attribute; 20: an input), forward, inverse and one-sided, as numpy.fft
    computes it: the signal axis moved last, products with constant cos / sin matrices, moved back. The
    signal's length must be known when the model is built (the matrices are constants)."""
    x = ctx.inputs[0]
    rank = x.type.rank
    axis = _scalar_const(ctx, 2, "axis") if ctx.opset >= 20 else ctx.attr("axis", 1)
    axis = (-2 if axis is None else axis) % rank
    parts, length = x.type.shape[-1], x.type.shape[axis]
    if parts not in (1, 2) or axis == rank - 1:
        raise ctx.unsupported(f"axis {axis} of {x.type} (the last axis holds 1 or 2 parts, real and imaginary)")
    if not isinstance(length, int):
        raise ctx.unsupported(f"a signal axis of length {length!r} known only at run time")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    n = _scalar_const(ctx, 1, "dft_length")
    n = n if n is not None else (2 * (length - 1) if inverse and onesided else length)
    if n < 1:
        raise ctx.error(f"dft_length {n}")
    order = [d for d in range(rank - 1) if d != axis] + [axis]
    wide = _wide(ctx, x)
    re = ctx.emit("transpose", _last(ctx, wide, 0), perm=order)
    im = ctx.emit("transpose", _last(ctx, wide, 1), perm=order) if parts == 2 else None
    y = _complex_last(ctx, *_spectrum(ctx, re, im, n, inverse, onesided))
    back = [order.index(d) for d in range(rank - 1)] + [rank - 1]
    return _narrow(ctx, ctx.emit("transpose", y, perm=back), x.type.dtype)


def _wide(ctx: NodeContext, x: Value) -> Value:
    """x in float64: the reference's numpy.fft sums in float64, and a spectrum's near-zero parts (the imaginary
    part of a real signal's inverse) are rounding residue that float32 sums would not reproduce."""
    if x.type.dtype not in ("float16", "float32", "float64"):
        raise ctx.unsupported(f"a {x.type.dtype} signal (floats are supported)")
    return x if x.type.dtype == "float64" else ctx.emit("cast", x, to="float64")


def _narrow(ctx: NodeContext, y: Value, dtype: str) -> Value:
    return y if dtype == "float64" else ctx.emit("cast", y, to=dtype)


@converter("STFT")
@single
def _stft(ctx):
    """Frames (a gather of constant indices), times the window, then the DFT of each frame over frame_length
    samples (one-sided by default): onnx's definition, [batch, frames, bins, 2]."""
    x, window = ctx.inputs[0], ctx.input(2)
    step = _scalar_const(ctx, 1, "frame_step")
    length = _scalar_const(ctx, 3, "frame_length")
    if length is None:
        length = window.type.shape[0] if window is not None else x.type.shape[1]
    if window is not None and window.type.shape[0] != length:
        raise ctx.unsupported(f"a window of {window.type.shape[0]} samples for frames of {length!r}")
    signal = x.type.shape[1]
    if not (isinstance(signal, int) and isinstance(length, int)) or x.type.rank != 3 or x.type.shape[2] not in (1, 2):
        raise ctx.unsupported(f"signal {x.type}: [batch, samples, 1 or 2] with the samples known when built")
    if step is None or step < 1 or not 0 < length <= signal:
        raise ctx.error(f"frame_step {step} and frame_length {length} over {signal} samples")
    frames = 1 + (signal - length) // step
    index = ctx.constant(np.arange(frames)[:, None] * step + np.arange(length)[None, :])
    framed = ctx.emit("gather", x, index, axis=1)  # [batch, frames, length, parts]
    if window is not None:
        framed = ctx.emit("multiply", framed, ctx.emit("reshape", window, shape=[length, 1]))
    framed = _wide(ctx, framed)
    re = _last(ctx, framed, 0)
    im = _last(ctx, framed, 1) if x.type.shape[2] == 2 else None
    y = _complex_last(ctx, *_spectrum(ctx, re, im, length, False, bool(ctx.attr("onesided", 1))))
    return _narrow(ctx, y, x.type.dtype)


@converter("MelWeightMatrix")
@single
def _mel_weight_matrix(ctx):
    """A constant [dft_length // 2 + 1, num_mel_bins] of triangular filters, computed as onnx's reference
    does (mel = 2595 log10(1 + hz / 700), bin edges floored to DFT bins)."""
    mels, n = (int(ctx.require_const(i, what).reshape(-1)[0]) for i, what in ((0, "num_mel_bins"), (1, "dft_length")))
    rate = ctx.require_const(2, "sample_rate").reshape(-1)[0]
    low, high = (
        ctx.require_const(i, what).reshape(-1)[0] for i, what in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz"))
    )
    if mels < 1 or n < 1 or rate <= 0:
        raise ctx.error(f"num_mel_bins {mels}, dft_length {n}, sample_rate {rate}")
    low_mel, high_mel = (2595 * np.log1p(f / 700) / np.log(10) for f in (low, high))
    edges = np.arange(mels + 2) * ((high_mel - low_mel) / (mels + 2)) + low_mel
    edges = (((n + 1) * (700 * np.expm1(edges / 2595 * np.log(10)))) // rate).astype(int)
    out = np.zeros((n // 2 + 1, mels))
    for i in range(mels):
        left, center, right = edges[i : i + 3]
        if center == left:
            out[center, i] = 1
        else:
            out[left : center + 1, i] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / (right - center)
    return ctx.constant(out.astype(ctx.dtype_attr("output_datatype", 1)))
