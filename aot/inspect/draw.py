"""Draw a bundle's graph as SVG: a layered layout by Graphviz ``dot``, a box around every region.

Why Graphviz. The drawing needs a real layered (Sugiyama) layout: ranks, crossing
minimisation, spline routing of edges that skip ranks (residual adds, concats), and
boxes around clusters, which here are the partitioned regions. ``dot`` is the
reference implementation of all four, maintained for three decades and packaged
everywhere (Debian/Ubuntu ``apt-get install graphviz``, ``brew install graphviz``,
``conda install graphviz``). The pure-Python alternative (grandalf) has no clusters
and is barely maintained, and JavaScript layouts (elkjs, dagre) would only help the
HTML page, not the SVG file, and would have to be inlined (about 1.5 MB for elkjs)
to work offline. So aot needs no Python package for drawing: it runs the ``dot``
program (``dot -Tjson0``), reads back positions, spline control points and cluster
boxes, and writes the SVG itself (tooltips, colours, legend, ``data-`` attributes
for the HTML viewer in :mod:`aot.inspect.html_view`). The runtime never draws.

Without ``dot`` on ``PATH`` (or ``AOT_DOT`` naming it) a drawing fails with one
line (an :class:`~aot.errors.AotError`) saying what to install; ``--graph FILE.onnx``
(Netron) and the text summary need no Graphviz.

Readability at hundreds of nodes:

- nodes are small boxes labelled with their op; the name, composite and region are
  in each node's tooltip (``<title>``);
- every region is a cluster box, filled with its own shade of its backend's colour
  (neighbouring regions of one backend differ; a backend with more regions than
  shades reuses them in turn) and listed in the legend;
- a deep graph (DenseNet-121 is ~400 ranks) is folded into side-by-side columns:
  dot lays the whole graph out once to measure it, the graph is cut at execution-order
  boundaries where the fewest values stay live (a block boundary of a ResNet or a
  DenseNet passes one tensor), chosen near evenly spaced heights, and every column is
  laid out by dot on its own. A value used across a cut ends at a connector ("A → 2":
  continues in column 2) and comes back from a matching one ("A ← 1"). ``columns=1``
  draws one column;
- ``collapse_regions=True`` draws each region as one box, laid out as such.
"""

from __future__ import annotations

import colorsys
import html
import json
import os
import shutil
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from aot.errors import AotError
from aot.inspect.bundle_view import BundleView

COLORS = {"input": "#e8e8e8", "host": "#cfd8e3", "npu": "#f6b26b", "tensorrt": "#93c47d"}
EXTRA_COLORS = ["#8e7cc3", "#6fa8dc", "#e06666", "#ffd966", "#76a5af"]
GOLDEN_ANGLE = 137.508 / 360  # successive regions' hues: each as far from the last ones as a circle allows
REGION_LIGHTNESS = (0.7, 0.58, 0.8, 0.64)  # in turn: regions 1-3 apart differ in lightness too
INSTALL_HINT = (
    "install Graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz; "
    "conda install graphviz), or write --graph FILE.onnx and open it in Netron"
)
NODE_H, REGION_H, PORT_H = 22, 36, 20  # px; one Graphviz point is drawn as one px
MARGIN, TITLE_H, COLUMN_GAP, LEGEND_W, LEGEND_ROW = 16, 30, 36, 250, 17
COLUMN_HEADER_H = 14  # the "column N" headers sit between the title and the graph, never over the title
TARGET_RATIO = 1.2  # fold a deep graph into columns until the drawing is about this much taller than wide
MAX_LIVE_AT_CUT = 3  # never cut where more values than this stay live
DOT_TIMEOUT_S = 300


def backend_color(backend: str, extra: dict[str, str]) -> str:
    if backend in COLORS:
        return COLORS[backend]
    return extra.setdefault(backend, EXTRA_COLORS[len(extra) % len(EXTRA_COLORS)])


def region_color(backend_color: str, k: int) -> str:
    """The ``k``-th region's colour: the backend's own for the first, then hues a golden angle apart.

    Shades of one backend colour were near identical past a handful of regions (48 NPU regions in 48 oranges);
    the backend stays visible in each region's border, which keeps the backend's colour.
    """
    if k == 0:
        return backend_color
    r, g, b = (int(backend_color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    hue, _, _ = colorsys.rgb_to_hls(r, g, b)
    r, g, b = colorsys.hls_to_rgb((hue + k * GOLDEN_ANGLE) % 1.0, REGION_LIGHTNESS[k % len(REGION_LIGHTNESS)], 0.62)
    return "#" + "".join(f"{round(c * 255):02x}" for c in (r, g, b))


@dataclass
class Palette:
    """A colour per backend and a shade of it per region, in the order regions appear."""

    backends: dict[str, str]
    regions: dict[str, str]

    @classmethod
    def of(cls, view: BundleView) -> Palette:
        extra: dict[str, str] = {}
        backends = {b: backend_color(b, extra) for b in ["input", "host", *(r.backend for r in view.regions)]}
        seen: Counter[str] = Counter()
        regions = {}
        for r in view.regions:
            regions[r.id] = region_color(backends[r.backend], seen[r.backend])
            seen[r.backend] += 1
        return cls(backends, regions)

    def fill(self, backend: str, region: str | None) -> str:
        return self.regions[region] if region in self.regions else self.backends.get(backend, "#cccccc")


def _label_width(text: str, px_per_char: float = 6.6) -> float:
    return max(48.0, round(len(text) * px_per_char + 14))


@dataclass
class _Unit:
    """One box to lay out: an op, an input, or (collapsed) a whole region."""

    label: str
    title: str
    fill: str
    kind: str  # "input", "op" or "region"
    region: str | None
    inputs: list[int]
    is_output: bool = False
    sublabel: str = ""


@dataclass
class Box:
    key: str
    x: float  # centre, px, y downwards
    y: float
    w: float
    h: float


@dataclass
class Cluster:
    region: str
    x: float  # top-left
    y: float
    w: float
    h: float
    label: str = ""
    part: int = 0  # which piece of a region split across columns
    parts: int = 1


@dataclass
class Edge:
    tail: str
    head: str
    d: str  # SVG path, ends where the arrowhead points


@dataclass
class Layout:
    width: float
    height: float
    boxes: dict[str, Box] = field(default_factory=dict)
    clusters: list[Cluster] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    columns: list[tuple[float, float]] = field(default_factory=list)  # (x, width) of each column


def dot_executable() -> str:
    """The ``dot`` program to run: ``$AOT_DOT`` or ``dot`` on PATH; an AotError naming what to install if none."""
    named = os.environ.get("AOT_DOT")
    found = shutil.which(named or "dot")
    if found is None:
        where = f"AOT_DOT={named!r} is not an executable" if named else "Graphviz's 'dot' is not on PATH"
        raise AotError(f"drawing the graph needs Graphviz: {where}; {INSTALL_HINT}")
    return found


def _dot(exe: str, source: str) -> dict:
    """One graph laid out by one ``dot`` process (several graphs in one process do not lay out repeatably)."""
    try:
        done = subprocess.run([exe, "-q", "-Tjson0"], input=source, capture_output=True, text=True,
                              timeout=DOT_TIMEOUT_S, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise AotError(f"Graphviz dot took more than {DOT_TIMEOUT_S} s to lay out the graph") from None
    except OSError as e:
        raise AotError(f"cannot run Graphviz dot ({exe}): {e.strerror or e}; {INSTALL_HINT}") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise AotError(f"Graphviz dot failed to lay out the graph: {why}")
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise AotError(f"Graphviz dot ({exe}) wrote no JSON layout; -Tjson0 needs Graphviz 2.40 or newer") from None


def _run_dot(sources: list[str]) -> list[dict]:
    """Lay out every graph in ``sources``, two ``dot`` processes at a time; the JSON of each."""
    exe = dot_executable()
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda source: _dot(exe, source), sources))


def _units(view: BundleView, palette: Palette, collapse_regions: bool) -> list[_Unit]:
    units: list[_Unit] = []
    unit_of: dict[int, int] = {}
    by_region = {r.id: r for r in view.regions}
    for i, node in enumerate(view.nodes):
        if collapse_regions and node.region is not None:
            if not units or units[-1].kind != "region" or units[-1].region != node.region:
                ops = by_region[node.region].ops if node.region in by_region else []
                listed = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in Counter(ops).most_common())
                title = f"region {node.region} on {node.backend}: {len(ops)} ops — {listed}"
                fill = palette.fill(node.backend, node.region)
                units.append(_Unit(node.region, title, fill, "region", node.region, [],
                                   sublabel=f"{len(ops)} ops on {node.backend}"))  # fmt: skip
            u = len(units) - 1
            unit_of[i] = u
            units[u].is_output |= node.is_output
            units[u].inputs.extend(unit_of[j] for j in node.inputs if unit_of[j] not in (u, *units[u].inputs))
            continue
        where = f"region {node.region} ({node.backend}), composite {node.composite}" if node.region else node.backend
        title = f"{node.name}: {node.op} — {where}" + (" — graph output" if node.is_output else "")
        unit_of[i] = len(units)
        kind = "input" if node.backend == "input" else "op"
        inputs = list(dict.fromkeys(unit_of[j] for j in node.inputs))
        units.append(_Unit(node.name if kind == "input" else node.op, title, palette.fill(node.backend, node.region),
                           kind, node.region, inputs, node.is_output))  # fmt: skip
    return units


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dot_source(name: str, units: list[_Unit], members: list[int],
                ports: list[tuple[str, str, list[str], list[str]]]) -> str:  # fmt: skip
    """One graph for dot: the units ``members`` (indices), regions as clusters, plus connector ``ports``
    given as (key, label, sources, targets)."""
    inside = set(members)
    lines = [
        f"digraph {_q(name)} {{",
        "graph [rankdir=TB, nodesep=0.14, ranksep=0.24, splines=true, fontsize=10, fontname=Helvetica];",
        'node [shape=box, fixedsize=true, label=""];',
    ]
    clusters: dict[str, list[int]] = {}
    for u in members:
        if units[u].region is not None and units[u].kind != "region":
            clusters.setdefault(units[u].region, []).append(u)
    for region, us in clusters.items():
        starts = next(u for u, unit in enumerate(units) if unit.region == region) == us[0]
        label = region if starts else f"{region} (cont.)"
        lines.append(f"subgraph {_q('cluster_' + region)} {{ label={_q(label)}; labeljust=l; margin=6; "
                     + " ".join(f"n{u};" for u in us) + " }")  # fmt: skip
    for u in members:
        unit = units[u]
        h = REGION_H if unit.kind == "region" else NODE_H
        w = max(_label_width(unit.label), _label_width(unit.sublabel, 6.0))
        lines.append(f"n{u} [width={w / 72:.3f}, height={h / 72:.3f}];")
    for key, label, _, _ in ports:
        lines.append(f"{key} [shape=ellipse, width={_label_width(label) / 72:.3f}, height={PORT_H / 72:.3f}];")
    for u in members:
        lines.extend(f"n{j} -> n{u};" for j in units[u].inputs if j in inside)
    for key, _, sources, targets in ports:
        lines.extend(f"{s} -> {key};" for s in sources)
        lines.extend(f"{key} -> {t};" for t in targets)
    lines.append("}")
    return "\n".join(lines)


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",")]


def _read_layout(graph: dict, dx: float, dy: float, layout: Layout, clusters: list[Cluster]) -> tuple[float, float]:
    """Add one dot graph's boxes, clusters and edges to ``layout``, shifted by (dx, dy); its width and height."""
    _, _, gw, gh = _floats(graph["bb"])
    objects = {o["_gvid"]: o for o in graph.get("objects", [])}
    for o in objects.values():
        if "nodes" in o and o["name"].startswith("cluster_"):
            x0, y0, x1, y1 = _floats(o["bb"])
            region = o["name"][len("cluster_") :]
            clusters.append(Cluster(region, dx + x0, dy + gh - y1, x1 - x0, y1 - y0, o.get("label", region)))
        elif "pos" in o:
            x, y = _floats(o["pos"])
            w, h = float(o["width"]) * 72, float(o["height"]) * 72
            layout.boxes[o["name"]] = Box(o["name"], dx + x, dy + gh - y, w, h)
    for e in graph.get("edges", []):
        end = None
        points = []
        for item in e["pos"].split():
            if item.startswith("e,"):
                end = _floats(item[2:])
            elif not item.startswith("s,"):
                points.append(_floats(item))
        if not points:
            continue

        def p(xy: list[float]) -> str:
            return f"{dx + xy[0]:.1f},{dy + gh - xy[1]:.1f}"

        d = f"M{p(points[0])}"
        for k in range(1, len(points) - 2, 3):
            d += f" C{p(points[k])} {p(points[k + 1])} {p(points[k + 2])}"
        if end is not None:
            d += f" L{p(end)}"
        layout.edges.append(Edge(objects[e["tail"]]["name"], objects[e["head"]]["name"], d))
    return gw, gh


def _live_at_boundaries(units: list[_Unit]) -> list[int]:
    """live[b]: how many values made before unit b are read at or after it."""
    last_use = list(range(len(units)))
    for v, unit in enumerate(units):
        for u in unit.inputs:
            last_use[u] = max(last_use[u], v)
    delta = [0] * (len(units) + 1)
    for u, last in enumerate(last_use):
        if last > u:
            delta[u + 1] += 1
            delta[last + 1] -= 1
    live, running = [], 0
    for b in range(len(units)):
        running += delta[b]
        live.append(running)
    return live


def _choose_cuts(units: list[_Unit], ys: list[float], height: float, columns: int) -> list[int]:
    """Boundaries (unit indices that start a new column) that fold a layout of this height into ``columns``."""
    n = len(units)
    columns = max(1, min(columns, n // 8 or 1))
    if columns == 1:
        return []
    live = _live_at_boundaries(units)
    cuts: list[int] = []
    window = height / columns / 3
    for k in range(1, columns):
        target = height * k / columns
        best = None
        for b in range(max(cuts[-1] + 4 if cuts else 1, 1), n - 3):
            y = (ys[b - 1] + ys[b]) / 2
            if abs(y - target) > window or live[b] > MAX_LIVE_AT_CUT:
                continue
            splits = units[b].region is not None and units[b].region == units[b - 1].region
            score = (live[b] + (0.5 if splits else 0.0), abs(y - target))
            if best is None or score < best[0]:
                best = (score, b)
        if best is not None:
            cuts.append(best[1])
    return cuts


def _letters(k: int) -> str:
    s = ""
    k += 1
    while k:
        k, r = divmod(k - 1, 26)
        s = chr(65 + r) + s
    return s


def layout_view(view: BundleView, *, collapse_regions: bool = False, columns: int | None = None,
                palette: Palette | None = None,
                max_width: float | None = None) -> tuple[Layout, list[_Unit], dict[str, tuple[str, str, str]]]:  # fmt: skip
    """Lay the view out with dot: the layout, the units it places (key ``n{i}``) and the connectors
    (key -> (label, tooltip, link id)).

    ``columns=None`` folds a tall graph into as many columns as bring the drawing near ``TARGET_RATIO``:
    a first guess from the one-column layout, corrected (at most twice) from the folded layout measured.
    ``max_width`` (px) caps the columns where a page is read at its width, scrolling down (the HTML view):
    fewer, longer columns at a readable scale instead of a square drawing shrunk to fit.
    """
    palette = palette or Palette.of(view)
    units = _units(view, palette, collapse_regions)
    single, _ = _lay_out(units, [])
    height, width = single.height, single.width
    if columns == 1 or (columns is None and (height <= 1.5 * TARGET_RATIO * width or len(units) < 40)):
        return single, units, {}
    ys = [single.boxes[f"n{u}"].y for u in range(len(units))]
    n = columns or max(2, round((height / (width * TARGET_RATIO)) ** 0.5))
    if columns is None and max_width is not None:
        n = min(n, max(1, int((max_width + COLUMN_GAP) // (width + COLUMN_GAP))))
        if n == 1:
            return single, units, {}
    best: tuple[Layout, dict[str, tuple[str, str, str]]] = (single, {})
    for _ in range(3):
        cuts = _choose_cuts(units, ys, height, n)
        if not cuts:
            break
        best = _lay_out(units, cuts)
        if columns is not None:
            break
        if max_width is not None and best[0].width > max_width and n > 2:
            n -= 1
            continue
        ratio = best[0].height / best[0].width
        if 1 / 1.5 < ratio / TARGET_RATIO < 1.5:
            break
        again = max(1, round(n * (ratio / TARGET_RATIO) ** 0.5))
        if max_width is not None:
            again = min(again, n)
        if again == n:
            break
        n = again
    return best[0], units, best[1]


def _lay_out(units: list[_Unit], cuts: list[int]) -> tuple[Layout, dict[str, tuple[str, str, str]]]:
    """One dot graph per column (units ``cuts[c-1]:cuts[c]``), placed side by side; the layout and its connectors."""
    bounds = [0, *cuts, len(units)]
    column_of = [0] * len(units)
    for c in range(len(bounds) - 1):
        for u in range(bounds[c], bounds[c + 1]):
            column_of[u] = c
    per_column: list[list[tuple[str, str, list[str], list[str]]]] = [[] for _ in bounds[1:]]
    crossing: dict[int, dict[int, list[int]]] = {}  # producer -> later column -> consumers there
    for v, unit in enumerate(units):
        for u in unit.inputs:
            if column_of[u] != column_of[v]:
                crossing.setdefault(u, {}).setdefault(column_of[v], []).append(v)
    ports: dict[str, tuple[str, str, str]] = {}
    for k, (u, targets) in enumerate(sorted(crossing.items())):
        link, made = _letters(k), units[u]
        what = made.title.split(": ")[0] if made.kind != "region" else f"region {made.region}"
        cols = ", ".join(str(c + 1) for c in targets)
        label = f"{link} → {cols}"
        per_column[column_of[u]].append((f"o{u}", label, [f"n{u}"], []))
        ports[f"o{u}"] = (label, f"{link}: {what} ({made.label}) continues in column {cols}", link)
        for c, consumers in targets.items():
            label = f"{link} ← {column_of[u] + 1}"
            per_column[c].append((f"i{u}_{c}", label, [], [f"n{v}" for v in consumers]))
            ports[f"i{u}_{c}"] = (label, f"{link}: {what} ({made.label}) from column {column_of[u] + 1}", link)
    sources = [_dot_source(f"column{c + 1}", units, list(range(bounds[c], bounds[c + 1])), per_column[c])
               for c in range(len(per_column))]  # fmt: skip
    layout = Layout(0, 0)
    x = 0.0
    for graph in _run_dot(sources):
        w, h = _read_layout(graph, x, 0, layout, layout.clusters)
        layout.columns.append((x, w))
        layout.height = max(layout.height, h)
        x += w + COLUMN_GAP
    layout.width = x - COLUMN_GAP
    pieces = Counter(c.region for c in layout.clusters)
    seen: Counter[str] = Counter()
    for c in layout.clusters:
        c.part, c.parts = seen[c.region], pieces[c.region]
        seen[c.region] += 1
    return layout, ports


def _attr(text: str) -> str:
    return html.escape(text, quote=True)


def render_svg(view: BundleView, *, collapse_regions: bool = False, columns: int | None = None,
               legend: bool = True, max_width: float | None = None) -> str:  # fmt: skip
    """The graph as a standalone SVG document; ``legend=False`` leaves the legend out (the HTML page has its own);
    ``max_width``: see :func:`layout_view`."""
    palette = Palette.of(view)
    layout, units, ports = layout_view(
        view, collapse_regions=collapse_regions, columns=columns, palette=palette, max_width=max_width
    )
    gx, gy = MARGIN, MARGIN + TITLE_H + (COLUMN_HEADER_H if len(layout.columns) > 1 else 0)
    legend_rows = legend_entries(view, palette) if legend else []
    width = gx + layout.width + MARGIN + (LEGEND_W if legend else 0)
    height = max(gy + layout.height + MARGIN, gy + 24 + LEGEND_ROW * len(legend_rows) + MARGIN)
    by_region = {r.id: r for r in view.regions}
    title = f"{view.header.get('model', {}).get('name', '')} — {view.path}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="aot-graph" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="Helvetica, Arial, sans-serif" font-size="11">',
        '<defs><marker id="aot-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#666"/></marker></defs>',
        f'<text x="{MARGIN}" y="{MARGIN + 14}" font-size="14" font-weight="bold">{html.escape(title)}</text>',
        f'<g class="graph" transform="translate({gx},{gy})">',
    ]
    if len(layout.columns) > 1:
        parts.append('<g class="columns" fill="#999" font-size="10">')
        for c, (x, w) in enumerate(layout.columns):
            if c:
                parts.append(f'<line x1="{x - COLUMN_GAP / 2:.0f}" y1="0" x2="{x - COLUMN_GAP / 2:.0f}" '
                             f'y2="{layout.height:.0f}" stroke="#ddd" stroke-dasharray="4 4"/>')  # fmt: skip
            parts.append(f'<text x="{x + w / 2:.0f}" y="-6" text-anchor="middle">column {c + 1}</text>')
        parts.append("</g>")
    parts.append('<g class="clusters">')
    for c in layout.clusters:
        r = by_region.get(c.region)
        backend = r.backend if r else "?"
        piece = f" (part {c.part + 1} of {c.parts})" if c.parts > 1 else ""
        color = palette.regions.get(c.region, "#cccccc")
        border = palette.backends.get(backend, "#555555")  # the backend's colour: which backend, at a glance
        label = f"{c.region} · {len(r.ops) if r else 0} ops on {backend}{piece}"
        parts.append(
            f'<g class="cluster" data-region="{_attr(c.region)}"><title>{html.escape(label)}</title>'
            f'<rect x="{c.x:.1f}" y="{c.y:.1f}" width="{c.w:.1f}" height="{c.h:.1f}" rx="6" fill="{color}" '
            f'fill-opacity="0.3" stroke="{border}" stroke-width="2.5"/></g>'
        )
    parts.append('</g><g class="edges" fill="none" stroke="#777" stroke-width="1.1">')
    for e in layout.edges:
        dashed = ' stroke-dasharray="3 3"' if e.tail in ports or e.head in ports else ""
        parts.append(f'<path d="{e.d}" marker-end="url(#aot-arrow)" data-from="{e.tail}" data-to="{e.head}"{dashed}/>')
    # Region labels over the edges (an edge leaving a region crosses its top-left corner), haloed.
    parts.append('</g><g class="cluster-labels" pointer-events="none" font-size="10" font-weight="bold" fill="#333" '
                 'stroke="#fff" stroke-width="3" stroke-linejoin="round" paint-order="stroke">')  # fmt: skip
    for c in layout.clusters:
        parts.append(f'<text class="cluster-label" data-region="{_attr(c.region)}" x="{c.x + 6:.1f}" '
                     f'y="{c.y + 12:.1f}">{html.escape(c.label)}</text>')  # fmt: skip
    parts.append('</g><g class="nodes">')
    for u, unit in enumerate(units):
        b = layout.boxes[f"n{u}"]
        x, y = b.x - b.w / 2, b.y - b.h / 2
        stroke = 'stroke="#000" stroke-width="2"' if unit.is_output else 'stroke="#555" stroke-width="0.8"'
        rx = b.h / 2 if unit.kind == "input" else 3
        region = f' data-region="{_attr(unit.region)}"' if unit.region else ""
        text_y = b.y + 4 if not unit.sublabel else b.y - 2
        bold = ' font-weight="bold"' if unit.kind == "region" else ""
        sub = (f'<text x="{b.x:.1f}" y="{b.y + 11:.1f}" text-anchor="middle" font-size="10" fill="#333">'
               f"{html.escape(unit.sublabel)}</text>") if unit.sublabel else ""  # fmt: skip
        parts.append(
            f'<g class="node {unit.kind}" id="n{u}"{region}><title>{html.escape(unit.title)}</title>'
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{b.w:.1f}" height="{b.h:.1f}" rx="{rx:.0f}" fill="{unit.fill}" '
            f"{stroke}/>"
            f'<text x="{b.x:.1f}" y="{text_y:.1f}" text-anchor="middle"'
            f"{bold}>{html.escape(unit.label)}</text>{sub}</g>"
        )
    for key, (label, tip, link) in ports.items():
        b = layout.boxes[key]
        parts.append(
            f'<g class="port" id="{key}" data-link="{link}"><title>{html.escape(tip)}</title>'
            f'<rect x="{b.x - b.w / 2:.1f}" y="{b.y - b.h / 2:.1f}" width="{b.w:.1f}" height="{b.h:.1f}" '
            f'rx="{b.h / 2:.0f}" fill="#fff" stroke="#777" stroke-dasharray="3 2"/>'
            f'<text x="{b.x:.1f}" y="{b.y + 4:.1f}" text-anchor="middle" fill="#444">{html.escape(label)}</text></g>'
        )
    parts.append('</g><g class="covers">')
    for c in layout.clusters:  # the HTML viewer shows one to collapse a region into a single box
        r = by_region.get(c.region)
        color = palette.regions.get(c.region, "#cccccc")
        text = f"{c.region}: {len(r.ops) if r else 0} ops on {r.backend if r else '?'}"
        middle = c.y + min(c.h / 2, 40)
        parts.append(
            f'<g class="cover" data-region="{_attr(c.region)}" display="none"><title>{html.escape(text)}</title>'
            f'<rect x="{c.x:.1f}" y="{c.y:.1f}" width="{c.w:.1f}" height="{c.h:.1f}" rx="6" fill="{color}" '
            f'stroke="#555" stroke-width="1.5"/><text x="{c.x + c.w / 2:.1f}" y="{middle:.1f}" text-anchor="middle" '
            f'font-weight="bold">{html.escape(c.region)}</text><text x="{c.x + c.w / 2:.1f}" y="{middle + 13:.1f}" '
            f'text-anchor="middle" font-size="10">{len(r.ops) if r else 0} ops on {html.escape(r.backend if r else "?")}'
            "</text></g>"
        )
    parts.append("</g></g>")
    if legend:
        lx, ly = gx + layout.width + 24, gy
        parts.append(f'<g class="legend"><text x="{lx}" y="{ly + 10}" font-weight="bold">Backends and regions</text>')
        for k, (color, text, _) in enumerate(legend_rows):
            y = ly + 20 + k * LEGEND_ROW
            parts.append(
                f'<rect x="{lx}" y="{y}" width="12" height="12" fill="{color}" stroke="#555"/>'
                f'<text x="{lx + 18}" y="{y + 10}">{html.escape(text)}</text>'
            )
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)


def legend_entries(view: BundleView, palette: Palette) -> list[tuple[str, str, str | None]]:
    """(colour, text, region id or None) for every backend with its op count, then every region."""
    rows: list[tuple[str, str, str | None]] = [
        (palette.backends[b], f"{b}: {n} ops", None) for b, n in view.ops_by_backend().items()
    ]
    rows += [(palette.regions[r.id], f"{r.id}: {len(r.ops)} ops on {r.backend}", r.id) for r in view.regions]
    return rows
