"""The checks behind the ops mobile and OCR networks are made of, and which layout ops cost nothing.

A real NPU (Ethos-U, Hexagon, Neutron) runs hard-swish and hard-sigmoid on its
activation unit, global average pooling on its pooling unit, resize, layer norm
and transposed convolution on its vector and convolution engines, and moves data
(reshape, transpose, concat, slice) with its DMA engine. Each check here says
why the NPU declines a match it cannot run as described; the shared checks
(dtypes, static shapes, escaping intermediates) run after it (patterns.py).
"""

from __future__ import annotations

import math

import numpy as np

from aot.compiler.backends.npu.device import DEFAULT_PROFILE
from aot.compiler.pattern_registry import PatternCheckContext, Rejected, reject
from aot.ir.graph import Node


def _node(ctx: PatternCheckContext) -> Node:
    return ctx.root.producer


def spatial_axes(node: Node) -> list[int] | None:
    """reduce_mean's axes, normalized, when they are exactly the spatial axes (2 .. rank-1); else None."""
    rank = node.inputs[0].type.rank
    axes = node.attrs["axes"]
    if rank < 3 or axes is None:
        return None
    normalized = sorted(a % rank for a in axes)
    return normalized if normalized == list(range(2, rank)) else None


def check_global_pool(ctx: PatternCheckContext) -> bool | Rejected:
    node = _node(ctx)
    if spatial_axes(node) is None:
        rank = node.inputs[0].type.rank
        return reject(
            f"reduce_mean over axes {node.attrs['axes']} of a rank-{rank} tensor; the npu's POOLING engine "
            "averages over the spatial axes (2..) only (global average pooling)"
        )
    return True


def check_layout(ctx: PatternCheckContext) -> bool | Rejected:
    node = _node(ctx)
    if len(node.inputs) > 1:
        return reject(f"{node.op} reads its target shape from a tensor; the npu takes it as a static attribute")
    return True


def check_resize(ctx: PatternCheckContext) -> bool | Rejected:
    node = _node(ctx)
    x, y = node.inputs[0].type, node.outputs[0].type
    if x.rank != 4 or tuple(x.shape[:2]) != tuple(y.shape[:2]):
        return reject(f"resize from {x} to {y}; the npu resizes the spatial axes of NCHW tensors only")
    return True


def check_conv_transpose(ctx: PatternCheckContext) -> bool | Rejected:
    node = _node(ctx)
    if any(d != 1 for d in node.attrs["dilations"]):
        return reject(f"dilations {node.attrs['dilations']}; the npu's CONV engine scatters undilated kernels only")
    return True


def check_layer_norm(ctx: PatternCheckContext) -> bool | Rejected:
    node = _node(ctx)
    x = node.inputs[0].type
    row = math.prod(x.shape[node.attrs["axis"] % max(x.rank, 1) :]) * max(4, np.dtype(x.dtype).itemsize)
    l1 = DEFAULT_PROFILE.tile_budget
    if row > l1:
        return reject(f"layer_norm rows of {row} bytes; the VECTOR engine keeps one row in L1 ({l1} bytes)")
    return True


def is_view(node: Node) -> bool:
    """A layout op that moves no bytes: the output is its input's dense bytes read with another shape.

    reshape, flatten, squeeze and unsqueeze always are; a transpose is when it only moves
    axes of size 1 (the non-unit axes keep their order, so the memory order is unchanged).
    """
    if node.op in ("reshape", "flatten", "squeeze", "unsqueeze"):
        return True
    if node.op == "transpose":
        shape = node.inputs[0].type.shape
        perm = node.attrs["perm"] or list(reversed(range(len(shape))))
        moved = [a for a in perm if shape[a] != 1]
        return moved == sorted(moved)
    return False
