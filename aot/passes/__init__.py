"""Graph-to-graph passes and the default optimisation pipeline."""

from __future__ import annotations

from aot.ir.graph import Graph
from aot.passes.constant_folding import fold_constants
from aot.passes.dead_code import eliminate_dead_code
from aot.passes.fold_affine import fold_affine
from aot.passes.fold_pad import fold_pads
from aot.passes.idioms import recognize_idioms
from aot.passes.shape_inference import infer_shapes


def optimize(graph: Graph) -> dict[str, int]:
    """The default pipeline; returns how much each pass changed, for the build summary."""
    stats = {"folded_constants": fold_constants(graph)}
    stats["recognized_idioms"] = sum(recognize_idioms(graph).values())
    stats["folded_pads"] = fold_pads(graph)
    stats["folded_affine"] = fold_affine(graph)
    stats["dead_nodes"] = eliminate_dead_code(graph)
    infer_shapes(graph)
    return stats


__all__ = [
    "eliminate_dead_code",
    "fold_affine",
    "fold_constants",
    "fold_pads",
    "infer_shapes",
    "optimize",
    "recognize_idioms",
]
