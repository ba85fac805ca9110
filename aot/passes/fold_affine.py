"""Fold per-channel affine maps into the op that produces their input.

    conv(x, W, b) -> batch_norm(s, t, m, v)   ==>  conv(x, W * k, (b - m) * k + t),  k = s / sqrt(v + eps)
    conv(x, W, b) -> multiply(c)              ==>  conv(x, W * c, b * c)
    conv(x, W, b) -> add(c)                   ==>  conv(x, W, b + c)
    batch_norm    -> multiply(c) / add(c)     ==>  one batch_norm with adjusted scale and shift

``c`` is a constant with one value per channel (axis 1). Caffe-converted models
(Inception v2, DenseNet) write batch norm as batch_norm -> multiply -> add, so
after this pass each of those chains is a single op or disappears into a conv.
A fold applies only when the first op's result has no other user.
"""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Graph, Node, Value
from aot.ir.ops import CONV_OPS


def _channel_vector(value: Value, channels: int, rank: int) -> np.ndarray | None:
    """The per-channel values of a constant that broadcasts along axis 1 only, else None."""
    if not value.is_constant or value.data.ndim > rank:
        return None
    data = value.data
    shape = (1,) * (rank - data.ndim) + data.shape
    if shape[0] != 1 or any(d != 1 for d in shape[2:]) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(data.reshape(-1), (channels,)).astype(np.float64)


def _batch_norm_affine(node: Node) -> tuple[np.ndarray, np.ndarray] | None:
    if not all(v.is_constant for v in node.inputs[1:]):
        return None
    scale, bias, mean, var = (v.data.astype(np.float64) for v in node.inputs[1:])
    k = scale / np.sqrt(var + node.attrs["epsilon"])
    return k, bias - mean * k


def _follower_affine(node: Node, producer: Node, channels: int, rank: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) that ``node`` applies per channel to its first input, if it is such a map."""
    if node.op == "batch_norm" and producer.op in CONV_OPS:
        return _batch_norm_affine(node)
    if node.op in ("multiply", "add"):
        vector = _channel_vector(node.inputs[1], channels, rank)
        if vector is None:
            return None
        return (vector, np.zeros(channels)) if node.op == "multiply" else (np.ones(channels), vector)
    return None


def _channels(node: Node) -> int | None:
    if node.op in CONV_OPS and node.inputs[1].is_constant and all(v.is_constant for v in node.inputs[2:]):
        return node.inputs[1].data.shape[0]
    if node.op == "batch_norm" and _batch_norm_affine(node) is not None:
        return node.inputs[1].data.shape[0]
    return None


def _absorb(graph: Graph, node: Node, scale: np.ndarray, shift: np.ndarray) -> None:
    """Rewrite ``node``'s constants so its output is followed by ``x * scale + shift``."""
    if node.op in CONV_OPS:
        w = node.inputs[1].data
        b = node.inputs[2].data.astype(np.float64) if len(node.inputs) > 2 else np.zeros(w.shape[0])
        new_w = (w.astype(np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        new_b = (b * scale + shift).astype(w.dtype)
        node.inputs = [node.inputs[0], graph.constant(new_w, f"{node.name}_w"), graph.constant(new_b, f"{node.name}_b")]
        return
    k, t = _batch_norm_affine(node)
    dtype = node.inputs[1].data.dtype
    eps = node.attrs["epsilon"]
    # Same map with mean 0 and var 1 - eps, so sqrt(var + eps) = 1 and scale, bias are used as is.
    params = [k * scale, t * scale + shift, np.zeros_like(k), np.full_like(k, 1.0 - eps)]
    node.inputs = [node.inputs[0]] + [
        graph.constant(p.astype(dtype), f"{node.name}_{n}") for p, n in zip(params, "sbmv")
    ]


def fold_affine(graph: Graph) -> int:
    """Fold every foldable chain in one sweep; return how many ops were folded away."""
    users = graph.consumers()
    outputs = {id(v) for v in graph.outputs}
    removed: set[int] = set()
    for node in graph.nodes:
        if id(node) in removed:
            continue
        while (channels := _channels(node)) is not None:
            out = node.outputs[0]
            following = users.get(out, [])
            if len(following) != 1 or id(out) in outputs or following[0].inputs[0] is not out:
                break
            nxt = following[0]
            factors = _follower_affine(nxt, node, channels, out.type.rank)
            if factors is None:
                break
            _absorb(graph, node, *factors)
            gone = nxt.outputs[0]
            graph.replace_uses(gone, out, users.get(gone, []))
            users[out] = users.pop(gone, [])
            if id(gone) in outputs:
                outputs.add(id(out))
            removed.add(id(nxt))
    graph.nodes = [n for n in graph.nodes if id(n) not in removed]
    return len(removed)
