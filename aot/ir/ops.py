"""The canonical op registry: per op its inputs, attribute schema and type inference.

This is the compiler's half of an op; the runtime's half (the numpy kernel) lives
in ``runtime_lite.kernels`` under the same name, and a test keeps the two sets
equal. Attributes are completed with their defaults when a node is created, so a
bundle always records every attribute explicitly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aot.errors import ShapeError
from aot.ir.types import Dim, TensorType

REQUIRED = object()


@dataclass
class InferContext:
    types: list[TensorType]
    attrs: dict[str, Any]
    fresh_dim: Callable[[], str]
    node: str
    values: Sequence[Any] = ()

    def fail(self, op: str, message: str) -> ShapeError:
        return ShapeError(f"{op} '{self.node}': {message}")

    def derived_dim(self, key: tuple) -> str:
        """The symbol of a dim derived as ``key`` says: the same one each time (``Graph.fresh_dim``)."""
        try:
            return self.fresh_dim(key)
        except TypeError:  # a fresh_dim that takes no key: every derived dim is new
            return self.fresh_dim()


def window_dim(ctx: InferContext, size: Dim, offset: Any, stride: int, extent: Callable[[int], int]) -> Dim:
    """A sliding window's output size, ``extent(size)``; over a symbol it is the symbol itself where the
    window keeps the size (stride 1, ``offset`` = pads - span = -1), else the same derived symbol for the
    same (size, offset, stride), whichever op computes it."""
    if isinstance(size, int):
        return extent(size)
    if stride == 1 and offset == -1:
        return size
    return ctx.derived_dim(("window", size, offset, stride))


@dataclass(frozen=True)
class OpDef:
    name: str
    inputs: tuple[str, ...]  # names; "?" suffix = optional, "*" suffix = variadic
    attrs: dict[str, Any]  # name -> default (REQUIRED if none)
    infer_fn: Callable[[InferContext], list[TensorType]]

    def complete_attrs(self, attrs: dict[str, Any], node: str) -> dict[str, Any]:
        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown:
            raise ShapeError(f"{self.name} '{node}': unknown attribute {unknown[0]!r}")
        out = {}
        for key, default in self.attrs.items():
            if key in attrs:
                out[key] = attrs[key]
            elif default is REQUIRED:
                raise ShapeError(f"{self.name} '{node}': missing attribute {key!r}")
            else:
                out[key] = default
        return out

    def check_arity(self, n: int, node: str) -> None:
        required = sum(1 for i in self.inputs if not i.endswith(("?", "*")))
        variadic = any(i.endswith("*") for i in self.inputs)
        if n < required or (not variadic and n > len(self.inputs)):
            raise ShapeError(f"{self.name} '{node}': expects inputs ({', '.join(self.inputs)}), got {n}")

    def infer(self, ctx: InferContext) -> list[TensorType]:
        return self.infer_fn(ctx)


OPS: dict[str, OpDef] = {}


def register_op(name: str, inputs: str, infer: Callable[[InferContext], list[TensorType]], **attrs: Any) -> OpDef:
    opdef = OpDef(name, tuple(inputs.split()), attrs, infer)
    OPS[name] = opdef
    return opdef


def get_op(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise ShapeError(f"unknown canonical op {name!r}") from None


# -- helpers ----------------------------------------------------------------------------


def same(ctx: InferContext) -> list[TensorType]:
    return [ctx.types[0]]


def broadcast_dims(a: Dim, b: Dim, ctx: InferContext, op: str) -> Dim:
    if a == b or b == 1:
        return a
    if a == 1:
        return b
    if isinstance(a, int) and isinstance(b, int):
        raise ctx.fail(op, f"cannot broadcast dims {a} and {b}")
    return b if isinstance(b, int) else a  # a symbol broadcast with a size must be that size


def broadcast_shapes(shapes: Sequence[Sequence[Dim]], ctx: InferContext, op: str) -> tuple[Dim, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = [1] * rank
    for shape in shapes:
        padded = [1] * (rank - len(shape)) + list(shape)
        out = [broadcast_dims(a, b, ctx, op) for a, b in zip(out, padded)]
    return tuple(out)


def elementwise(dtype: str | None = None, operands: int | None = None):
    def infer(ctx: InferContext) -> list[TensorType]:
        types = ctx.types if operands is None else ctx.types[:operands]
        shape = broadcast_shapes([t.shape for t in types], ctx, "elementwise")
        return [TensorType(shape, dtype or ctx.types[0].dtype)]

    return infer


def norm_axis(axis: int, rank: int, ctx: InferContext, op: str) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.fail(op, f"axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


def dim_math(ctx: InferContext, fn: Callable[..., int], *dims: Dim) -> Dim:
    return fn(*dims) if all(isinstance(d, int) for d in dims) else ctx.fresh_dim()


# -- op categories ----------------------------------------------------------------------
# Named once here; passes and backends use these rather than spelling the ops again.

#: Unary elementwise ops without attributes: output type = input type.
UNARY_OPS = tuple(
    (
        "relu relu6 sigmoid tanh erf exp log sqrt reciprocal negative abs floor ceil round sign "
        "sin cos tan hard_swish softplus softsign copy"
    ).split()
)
#: Broadcasting binary arithmetic: output dtype = the operands'.
BINARY_OPS = tuple("add subtract multiply divide maximum minimum power prelu".split())
#: Broadcasting comparisons and logic: bool outputs.
COMPARISON_OPS = tuple("logical_and logical_or logical_xor equal less less_equal greater greater_equal".split())
BITWISE_OPS = ("bitwise_and", "bitwise_or", "bitwise_xor")
#: Reductions over ``axes`` (``None``: all of them), with ``keepdims``.
REDUCE_OPS = ("reduce_mean", "reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
ARG_REDUCE_OPS = ("argmax", "argmin")
SPATIAL_RANKS = (1, 2, 3)
CONV_OPS = tuple(f"conv{nd}d" for nd in SPATIAL_RANKS)
CONV_TRANSPOSE_OPS = tuple(f"conv_transpose{nd}d" for nd in SPATIAL_RANKS)
MAX_POOL_OPS = tuple(f"max_pool{nd}d" for nd in SPATIAL_RANKS)
AVG_POOL_OPS = tuple(f"avg_pool{nd}d" for nd in SPATIAL_RANKS)

# -- elementwise ------------------------------------------------------------------------

for _name in UNARY_OPS:
    register_op(_name, "x", same)
register_op("logical_not", "x", same)
register_op("leaky_relu", "x", same, alpha=0.01)
register_op("elu", "x", same, alpha=1.0)
register_op("hard_sigmoid", "x", same, alpha=0.2, beta=0.5)
register_op("gelu", "x", same, approximate="none")
register_op("clip", "x", same, min=None, max=None)
register_op("softmax", "x", same, axis=-1)
register_op("log_softmax", "x", same, axis=-1)
register_op("cast", "x", lambda c: [c.types[0].with_dtype(c.attrs["to"])], to=REQUIRED)

for _name in BINARY_OPS:
    register_op(_name, "a b", elementwise())
register_op("mod", "a b", elementwise(), fmod=0)
for _name in COMPARISON_OPS:
    register_op(_name, "a b", elementwise("bool"))


def _where(ctx: InferContext) -> list[TensorType]:
    shape = broadcast_shapes([t.shape for t in ctx.types], ctx, "where")
    return [TensorType(shape, ctx.types[1].dtype)]


register_op("where", "condition x y", _where)
register_op("isnan", "x", lambda c: [c.types[0].with_dtype("bool")])
register_op("isinf", "x", lambda c: [c.types[0].with_dtype("bool")], detect_positive=1, detect_negative=1)
for _name in BITWISE_OPS:
    register_op(_name, "a b", elementwise())
register_op("bitwise_not", "x", same)

#: Inverse and hyperbolic trigonometry, log/exp variants and truncation (runtime_lite/kernels/transcendental.py):
#: host-only, outside UNARY_OPS so no backend pattern assumes it takes them.
TRANSCENDENTAL_OPS = tuple("acos acosh asin asinh atan atanh sinh cosh log1p expm1 log2 log10 trunc".split())
for _name in TRANSCENDENTAL_OPS:
    register_op(_name, "x", same)
register_op("atan2", "a b", elementwise())
register_op("bit_shift", "a b", elementwise(), direction=REQUIRED)


def _trilu(ctx: InferContext) -> list[TensorType]:
    if ctx.types[0].rank < 2:
        raise ctx.fail("trilu", f"needs a rank >= 2 input, got {ctx.types[0]}")
    return [ctx.types[0]]


register_op("trilu", "x", _trilu, upper=1, k=0)

# -- convolution and pooling ------------------------------------------------------------


def _spatial_check(ctx: InferContext, op: str, nd: int) -> TensorType:
    x = ctx.types[0]
    if x.rank != nd + 2:
        raise ctx.fail(op, f"expects a rank-{nd + 2} input (N, C, spatial...), got {x}")
    for key in ("strides", "pads", "dilations", "kernel_shape", "output_padding"):
        if key in ctx.attrs and ctx.attrs[key] is not None:
            want = 2 * nd if key == "pads" else nd
            if len(ctx.attrs[key]) != want:
                raise ctx.fail(op, f"attribute {key} needs {want} values, got {list(ctx.attrs[key])}")
    return x


def _spatial_dims(ctx: InferContext, x: TensorType, w: TensorType, nd: int, extent) -> list[Dim]:
    """Output size per spatial axis, ``extent(axis, input size, kernel size)``, symbolic if either is."""
    return [dim_math(ctx, lambda s, k, i=i: extent(i, s, k), x.shape[2 + i], w.shape[2 + i]) for i in range(nd)]


def _conv_dims(ctx: InferContext, x: TensorType, w: TensorType, nd: int) -> list[Dim]:
    """floor((size + pads - dilation * (k - 1) - 1) / stride) + 1 per spatial axis."""
    a, dims = ctx.attrs, []
    for i in range(nd):
        k = w.shape[2 + i]
        if not isinstance(k, int):
            dims.append(ctx.fresh_dim())
            continue
        offset = a["pads"][i] + a["pads"][i + nd] - a["dilations"][i] * (k - 1) - 1
        stride = a["strides"][i]
        dims.append(window_dim(ctx, x.shape[2 + i], offset, stride, lambda s, o=offset, t=stride: (s + o) // t + 1))
    return dims


def _conv(nd: int):
    op = f"conv{nd}d"

    def infer(ctx: InferContext) -> list[TensorType]:
        x = _spatial_check(ctx, op, nd)
        w = ctx.types[1]
        a = ctx.attrs
        if w.rank != nd + 2:
            raise ctx.fail(op, f"weight must have rank {nd + 2}, got {w}")
        groups = a["groups"]
        c = x.shape[1]
        if isinstance(c, int) and isinstance(w.shape[1], int) and c != w.shape[1] * groups:
            raise ctx.fail(op, f"input has {c} channels but weight expects {w.shape[1]} x {groups} groups")
        if len(ctx.types) > 2 and ctx.types[2].shape not in ((w.shape[0],),):
            raise ctx.fail(op, f"bias must have shape [{w.shape[0]}], got {ctx.types[2]}")
        spatial = _conv_dims(ctx, x, w, nd)
        if any(isinstance(d, int) and d <= 0 for d in spatial):
            raise ctx.fail(op, f"output would be empty: input {x}, kernel {list(w.shape[2:])}")
        return [TensorType((x.shape[0], w.shape[0], *spatial), x.dtype)]

    return infer


def _conv_transpose(nd: int):
    op = f"conv_transpose{nd}d"

    def infer(ctx: InferContext) -> list[TensorType]:
        x = _spatial_check(ctx, op, nd)
        w = ctx.types[1]
        a = ctx.attrs
        spatial = _spatial_dims(
            ctx,
            x,
            w,
            nd,
            lambda i, s, k: (
                a["strides"][i] * (s - 1)
                + a["output_padding"][i]
                + (k - 1) * a["dilations"][i]
                + 1
                - a["pads"][i]
                - a["pads"][i + nd]
            ),
        )
        out_channels = dim_math(ctx, lambda o: o * a["groups"], w.shape[1])
        return [TensorType((x.shape[0], out_channels, *spatial), x.dtype)]

    return infer


def _pool(nd: int, kind: str):
    op = f"{kind}_pool{nd}d"

    def infer(ctx: InferContext) -> list[TensorType]:
        from runtime_lite.kernels.pool import pooled_extent

        x = _spatial_check(ctx, op, nd)
        a = ctx.attrs
        spatial = []
        for i in range(nd):
            k, stride, begin, end = a["kernel_shape"][i], a["strides"][i], a["pads"][i], a["pads"][i + nd]
            offset = begin + end - a["dilations"][i] * (k - 1) - 1
            if a["ceil_mode"] and not (stride == 1 and offset == -1):
                offset = ("ceil", begin, offset)  # rounds up, and the last window's start matters: its own key
            extent = functools.partial(pooled_extent, k=k, stride=stride, dilation=a["dilations"][i],
                                       pad_begin=begin, pad_end=end, ceil_mode=a["ceil_mode"])  # fmt: skip
            spatial.append(window_dim(ctx, x.shape[2 + i], offset, stride, extent))
        if any(isinstance(d, int) and d <= 0 for d in spatial):
            raise ctx.fail(op, f"output would be empty: input {x}, kernel {a['kernel_shape']}")
        return [TensorType((*x.shape[:2], *spatial), x.dtype)]

    return infer


for _nd, _conv_op, _transpose_op, _max_op, _avg_op in zip(
    SPATIAL_RANKS, CONV_OPS, CONV_TRANSPOSE_OPS, MAX_POOL_OPS, AVG_POOL_OPS
):
    register_op(_conv_op, "x w b?", _conv(_nd), strides=REQUIRED, pads=REQUIRED, dilations=REQUIRED, groups=1)
    register_op(
        _transpose_op,
        "x w b?",
        _conv_transpose(_nd),
        strides=REQUIRED,
        pads=REQUIRED,
        dilations=REQUIRED,
        output_padding=REQUIRED,
        groups=1,
    )
    _pool_attrs = dict(kernel_shape=REQUIRED, strides=REQUIRED, pads=REQUIRED, dilations=REQUIRED, ceil_mode=0)
    register_op(_max_op, "x", _pool(_nd, "max"), **_pool_attrs)
    register_op(_avg_op, "x", _pool(_nd, "avg"), count_include_pad=0, **_pool_attrs)

register_op("lrn", "x", same, size=REQUIRED, alpha=1e-4, beta=0.75, bias=1.0)
register_op("batch_norm", "x scale bias mean var", same, epsilon=1e-5)
register_op("layer_norm", "x scale bias?", same, axis=-1, epsilon=1e-5)
register_op("instance_norm", "x scale bias", same, epsilon=1e-5)

# -- linear algebra ---------------------------------------------------------------------


def _matmul(ctx: InferContext) -> list[TensorType]:
    a, b = ctx.types
    if a.rank == 0 or b.rank == 0:
        raise ctx.fail("matmul", "operands must not be scalars")
    ash = a.shape if a.rank > 1 else (1,) + a.shape
    bsh = b.shape if b.rank > 1 else b.shape + (1,)
    k1, k2 = ash[-1], bsh[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise ctx.fail("matmul", f"inner dims differ: {a} @ {b}")
    batch = broadcast_shapes([ash[:-2], bsh[:-2]], ctx, "matmul")
    shape = batch + ((ash[-2],) if a.rank > 1 else ()) + ((bsh[-1],) if b.rank > 1 else ())
    return [TensorType(shape, a.dtype)]


def _dense(ctx: InferContext) -> list[TensorType]:
    x, w = ctx.types[:2]
    if w.rank != 2:
        raise ctx.fail("dense", f"weight must be 2-d (units, in), got {w}")
    if isinstance(x.shape[-1], int) and isinstance(w.shape[1], int) and x.shape[-1] != w.shape[1]:
        raise ctx.fail("dense", f"input has {x.shape[-1]} features but the weight expects {w.shape[1]}")
    return [TensorType(x.shape[:-1] + (w.shape[0],), x.dtype)]


register_op("matmul", "a b", _matmul)
register_op("dense", "x w b?", _dense)

# -- reductions -------------------------------------------------------------------------


def _reduce(op: str):
    def infer(ctx: InferContext) -> list[TensorType]:
        x = ctx.types[0]
        axes = ctx.attrs["axes"]
        axes = range(x.rank) if axes is None else [norm_axis(a, x.rank, ctx, op) for a in axes]
        keep = ctx.attrs["keepdims"]
        shape = (
            [1 if i in axes else d for i, d in enumerate(x.shape)]
            if keep
            else [d for i, d in enumerate(x.shape) if i not in axes]
        )
        return [TensorType(shape, x.dtype)]

    return infer


for _name in REDUCE_OPS:
    register_op(_name, "x", _reduce(_name), axes=None, keepdims=1)


def _arg_reduce(op: str):
    def infer(ctx: InferContext) -> list[TensorType]:
        x = ctx.types[0]
        axis = norm_axis(ctx.attrs["axis"], x.rank, ctx, op)
        shape = (
            [1 if i == axis else d for i, d in enumerate(x.shape)]
            if ctx.attrs["keepdims"]
            else [d for i, d in enumerate(x.shape) if i != axis]
        )
        return [TensorType(shape, "int64")]

    return infer


for _name in ARG_REDUCE_OPS:
    register_op(_name, "x", _arg_reduce(_name), axis=0, keepdims=1, select_last_index=0)


def _cumsum(ctx: InferContext) -> list[TensorType]:
    x = ctx.types[0]
    norm_axis(ctx.attrs["axis"], x.rank, ctx, "cumsum")
    return [x]


def _topk(ctx: InferContext) -> list[TensorType]:
    x = ctx.types[0]
    axis = norm_axis(ctx.attrs["axis"], x.rank, ctx, "topk")
    k = ctx.attrs["k"]
    if not isinstance(k, int) or k < 0:
        raise ctx.fail("topk", f"k must be a non-negative integer, got {k!r}")
    if isinstance(x.shape[axis], int) and k > x.shape[axis]:
        raise ctx.fail("topk", f"k = {k} is larger than axis {axis} of {x}")
    shape = list(x.shape)
    shape[axis] = k
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


register_op("cumsum", "x", _cumsum, axis=REQUIRED, exclusive=0, reverse=0)
register_op("topk", "x", _topk, k=REQUIRED, axis=-1, largest=1, sorted=1)

# -- shapes and data movement -----------------------------------------------------------


def _run_time_target(ctx: InferContext, i: int) -> list[Dim | None]:
    """The elements of a shape input computed at run time, as far as its producers tell (None: unknown)."""
    from aot.ir.shape_values import known_elements

    n = ctx.types[i].shape[0]
    elements = known_elements(ctx.values[i]) if len(ctx.values) > i else None
    return elements if elements is not None and len(elements) == n else [None] * n


def _run_time_reshape(x: TensorType, target: list[Dim | None], ctx: InferContext) -> list[Dim]:
    """Output dims of a reshape to a run-time target: known sizes and symbols stay, 0 copies, -1 divides."""
    dims: list[Dim | None] = [
        x.shape[i] if d == 0 and not ctx.attrs["allowzero"] and i < x.rank else d for i, d in enumerate(target)
    ]
    rest = [d for d in dims if d != -1]
    if dims.count(-1) == 1 and all(isinstance(d, str) or (isinstance(d, int) and d > 0) for d in rest):
        dims[dims.index(-1)] = _symbolic_quotient(x.shape, rest, ctx)
    return _known_or_fresh(dims, ctx)


def _known_or_fresh(dims: Sequence[Dim | None], ctx: InferContext) -> list[Dim]:
    """Each element of a run-time shape that is a symbol or a size as it is; anything else a fresh dim."""
    return [d if isinstance(d, str) or (isinstance(d, int) and d >= 0) else ctx.fresh_dim() for d in dims]


def _reshape(ctx: InferContext) -> list[TensorType]:
    x = ctx.types[0]
    if len(ctx.types) > 1:  # target computed at run time: keep what is known of each element
        n = ctx.types[1].shape[0]
        if not isinstance(n, int):
            raise ctx.fail("reshape", "the target shape has unknown length")
        return [TensorType(_run_time_reshape(x, _run_time_target(ctx, 1), ctx), x.dtype)]
    target = ctx.attrs["shape"]
    if target is None:
        raise ctx.fail("reshape", "needs a 'shape' attribute or a shape input")
    dims: list[Dim] = []
    for i, d in enumerate(target):
        if d == 0 and not ctx.attrs["allowzero"]:
            if i >= x.rank:
                raise ctx.fail("reshape", f"0 at position {i} copies a dim the input {x} lacks")
            dims.append(x.shape[i])
        else:
            dims.append(int(d))
    if dims.count(-1) > 1:
        raise ctx.fail("reshape", f"more than one -1 in {list(target)}")
    if -1 in dims:
        known = [d for d in dims if d != -1]
        if x.is_static and all(isinstance(d, int) for d in known):
            size = int(np.prod(known, dtype=np.int64)) if known else 1
            if size == 0 or x.numel % size:
                raise ctx.fail("reshape", f"cannot reshape {x} to {list(target)}")
            dims[dims.index(-1)] = x.numel // size
        else:
            dims[dims.index(-1)] = _symbolic_quotient(x.shape, known, ctx)
    elif x.is_static and all(isinstance(d, int) for d in dims) and int(np.prod(dims, dtype=np.int64)) != x.numel:
        raise ctx.fail("reshape", f"cannot reshape {x} ({x.numel} elements) to {dims}")
    return [TensorType(dims, x.dtype)]


def _symbolic_quotient(shape: Sequence[Dim], known: Sequence[Dim], ctx: InferContext) -> Dim:
    """The -1 of a reshape when symbols are involved: cancel equal symbols, else a fresh one."""
    num = list(shape)
    den = list(known)
    for d in list(den):
        if isinstance(d, str) and d in num:
            num.remove(d)
            den.remove(d)
    if all(isinstance(d, int) for d in num + den):
        size = int(np.prod(den, dtype=np.int64)) if den else 1
        total = int(np.prod(num, dtype=np.int64)) if num else 1
        if size and total % size == 0:
            return total // size
    symbols = [d for d in num if isinstance(d, str)]
    if len(symbols) == 1 and all(isinstance(d, int) for d in den):  # [N,2048,1,1] -> [-1,2048]: -1 is N
        rest = int(np.prod([d for d in num if isinstance(d, int)], dtype=np.int64))
        if rest == (int(np.prod(den, dtype=np.int64)) if den else 1):
            return symbols[0]
    return ctx.fresh_dim()


def _flatten(ctx: InferContext) -> list[TensorType]:
    x = ctx.types[0]
    axis = ctx.attrs["axis"]
    axis = axis + x.rank if axis < 0 else axis
    if not 0 <= axis <= x.rank:
        raise ctx.fail("flatten", f"axis {ctx.attrs['axis']} out of range for {x}")

    def product(dims):
        if all(isinstance(d, int) for d in dims):
            return int(np.prod(dims, dtype=np.int64)) if dims else 1
        return dims[0] if len(dims) == 1 else ctx.fresh_dim()

    return [TensorType((product(x.shape[:axis]), product(x.shape[axis:])), x.dtype)]


def _transpose(ctx: InferContext) -> list[TensorType]:
    x = ctx.types[0]
    perm = ctx.attrs["perm"]
    perm = list(range(x.rank))[::-1] if perm is None else list(perm)
    if sorted(perm) != list(range(x.rank)):
        raise ctx.fail("transpose", f"perm {perm} is not a permutation of {x.rank} axes")
    return [TensorType([x.shape[p] for p in perm], x.dtype)]


def _squeeze(ctx: InferContext) -> list[TensorType]:
    x = ctx.types[0]
    axes = ctx.attrs["axes"]
    if axes is None:
        if not x.is_static:
            raise ctx.fail("squeeze", f"needs explicit axes for a symbolic shape {x}")
        return [TensorType([d for d in x.shape if d != 1], x.dtype)]
    axes = {norm_axis(a, x.rank, ctx, "squeeze") for a in axes}
    for a in axes:
        if isinstance(x.shape[a], int) and x.shape[a] != 1:
            raise ctx.fail("squeeze", f"axis {a} of {x} is not 1")
    return [TensorType([d for i, d in enumerate(x.shape) if i not in axes], x.dtype)]


def _unsqueeze(ctx: InferContext) -> list[TensorType]:
    x = ctx.types[0]
    rank = x.rank + len(ctx.attrs["axes"])
    axes = sorted(norm_axis(a, rank, ctx, "unsqueeze") for a in ctx.attrs["axes"])
    if len(set(axes)) != len(axes):
        raise ctx.fail("unsqueeze", f"repeated axes {ctx.attrs['axes']}")
    dims = list(x.shape)
    for a in axes:
        dims.insert(a, 1)
    return [TensorType(dims, x.dtype)]


def _expand(ctx: InferContext) -> list[TensorType]:
    x = ctx.types[0]
    if len(ctx.types) > 1:
        n = ctx.types[1].shape[0]
        if not isinstance(n, int):
            return [TensorType([ctx.fresh_dim() for _ in range(x.rank)], x.dtype)]
        target = _run_time_target(ctx, 1)
        rank = max(x.rank, n)
        mine = [1] * (rank - x.rank) + list(x.shape)
        theirs = [1] * (rank - n) + target
        return [TensorType([_expanded_dim(a, t, ctx) for a, t in zip(mine, theirs)], x.dtype)]
    return [TensorType(broadcast_shapes([x.shape, ctx.attrs["shape"]], ctx, "expand"), x.dtype)]


def _expanded_dim(a: Dim, t: Dim | None, ctx: InferContext) -> Dim:
    """One axis of an expand to a target known element by element (``t``: None where unknown). Expand broadcasts
    both ways, so a target of 1 keeps the input's dim and an input of 1 takes the target's; where either could
    win at run time the dim is fresh. Keeping them is what lets a batch dim reach the outputs (magika's one-hot
    expands to Shape -> Cast -> Slice -> Concat -> Cast)."""
    if t == 1 or (t is not None and t == a):
        return a
    if a == 1 and t is not None and not (isinstance(t, int) and t < 0):
        return t
    if isinstance(a, int) and a > 1:  # the target is 1 or a, else the run fails: the result is a
        return a
    if isinstance(t, int) and t > 1:  # likewise, the input is 1 or t
        return t
    return ctx.fresh_dim()


def _tile(ctx: InferContext) -> list[TensorType]:
    x = ctx.types[0]
    reps = ctx.attrs["repeats"]
    if len(reps) != x.rank:
        raise ctx.fail("tile", f"repeats {list(reps)} must have one entry per axis of {x}")
    return [TensorType([dim_math(ctx, lambda d, r=r: d * r, d) for d, r in zip(x.shape, reps)], x.dtype)]


def _concat(ctx: InferContext) -> list[TensorType]:
    first = ctx.types[0]
    axis = norm_axis(ctx.attrs["axis"], first.rank, ctx, "concat")
    for t in ctx.types[1:]:
        if t.rank != first.rank or t.dtype != first.dtype:
            raise ctx.fail("concat", f"inputs {first} and {t} differ in rank or dtype")
        for i, (a, b) in enumerate(zip(first.shape, t.shape)):
            if i != axis and isinstance(a, int) and isinstance(b, int) and a != b:
                raise ctx.fail("concat", f"inputs {first} and {t} differ outside axis {axis}")
    sizes = [t.shape[axis] for t in ctx.types]
    total = sum(sizes) if all(isinstance(s, int) for s in sizes) else ctx.fresh_dim()
    shape = list(first.shape)
    shape[axis] = total
    return [TensorType(shape, first.dtype)]


def _recurrent(ctx: InferContext) -> list[TensorType]:
    """RNN/GRU/LSTM over x [seq, batch, input]: y [seq, dirs, batch, hidden], y_h (and y_c) [dirs, batch, hidden]."""
    x, hidden = ctx.types[0], ctx.attrs["hidden_size"]
    dirs = 2 if ctx.attrs["direction"] == "bidirectional" else 1
    if x.rank != 3:
        raise ctx.fail("recurrent", f"x must be [seq, batch, input], got {x}")
    seq, batch = x.shape[:2]
    state = TensorType((dirs, batch, hidden), x.dtype)
    return [TensorType((seq, dirs, batch, hidden), x.dtype), state] + ([state] if ctx.attrs["kind"] == "lstm" else [])


def _split(ctx: InferContext) -> list[TensorType]:
    x = ctx.types[0]
    axis = norm_axis(ctx.attrs["axis"], x.rank, ctx, "split")
    sizes = ctx.attrs["sizes"]
    if isinstance(x.shape[axis], int) and sum(sizes) != x.shape[axis]:
        raise ctx.fail("split", f"sizes {list(sizes)} do not add up to dim {axis} of {x}")
    outs = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        outs.append(TensorType(shape, x.dtype))
    return outs


def _slice(ctx: InferContext) -> list[TensorType]:
    from runtime_lite.kernels.shape import onnx_slice

    x = ctx.types[0]
    a = ctx.attrs
    shape = list(x.shape)
    for start, end, axis, step in zip(a["starts"], a["ends"], a["axes"], a["steps"]):
        axis = norm_axis(axis, x.rank, ctx, "slice")
        if step == 0:
            raise ctx.fail("slice", "step 0")
        d = shape[axis]
        if isinstance(d, int):
            shape[axis] = len(range(d)[onnx_slice(d, start, end, step)])
        elif not _whole_axis(start, end, step):
            shape[axis] = ctx.fresh_dim()
    return [TensorType(shape, x.dtype)]


#: A slice bound at least this large (jax2tf writes 10**9, torch INT64_MAX) lies past any size a tensor has.
_PAST_ANY_SIZE = 10**9


def _whole_axis(start: int, end: int, step: int) -> bool:
    """Whether a slice takes every element of an axis whatever its size (``x[:]``, ``x[::-1]``): the dim stays."""
    if step == 1:
        return (start == 0 or start <= -_PAST_ANY_SIZE) and end >= _PAST_ANY_SIZE
    if step == -1:
        return (start == -1 or start >= _PAST_ANY_SIZE) and end <= -_PAST_ANY_SIZE
    return False


def _dynamic_slice(ctx: InferContext) -> list[TensorType]:
    """Bounds known through their producers give sizes; a full-range slice keeps the dim; else a fresh one."""
    from runtime_lite.kernels.shape import onnx_slice

    x = ctx.types[0]
    axes, steps = ctx.attrs["axes"], ctx.attrs["steps"]
    for t in ctx.types[1:]:
        if t.dtype not in ("int64", "int32") or t.rank != 1 or t.shape[0] not in (len(axes), None):
            raise ctx.fail("dynamic_slice", f"starts and ends must be 1-d integer tensors of {len(axes)}, got {t}")
    starts, ends = _run_time_target(ctx, 1), _run_time_target(ctx, 2)
    shape = list(x.shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = norm_axis(axis, x.rank, ctx, "dynamic_slice")
        d = shape[axis]
        if step == 0:
            raise ctx.fail("dynamic_slice", "step 0")
        if isinstance(d, int) and isinstance(start, int) and isinstance(end, int):
            shape[axis] = len(range(d)[onnx_slice(d, start, end, step)])
        elif not (start == 0 and end == d and step == 1):
            shape[axis] = ctx.fresh_dim()
    return [TensorType(shape, x.dtype)]


def _pad(ctx: InferContext) -> list[TensorType]:
    x = ctx.types[0]
    pads = ctx.attrs["pads"]
    if len(pads) != 2 * x.rank:
        raise ctx.fail("pad", f"pads needs {2 * x.rank} values for {x}, got {list(pads)}")
    if ctx.attrs["mode"] not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.fail("pad", f"unsupported mode {ctx.attrs['mode']!r}")
    shape = [
        d if pads[i] == pads[i + x.rank] == 0 else dim_math(ctx, lambda d, i=i: d + pads[i] + pads[i + x.rank], d)
        for i, d in enumerate(x.shape)
    ]  # an axis padded by nothing keeps its dim (a symbolic batch stays the batch)
    return [TensorType(shape, x.dtype)]


def _same_pad(ctx: InferContext) -> list[TensorType]:
    """Each trailing spatial dim padded as auto_pad SAME does: computed where the size is known."""
    from runtime_lite.kernels.geometry import same_pads

    x, kernel_shape = ctx.types[0], ctx.attrs["kernel_shape"]
    nd = len(kernel_shape)
    if x.rank < nd or not (len(ctx.attrs["strides"]) == len(ctx.attrs["dilations"]) == nd):
        raise ctx.fail("same_pad", f"kernel_shape, strides and dilations must each give {nd} values for {x}")
    shape = list(x.shape)
    for i, d in enumerate(shape[x.rank - nd :]):
        if isinstance(d, int):
            one = same_pads([d], kernel_shape[i : i + 1], ctx.attrs["strides"][i : i + 1],
                            ctx.attrs["dilations"][i : i + 1], bool(ctx.attrs["lower"]))  # fmt: skip
            shape[x.rank - nd + i] = d + sum(one)
        else:
            key = (
                "same_pad",
                d,
                kernel_shape[i],
                ctx.attrs["strides"][i],
                ctx.attrs["dilations"][i],
                ctx.attrs["lower"],
            )
            shape[x.rank - nd + i] = ctx.derived_dim(key)
    return [TensorType(shape, x.dtype)]


def _gather(ctx: InferContext) -> list[TensorType]:
    data, indices = ctx.types
    axis = norm_axis(ctx.attrs["axis"], data.rank, ctx, "gather")
    return [TensorType(data.shape[:axis] + indices.shape + data.shape[axis + 1 :], data.dtype)]


def _index_dtype(ctx: InferContext, op: str, t: TensorType) -> None:
    if t.dtype not in ("int64", "int32"):
        raise ctx.fail(op, f"indices must be int64 or int32, got {t}")


def _index_depth(ctx: InferContext, op: str, data: TensorType, indices: TensorType, batch_dims: int) -> int:
    """How many leading data axes (after the batch axes) each index row addresses: indices' last dim."""
    _index_dtype(ctx, op, indices)
    if indices.rank < 1:
        raise ctx.fail(op, "indices must have rank >= 1")
    depth = indices.shape[-1]
    if not isinstance(depth, int):
        raise ctx.fail(op, f"the last dim of indices {indices} must be static")
    if not 0 <= batch_dims < min(indices.rank, data.rank + 1) or batch_dims + depth > data.rank:
        raise ctx.fail(op, f"indices {indices} (batch_dims {batch_dims}) do not fit data {data}")
    return depth


def _gather_nd(ctx: InferContext) -> list[TensorType]:
    data, indices = ctx.types
    b = ctx.attrs["batch_dims"]
    depth = _index_depth(ctx, "gather_nd", data, indices, b)
    return [TensorType(indices.shape[:-1] + data.shape[b + depth :], data.dtype)]


REDUCTIONS = ("none", "add", "mul", "max", "min")


def _scatter_check(ctx: InferContext, op: str) -> TensorType:
    data, indices, updates = ctx.types
    if ctx.attrs["reduction"] not in REDUCTIONS:
        raise ctx.fail(op, f"reduction {ctx.attrs['reduction']!r} is not one of {', '.join(REDUCTIONS)}")
    if updates.dtype != data.dtype:
        raise ctx.fail(op, f"updates {updates} and data {data} differ in dtype")
    _index_dtype(ctx, op, indices)
    return data


def _scatter_nd(ctx: InferContext) -> list[TensorType]:
    data = _scatter_check(ctx, "scatter_nd")
    indices, updates = ctx.types[1:]
    depth = _index_depth(ctx, "scatter_nd", data, indices, 0)
    want = indices.shape[:-1] + data.shape[depth:]
    if updates.rank != len(want) or any(
        isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(updates.shape, want)
    ):
        raise ctx.fail("scatter_nd", f"updates must have shape {list(want)}, got {updates}")
    return [data]


def _scatter_elements(ctx: InferContext) -> list[TensorType]:
    data = _scatter_check(ctx, "scatter_elements")
    indices, updates = ctx.types[1:]
    norm_axis(ctx.attrs["axis"], data.rank, ctx, "scatter_elements")
    if not indices.rank == updates.rank == data.rank:
        raise ctx.fail("scatter_elements", f"data {data}, indices {indices} and updates {updates} differ in rank")
    return [data]


def _shape(ctx: InferContext) -> list[TensorType]:
    rank = ctx.types[0].rank
    return [TensorType((len(range(rank)[slice(ctx.attrs["start"], ctx.attrs["end"])]),), "int64")]


def _constant_of_shape(ctx: InferContext) -> list[TensorType]:
    """A run-time shape keeps what its elements say (an LSTM's zero state over the input's batch: Shape -> Gather
    -> Concat), as a reshape's target does; an unknown element is a fresh dim."""
    n = ctx.types[0].shape[0] if ctx.types[0].rank else 0
    values = ctx.values[0].data if ctx.values and getattr(ctx.values[0], "data", None) is not None else None
    if values is not None:
        return [TensorType([int(d) for d in values], ctx.attrs["dtype"])]
    if not isinstance(n, int):
        raise ctx.fail("constant_of_shape", "the shape has unknown length")
    return [TensorType(_known_or_fresh(_run_time_target(ctx, 0), ctx), ctx.attrs["dtype"])]


def _range(ctx: InferContext) -> list[TensorType]:
    for name, t in zip(("start", "limit", "delta"), ctx.types):
        if any(isinstance(d, int) and d != 1 for d in t.shape):
            raise ctx.fail("range", f"{name} must hold one value, got {t}")
    return [TensorType((ctx.fresh_dim(),), ctx.types[0].dtype)]


def _resize(ctx: InferContext) -> list[TensorType]:
    x = ctx.types[0]
    a = ctx.attrs
    if a["mode"] not in ("nearest", "linear"):
        raise ctx.fail("resize", f"mode {a['mode']!r} is not supported (nearest, linear are)")
    if a["sizes"] is not None:
        if len(a["sizes"]) != x.rank:
            raise ctx.fail("resize", f"sizes {a['sizes']} must have one entry per axis of {x}")
        return [TensorType(a["sizes"], x.dtype)]
    if a["scales"] is None or len(a["scales"]) != x.rank:
        raise ctx.fail("resize", f"scales must have one entry per axis of {x}")
    shape = [
        d if s == 1.0 else dim_math(ctx, lambda d, s=s: int(np.floor(d * s)), d) for d, s in zip(x.shape, a["scales"])
    ]
    return [TensorType(shape, x.dtype)]


def _dynamic_resize(ctx: InferContext) -> list[TensorType]:
    """Resize to sizes computed at run time: each output dim is what the sizes' producers tell, else fresh."""
    x, sizes = ctx.types
    if ctx.attrs["mode"] not in ("nearest", "linear"):
        raise ctx.fail("dynamic_resize", f"mode {ctx.attrs['mode']!r} is not supported (nearest, linear are)")
    if sizes.rank != 1 or sizes.shape[0] != x.rank or sizes.dtype not in ("int64", "int32"):
        raise ctx.fail("dynamic_resize", f"sizes must be a 1-d integer tensor of {x.rank} entries, got {sizes}")
    known = _run_time_target(ctx, 1)
    return [TensorType([d if isinstance(d, str) or (isinstance(d, int) and d >= 0) else ctx.fresh_dim() for d in known],
                       x.dtype)]  # fmt: skip


def _grid_sample(ctx: InferContext) -> list[TensorType]:
    x, grid = ctx.types
    if x.rank != 4 or grid.rank != 4 or grid.shape[3] not in (2,):
        raise ctx.fail("grid_sample", f"expects input [N, C, H, W] and grid [N, H_out, W_out, 2], got {x} and {grid}")
    if ctx.attrs["mode"] not in ("bilinear", "nearest"):
        raise ctx.fail("grid_sample", f"mode {ctx.attrs['mode']!r} is not supported (bilinear, nearest are)")
    if ctx.attrs["padding_mode"] not in ("zeros", "border", "reflection"):
        raise ctx.fail("grid_sample", f"padding_mode {ctx.attrs['padding_mode']!r} is not supported")
    return [TensorType((x.shape[0], x.shape[1], grid.shape[1], grid.shape[2]), x.dtype)]


register_op("grid_sample", "x grid", _grid_sample, mode="bilinear", padding_mode="zeros", align_corners=0)


def _roi_align(ctx: InferContext) -> list[TensorType]:
    """[N, C, H, W], rois [R, 4], batch_indices [R] -> [R, C, output_height, output_width]."""
    x, rois, indices = ctx.types
    if x.rank != 4 or rois.rank != 2 or indices.rank != 1:
        raise ctx.fail(
            "roi_align", f"expects X [N, C, H, W], rois [R, 4] and batch_indices [R], got {x}, {rois}, {indices}"
        )
    a = ctx.attrs
    return [TensorType((rois.shape[0], x.shape[1], a["output_height"], a["output_width"]), x.dtype)]


register_op(
    "roi_align", "x rois batch_indices", _roi_align, mode="avg", output_height=1, output_width=1, sampling_ratio=0,
    spatial_scale=1.0, coordinate_transformation_mode="half_pixel",
)  # fmt: skip
register_op("reshape", "x shape?", _reshape, shape=None, allowzero=0)
register_op("flatten", "x", _flatten, axis=1)
register_op("transpose", "x", _transpose, perm=None)
register_op("squeeze", "x", _squeeze, axes=None)
register_op("unsqueeze", "x", _unsqueeze, axes=REQUIRED)
register_op("expand", "x shape?", _expand, shape=None)
register_op("tile", "x", _tile, repeats=REQUIRED)
register_op("concat", "xs*", _concat, axis=REQUIRED)
register_op("split", "x", _split, axis=REQUIRED, sizes=REQUIRED)
register_op(
    "recurrent", "x w r b states*", _recurrent, kind=REQUIRED, hidden_size=REQUIRED, direction="forward",
    activations=REQUIRED, clip=None, linear_before_reset=0, initial_h=0, initial_c=0, peepholes=0,
)  # fmt: skip
register_op("slice", "x", _slice, starts=REQUIRED, ends=REQUIRED, axes=REQUIRED, steps=REQUIRED)
register_op("dynamic_slice", "x starts ends", _dynamic_slice, axes=REQUIRED, steps=REQUIRED)
register_op("pad", "x", _pad, pads=REQUIRED, mode="constant", value=0.0)
register_op("same_pad", "x", _same_pad, kernel_shape=REQUIRED, strides=REQUIRED, dilations=REQUIRED, lower=0,
            value=0.0)  # fmt: skip
register_op("gather", "data indices", _gather, axis=0)
register_op("gather_elements", "data indices", lambda c: [c.types[1].with_dtype(c.types[0].dtype)], axis=0)
register_op("shape", "x", _shape, start=0, end=None)
register_op("gather_nd", "data indices", _gather_nd, batch_dims=0)
register_op("scatter_nd", "data indices updates", _scatter_nd, reduction="none")
register_op("scatter_elements", "data indices updates", _scatter_elements, axis=0, reduction="none")
register_op("constant_of_shape", "shape", _constant_of_shape, value=0.0, dtype="float32")
register_op("range", "start limit delta", _range)
register_op(
    "dynamic_resize",
    "x sizes",
    _dynamic_resize,
    mode="nearest",
    coordinate_transformation_mode="half_pixel",
    nearest_mode="round_prefer_floor",
)
register_op(
    "resize",
    "x",
    _resize,
    mode="nearest",
    scales=None,
    sizes=None,
    coordinate_transformation_mode="half_pixel",
    nearest_mode="round_prefer_floor",
)

# -- quantisation -----------------------------------------------------------------------

register_op(
    "quantize", "x scale zero_point?", lambda c: [c.types[0].with_dtype(c.attrs["dtype"])], axis=1, dtype="uint8"
)
register_op("dequantize", "x scale zero_point?", lambda c: [c.types[0].with_dtype(c.types[1].dtype)], axis=1)
# ONNX DynamicQuantizeLinear: x as uint8 over [min(x, 0), max(x, 0)], its scale and zero point found at run time
# (dynamic quantization of a matmul's activation: no calibration; docs/quantization.md)
register_op(
    "dynamic_quantize", "x",
    lambda c: [c.types[0].with_dtype("uint8"), TensorType((), "float32"), TensorType((), "uint8")],
)  # fmt: skip


# -- integer arithmetic (what the NPU runs for a quantized composite; runtime_lite/kernels/integer.py) --


def _int8_conv(ctx: InferContext) -> list[TensorType]:
    x, w = ctx.types[:2]
    if w.rank < 3 or x.rank != w.rank:
        raise ctx.fail("int8_conv", f"input {x} and weight {w} must both be (N, C, *spatial)")
    return [_conv(w.rank - 2)(InferContext(ctx.types[:2], ctx.attrs, ctx.fresh_dim, ctx.node))[0].with_dtype("int8")]


def _int8_dense(ctx: InferContext) -> list[TensorType]:
    return [_dense(InferContext(ctx.types[:2], ctx.attrs, ctx.fresh_dim, ctx.node))[0].with_dtype("int8")]


register_op(
    "int8_conv", "x w bias multiplier shift", _int8_conv,
    strides=REQUIRED, pads=REQUIRED, dilations=REQUIRED, groups=1, act_min=-128, act_max=127,
)  # fmt: skip
register_op("int8_dense", "x w bias multiplier shift", _int8_dense, act_min=-128, act_max=127)
# runtime_lite/kernels/integer_mobile.py: a lookup table, global average pooling, a requantizing concat
register_op("int8_lut", "x table", lambda c: [c.types[0]])
register_op(
    "int8_mean", "x", lambda c: [_reduce("int8_mean")(c)[0].with_dtype("int8")],
    axes=REQUIRED, keepdims=1, multiplier=REQUIRED, shift=REQUIRED, act_min=-128, act_max=127,
)  # fmt: skip
register_op("int8_concat", "xs*", _concat, axis=REQUIRED, multipliers=REQUIRED, shifts=REQUIRED)
