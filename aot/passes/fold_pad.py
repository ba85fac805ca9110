"""Fold a constant zero pad of the spatial axes into the convolution (or average pool) that reads it.

    pad(x, spatial pads p, mode constant, value 0) -> conv(., W, b, pads q)   ==>  conv(x, W, b, pads q + p)
    pad(x, ...)  -> avg_pool(., pads q, count_include_pad 1, ceil_mode 0)     ==>  avg_pool(x, pads q + p)

A convolution's own padding is zeros around the spatial axes, so a zero pad before it
is the same padding written as a separate op: ``F.pad`` before a ``padding=0`` conv
(torchcrepe pads 31/32 along time before each of its six convolutions), or an
exporter's explicit ``Pad`` for asymmetric "same" padding. Folded, the NPU (which has
no pad pattern) keeps the whole chain in one region, and the padded copy is never made.

Both frontends lower their pads to the canonical ``pad`` op with ``pads`` as an
attribute (ONNX ``Pad`` from the ``pads`` attribute before opset 11, the ``pads`` and
``axes`` inputs since; torch's ``constant_pad_nd`` / ``F.pad``), so one rule covers both.

Left alone: another mode (reflect, edge, wrap), a non-zero value, a negative pad (a
crop), a pad on the batch or channel axis, and every pool but the average pool that
counts padding: max pooling pads with -inf, so a zero pad can change a window's max; an
average pool that does not count padding divides an edge window by fewer taps; with
``ceil_mode`` a last window can reach past the padding, where the count differs again.
The folded pool's pads stay under its kernel (onnxruntime refuses wider ones).

Each reader that can absorb the pad reads ``x`` directly; the pad stays while anything
else reads it (another op, a graph output) and is dropped once nothing does.
"""

from __future__ import annotations

from aot.ir.graph import Graph, Node, Value
from aot.ir.ops import AVG_POOL_OPS, CONV_OPS


def zero_spatial_pads(node: Node) -> list[int] | None:
    """The pads of ``node``'s spatial axes (begins, then ends) if it is a foldable zero pad, else None."""
    if node.op != "pad" or node.attrs["mode"] != "constant" or float(node.attrs["value"]) != 0.0:
        return None
    pads = [int(p) for p in node.attrs["pads"]]
    rank = len(pads) // 2
    if rank < 3 or any(p < 0 for p in pads) or any(pads[i] or pads[i + rank] for i in (0, 1)):
        return None
    return pads[2:rank] + pads[rank + 2 :]


def _absorbed_pads(reader: Node, padded: Value, spatial: list[int]) -> list[int] | None:
    """``reader``'s pads with ``spatial`` added, if it reads ``padded`` as its data only and can absorb it."""
    if not reader.inputs or reader.inputs[0] is not padded or any(v is padded for v in reader.inputs[1:]):
        return None
    nd = len(spatial) // 2
    if reader.op not in CONV_OPS + AVG_POOL_OPS or reader.op[-2:] != f"{nd}d":
        return None
    pads = [int(q) + p for q, p in zip(reader.attrs["pads"], spatial)]
    if reader.op in AVG_POOL_OPS:
        a = reader.attrs
        if a["count_include_pad"] != 1 or a["ceil_mode"] != 0:
            return None
        if any(pads[i] >= a["kernel_shape"][i] or pads[i + nd] >= a["kernel_shape"][i] for i in range(nd)):
            return None
    return pads


def fold_pads(graph: Graph) -> int:
    """Fold every foldable pad into the convolutions and average pools that read it; return how many pads
    are gone (a pad still read elsewhere stays, its foldable readers rewired all the same)."""
    users = graph.consumers()
    outputs = {id(v) for v in graph.outputs}
    removed: set[int] = set()
    for node in graph.nodes:
        spatial = zero_spatial_pads(node)
        if spatial is None:
            continue
        padded, source = node.outputs[0], node.inputs[0]
        readers = users.get(padded, [])
        kept = []
        for reader in readers:
            pads = _absorbed_pads(reader, padded, spatial)
            if pads is None:
                kept.append(reader)
                continue
            reader.inputs = [source, *reader.inputs[1:]]
            reader.attrs = {**reader.attrs, "pads": pads}
            users.setdefault(source, []).append(reader)
        users[padded] = kept
        if not kept and id(padded) not in outputs and len(kept) != len(readers):
            removed.add(id(node))
    graph.nodes = [n for n in graph.nodes if id(n) not in removed]
    return len(removed)
