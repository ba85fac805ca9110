"""Print a partitioned graph the way TVM's tutorial shows a partitioned module.

    graph main(%data: float32[1,3,32,32], %weight: float32[16,3,3,3]) -> (%out: float32[1,16,30,30])
      region npu_0 {Codegen="npu"} (%data, %weight) -> (%out)
        composite npu.conv2d_relu_fused (%data, %weight) -> (%out)
          %conv = conv2d(%data, %weight) {...} : float32[1,16,30,30]
          %out = relu(%conv) : float32[1,16,30,30]
      return %out

Host nodes print as in ``aot.ir.printer``; a region prints where its first node was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aot.ir.printer import format_node, format_value

if TYPE_CHECKING:
    from aot.compiler.partition import PartitionedGraph


def _values(values) -> str:
    return ", ".join(format_value(v) for v in values)


def format_partitioned(pg: PartitionedGraph) -> str:
    params = ", ".join(f"%{v.name}: {v.type}" for v in pg.inputs)
    results = ", ".join(f"{format_value(v)}: {v.type}" for v in pg.outputs)
    lines = [f"graph {pg.graph.name}({params}) -> ({results})"]
    regions = pg.region_of()
    composites = pg.composite_of()
    printed: set[int] = set()
    refusals = pg.refusals
    for node in pg.nodes:
        region = regions.get(id(node))
        composite = composites.get(id(node))
        if region is not None:
            if id(region) in printed:
                continue
            printed.add(id(region))
            lines.append(
                f'  region {region.id} {{Codegen="{region.backend}"}} '
                f"({_values(region.inputs)}) -> ({_values(region.outputs)})"
            )
            for c in region.composites:
                lines.append(f"    composite {c.name} ({_values(c.inputs)}) -> ({_values(c.outputs)})")
                lines.extend("      " + format_node(n) for n in c.nodes)
        elif composite is not None:  # fused but not (yet) in a region
            if id(composite) in printed:
                continue
            printed.add(id(composite))
            lines.append(
                f"  composite {composite.name} ({_values(composite.inputs)}) -> ({_values(composite.outputs)})"
            )
            lines.extend("    " + format_node(n) for n in composite.nodes)
        else:
            lines.append("  " + format_node(node))
            lines.extend(f"    # stays on the host: {reason}" for reason in refusals.get(id(node), ()))
    lines.append("  return " + _values(pg.outputs))
    return "\n".join(lines)
