"""Draw a bundle's graph as SVG (or HTML around the SVG), regions coloured by backend.

A layered layout with no dependency: each node sits on the row of its longest
path from an input, rows are centred, edges are straight lines. Every node has a
tooltip (``<title>``) naming its op, composite and region; a legend lists every
region with its backend and op count.
"""

from __future__ import annotations

import html
from collections import defaultdict

from aot.inspect.bundle_view import BundleView

COLORS = {"input": "#e8e8e8", "host": "#cfd8e3", "npu": "#f6b26b", "tensorrt": "#93c47d"}
EXTRA_COLORS = ["#8e7cc3", "#6fa8dc", "#e06666", "#ffd966", "#76a5af"]
BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN, LEGEND_W = 170, 34, 24, 30, 20, 260


def backend_color(backend: str, extra: dict[str, str]) -> str:
    if backend in COLORS:
        return COLORS[backend]
    return extra.setdefault(backend, EXTRA_COLORS[len(extra) % len(EXTRA_COLORS)])


def _layers(view: BundleView) -> list[int]:
    depth = [0] * len(view.nodes)
    for i, node in enumerate(view.nodes):  # nodes are in execution order: producers first
        depth[i] = max((depth[j] + 1 for j in node.inputs), default=0)
    return depth


def render_svg(view: BundleView) -> str:
    depth = _layers(view)
    rows: dict[int, list[int]] = defaultdict(list)
    for i, d in enumerate(depth):
        rows[d].append(i)
    widest = max((len(r) for r in rows.values()), default=1)
    graph_w = widest * (BOX_W + GAP_X)
    width = MARGIN * 2 + graph_w + LEGEND_W
    height = MARGIN * 2 + max(len(rows), 1) * (BOX_H + GAP_Y) + 40
    pos: dict[int, tuple[float, float]] = {}
    for d, members in rows.items():
        offset = MARGIN + (graph_w - len(members) * (BOX_W + GAP_X)) / 2
        for k, i in enumerate(members):
            pos[i] = (offset + k * (BOX_W + GAP_X), MARGIN + 40 + d * (BOX_H + GAP_Y))
    extra: dict[str, str] = {}
    title = html.escape(f"{view.header.get('model', {}).get('name', '')} — {view.path}")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{MARGIN}" y="{MARGIN + 12}" font-size="14" font-weight="bold">{title}</text>',
        '<g stroke="#888" stroke-width="1" fill="none">',
    ]
    for i, node in enumerate(view.nodes):
        x2, y2 = pos[i]
        for j in node.inputs:
            x1, y1 = pos[j]
            parts.append(
                f'<line x1="{x1 + BOX_W / 2:.0f}" y1="{y1 + BOX_H:.0f}" x2="{x2 + BOX_W / 2:.0f}" y2="{y2:.0f}"/>'
            )
    parts.append("</g>")
    for i, node in enumerate(view.nodes):
        x, y = pos[i]
        color = backend_color(node.backend, extra)
        where = f"region {node.region} ({node.backend}), composite {node.composite}" if node.region else node.backend
        tip = html.escape(f"{node.name}: {node.op} — {where}" + (" — graph output" if node.is_output else ""))
        label = html.escape(node.op if node.backend == "input" else f"{node.op}")
        sub = html.escape(node.region or node.name)
        stroke = ' stroke="#000" stroke-width="2"' if node.is_output else ' stroke="#555"'
        shape = 'rx="17"' if node.backend == "input" else 'rx="4"'
        parts.append(
            f'<g><title>{tip}</title><rect x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{BOX_H}" {shape} '
            f'fill="{color}"{stroke}/>'
            f'<text x="{x + BOX_W / 2:.0f}" y="{y + 14:.0f}" text-anchor="middle" font-weight="bold">{label}</text>'
            f'<text x="{x + BOX_W / 2:.0f}" y="{y + 27:.0f}" text-anchor="middle" fill="#333">{sub[:28]}</text></g>'
        )
    lx, ly = MARGIN + graph_w + 20, MARGIN + 40
    parts.append(f'<text x="{lx}" y="{ly}" font-weight="bold">Backends and regions</text>')
    counts = view.ops_by_backend()
    entries = [(b, f"{b}: {n} ops") for b, n in counts.items()]
    entries += [(r.backend, f"{r.id}: {len(r.ops)} ops on {r.backend}") for r in view.regions]
    for k, (backend, text) in enumerate(entries):
        y = ly + 14 + k * 18
        parts.append(
            f'<rect x="{lx}" y="{y}" width="12" height="12" fill="{backend_color(backend, extra)}" stroke="#555"/>'
            f'<text x="{lx + 18}" y="{y + 10}">{html.escape(text)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def render_html(view: BundleView, summary: str) -> str:
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(view.path)}</title>"
        "<style>body{font-family:sans-serif;margin:20px} pre{background:#f6f6f6;padding:10px}</style>"
        f"</head><body><h1>{html.escape(view.path)}</h1><pre>{html.escape(summary)}</pre>\n"
        f"{render_svg(view)}\n</body></html>\n"
    )
