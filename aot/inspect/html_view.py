"""The HTML page ``aot-inspect --graph FILE.html`` writes: the SVG drawing with pan, zoom and collapsible regions.

One self-contained file: the SVG from :func:`aot.inspect.draw.render_svg`, a side panel
(legend, summary) and about a hundred lines of plain inline JavaScript; no network, no
library. Drag to pan, wheel (or ``+``/``-``) to zoom, ``0`` fits the graph; clicking a
region's box collapses it into one box and clicking that box expands it again; the
legend zooms to a region; a connector between columns jumps to its partner.
The page's address can say how to open it: ``#zoom=1`` (100 %, top left instead of
the whole graph), ``#collapse=all`` or ``#collapse=npu_0,npu_3``, ``#find=conv2d``.
"""

from __future__ import annotations

import html

from aot.inspect.bundle_view import BundleView
from aot.inspect.draw import Palette, legend_entries, render_svg

STYLE = """
html,body{margin:0;height:100%;font-family:Helvetica,Arial,sans-serif;font-size:13px}
body{display:flex;flex-direction:column}
header{padding:6px 10px;border-bottom:1px solid #ccc;display:flex;gap:6px;align-items:center;flex-wrap:wrap}
header h1{font-size:15px;margin:0 12px 0 0}
main{flex:1;display:flex;min-height:0}
#view{flex:1;overflow:auto;background:#fff;touch-action:none;cursor:grab}
#view.dragging{cursor:grabbing}
aside{width:320px;overflow:auto;border-left:1px solid #ccc;padding:8px 10px;background:#fafafa}
aside h2{font-size:13px;margin:10px 0 4px}
pre{font-size:11px;white-space:pre-wrap;background:#f0f0f0;padding:6px}
#legend{list-style:none;padding:0;margin:0}
#legend li{display:flex;align-items:center;gap:6px;padding:1px 0}
#legend .sw{width:12px;height:12px;border:1px solid #555;flex:none}
#legend a{flex:1;color:#000;text-decoration:none}
#legend a:hover{text-decoration:underline}
#legend li.collapsed a{font-style:italic}
#legend button{font-size:11px;padding:0 4px}
.cluster,.cover,.port{cursor:pointer}
.node.hit rect{stroke:#d00;stroke-width:3}
.help{color:#555;font-size:12px}
"""

SCRIPT = r"""
(function () {
  "use strict";
  var view = document.getElementById("view"), NS = "http://www.w3.org/2000/svg";
  function prepare(el, panId) {  // one drawing: its pan group, its size, its own zoom
    var g = document.createElementNS(NS, "g");
    g.id = panId;
    var d = {svg: el, pan: g, W: +el.getAttribute("width"), H: +el.getAttribute("height"), s: 1, tx: 0, ty: 0};
    while (el.firstChild) g.appendChild(el.firstChild);
    el.appendChild(g);
    el.removeAttribute("viewBox");
    el.setAttribute("width", "100%");
    el.setAttribute("height", "100%");
    el.style.display = "none";
    return d;
  }
  // A large graph comes with a second drawing, every region one box (compact), shown first; clicking a region
  // there opens the full drawing at that region.
  var full = prepare(document.getElementById("full"), "pan");
  var compactEl = document.getElementById("compact"), compact = compactEl ? prepare(compactEl, "pan-compact") : null;
  var cur = null, svg, pan, W, H, s = 1, tx = 0, ty = 0, zoomLabel = document.getElementById("zoom");
  view.style.overflow = "hidden";
  function use(d) {
    if (cur === d) return;
    if (cur) { cur.s = s; cur.tx = tx; cur.ty = ty; cur.svg.style.display = "none"; }
    cur = d; svg = d.svg; pan = d.pan; W = d.W; H = d.H; s = d.s; tx = d.tx; ty = d.ty;
    svg.style.display = "";
    apply();
    document.body.setAttribute("data-drawing", d === compact ? "compact" : "full");
  }
  function apply() {
    pan.setAttribute("transform", "translate(" + tx + "," + ty + ") scale(" + s + ")");
    zoomLabel.textContent = Math.round(s * 100) + "%";
  }
  function zoomTo(x, y, w, h, most) {
    var cw = view.clientWidth, ch = view.clientHeight;
    s = Math.min(cw / w, ch / h, most);
    tx = cw / 2 - (x + w / 2) * s;
    ty = ch / 2 - (y + h / 2) * s;
    apply();
  }
  function fit() { zoomTo(0, 0, W, H, 1.5); }
  function fitWidth() {  // the opening view: the drawing as wide as the window, its top first; drag to go down
    var cw = view.clientWidth, ch = view.clientHeight;
    s = Math.min(1.5, cw / W);
    tx = (cw - W * s) / 2;
    ty = H * s < ch ? (ch - H * s) / 2 : 0;
    apply();
  }
  function zoomAt(f, mx, my) {
    var ns = Math.min(8, Math.max(0.01, s * f));
    f = ns / s; tx = mx - (mx - tx) * f; ty = my - (my - ty) * f; s = ns;
    apply();
  }
  function zoomCentre(f) { zoomAt(f, view.clientWidth / 2, view.clientHeight / 2); }
  function box(elements) {  // the elements' bounds in drawing coordinates
    var v = view.getBoundingClientRect(), x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    elements.forEach(function (el) {
      var r = el.getBoundingClientRect();
      x0 = Math.min(x0, r.left); y0 = Math.min(y0, r.top); x1 = Math.max(x1, r.right); y1 = Math.max(y1, r.bottom);
    });
    return [(x0 - v.left - tx) / s, (y0 - v.top - ty) / s, (x1 - x0) / s, (y1 - y0) / s];
  }
  function show(elements, most) {
    if (!elements.length) return;
    var b = box(elements);
    zoomTo(b[0] - 40, b[1] - 40, b[2] + 80, b[3] + 80, most || 1.2);
  }
  function sel(selector, id) {
    return Array.prototype.filter.call(svg.querySelectorAll(selector), function (el) {
      return id === undefined || el.getAttribute("data-region") === id;
    });
  }
  function isCollapsed(id) {
    return cur === compact || full.svg.querySelector('.cover[data-region="' + id.replace(/"/g, '\\"') + '"]:not([display="none"])') !== null;
  }
  function updateCount() {
    var n = regions().filter(isCollapsed).length;
    document.body.setAttribute("data-collapsed", String(n));
    document.querySelectorAll("#legend li[data-region]").forEach(function (li) {
      var on = isCollapsed(li.getAttribute("data-region"));
      li.classList.toggle("collapsed", on);
      li.querySelector("button").textContent = on ? "expand" : "collapse";
    });
  }
  function setCollapsed(id, on) {
    if (!on && cur === compact) {  // expanding one region of the compact drawing: the full one, at that region
      use(full);
      full.svg.querySelectorAll(".cover").forEach(function (c) { c.setAttribute("display", "inline"); });
      full.svg.querySelectorAll('.cover[data-region="' + id.replace(/"/g, '\\"') + '"]').forEach(function (c) {
        c.setAttribute("display", "none");
      });
      show(sel(".cluster", id));
    } else {
      full.svg.querySelectorAll('.cover[data-region="' + id.replace(/"/g, '\\"') + '"]').forEach(function (c) {
        c.setAttribute("display", on ? "inline" : "none");
      });
    }
    updateCount();
  }
  function regions() {
    return Array.prototype.map.call(document.querySelectorAll("#legend li[data-region]"), function (li) {
      return li.getAttribute("data-region");
    });
  }
  var down = null, moved = false;
  view.addEventListener("pointerdown", function (e) {
    if (e.button !== 0) return;
    down = [e.clientX, e.clientY, tx, ty]; moved = false;
  });
  window.addEventListener("pointermove", function (e) {
    if (!down) return;
    var dx = e.clientX - down[0], dy = e.clientY - down[1];
    if (!moved && Math.abs(dx) + Math.abs(dy) < 4) return;
    moved = true; view.classList.add("dragging");
    tx = down[2] + dx; ty = down[3] + dy; apply();
  });
  window.addEventListener("pointerup", function () { down = null; view.classList.remove("dragging"); });
  view.addEventListener("wheel", function (e) {
    e.preventDefault();
    var r = view.getBoundingClientRect();
    zoomAt(Math.exp(-e.deltaY * (e.deltaMode ? 0.05 : 0.0015)), e.clientX - r.left, e.clientY - r.top);
  }, {passive: false});
  view.addEventListener("click", function (e) {
    if (moved) return;
    var t = e.target.closest(".cover, .cluster, .port, .node.region");
    if (!t) return;
    if (t.classList.contains("region")) { setCollapsed(t.getAttribute("data-region"), false); return; }
    if (t.classList.contains("port")) {
      var peers = Array.prototype.slice.call(svg.querySelectorAll('.port[data-link="' + t.getAttribute("data-link") + '"]'));
      show([peers[(peers.indexOf(t) + 1) % peers.length]], 1);
    } else {
      setCollapsed(t.getAttribute("data-region"), t.classList.contains("cluster"));
    }
  });
  document.querySelectorAll("#legend li[data-region]").forEach(function (li) {
    var id = li.getAttribute("data-region");
    li.querySelector("a").addEventListener("click", function (e) { e.preventDefault(); show(sel(".cluster", id)); });
    li.querySelector("button").addEventListener("click", function () {
      setCollapsed(id, !li.classList.contains("collapsed"));
    });
  });
  var hits = [], hit = -1;
  function find(text) {
    text = text.trim().toLowerCase();
    if (hit >= 0 && hits[hit]) hits[hit].classList.remove("hit");
    if (text && cur === compact) use(full);  // ops are found in the full drawing
    hits = text ? sel(".node").filter(function (n) {
      return n.querySelector("title").textContent.toLowerCase().indexOf(text) >= 0;
    }) : [];
    hit = -1;
    document.getElementById("found").textContent = text ? hits.length + " found" : "";
  }
  function next() {
    if (!hits.length) return;
    if (hit >= 0) hits[hit].classList.remove("hit");
    hit = (hit + 1) % hits.length;
    hits[hit].classList.add("hit");
    show([hits[hit]], 1.5);
  }
  var findBox = document.getElementById("find");
  findBox.addEventListener("input", function () { find(findBox.value); });
  findBox.addEventListener("keydown", function (e) { if (e.key === "Enter") next(); });
  var actions = {
    fit: fit, actual: function () { zoomAt(1 / s, view.clientWidth / 2, view.clientHeight / 2); },
    "in": function () { zoomCentre(1.25); }, out: function () { zoomCentre(0.8); },
    collapse: function () {
      if (compact) { use(compact); updateCount(); return; }
      regions().forEach(function (id) { setCollapsed(id, true); });
    },
    expand: function () {
      var was = cur;
      use(full);
      full.svg.querySelectorAll(".cover").forEach(function (c) { c.setAttribute("display", "none"); });
      if (was !== full) fitWidth();
      updateCount();
    }
  };
  document.querySelectorAll("header button[data-act]").forEach(function (b) {
    b.addEventListener("click", function () { actions[b.getAttribute("data-act")](); });
  });
  document.addEventListener("keydown", function (e) {
    if (e.target === findBox) return;
    var key = {"0": "fit", "1": "actual", "+": "in", "=": "in", "-": "out"}[e.key];
    if (key) actions[key]();
  });
  var params = {};
  location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
    var i = kv.indexOf("=");
    if (i > 0) params[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1));
  });
  [full, compact].forEach(function (d) { if (d) { use(d); fitWidth(); } });  // each opens as wide as the window
  use(compact && params.collapse === undefined && !params.find ? compact : full);
  if (params.zoom) { s = +params.zoom || 1; tx = 0; ty = 0; apply(); }
  if (params.collapse) {
    (params.collapse === "all" ? regions() : params.collapse.split(",")).forEach(function (id) { setCollapsed(id, true); });
  }
  if (params.find) { findBox.value = params.find; find(params.find); next(); }
  updateCount();
  document.body.setAttribute("data-viewer", "ready");
})();
"""


#: Past this many ops (with two regions or more) the page opens on the compact drawing, every region one box:
#: a 600-op graph drawn whole opens at 20-25% zoom, where no label can be read.
COMPACT_FROM_OPS = 150
#: The drawing's widest fold (px): a 1400-px window less the side panel, so the page opens near 100%.
PAGE_WIDTH = 1000


def _with_id(svg: str, element_id: str) -> str:
    return svg.replace("<svg ", f'<svg id="{element_id}" ', 1)


def render_html(view: BundleView, summary: str, *, collapse_regions: bool = False, columns: int | None = None) -> str:
    """A self-contained page: the drawing (pan, zoom, collapsible regions), the legend and the text summary.

    It opens as wide as the window, top first, so labels read at the opening zoom; a large graph opens on a
    second, compact drawing (``COMPACT_FROM_OPS``) whose region boxes expand into the full drawing on a click.
    """
    palette = Palette.of(view)
    svg = _with_id(
        render_svg(view, collapse_regions=collapse_regions, columns=columns, legend=False, max_width=PAGE_WIDTH),
        "full",
    )
    ops = sum(view.ops_by_backend().values())
    if not collapse_regions and len(view.regions) >= 2 and ops > COMPACT_FROM_OPS:
        compact = render_svg(view, collapse_regions=True, columns=columns, legend=False, max_width=PAGE_WIDTH)
        svg = (
            _with_id(
                compact.replace('id="aot-arrow"', 'id="aot-arrow-compact"').replace(
                    "url(#aot-arrow)", "url(#aot-arrow-compact)"
                ),
                "compact",
            )
            + "\n"
            + svg
        )
    items = []
    for color, text, region in legend_entries(view, palette):
        if region is None or collapse_regions:
            items.append(
                f'<li><span class="sw" style="background:{color}"></span><span>{html.escape(text)}</span></li>'
            )
        else:
            rid = html.escape(region, quote=True)
            items.append(
                f'<li data-region="{rid}"><span class="sw" style="background:{color}"></span>'
                f'<a href="#" title="zoom to {rid}">{html.escape(text)}</a><button type="button">collapse</button></li>'
            )
    title = html.escape(view.path)
    buttons = "".join(
        f'<button type="button" data-act="{act}" title="{tip}">{label}</button>'
        for act, label, tip in [
            ("fit", "Fit", "fit the whole graph (0)"),
            ("actual", "100%", "actual size (1)"),
            ("in", "+", "zoom in (+)"),
            ("out", "−", "zoom out (-)"),
            ("collapse", "Collapse regions", "draw every region as one box"),
            ("expand", "Expand regions", "show every region's ops"),
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{STYLE}</style>"
        '<script>window.addEventListener("error", function (e) {'
        'document.documentElement.setAttribute("data-js-error", String(e.message)); });</script>'
        f"</head><body>\n<header><h1>{title}</h1>{buttons}"
        '<input id="find" type="search" placeholder="find op or node (Enter: next)" size="28">'
        '<span id="found"></span><span id="zoom"></span></header>\n'
        f'<main><div id="view">\n{svg}\n</div>\n<aside><h2>Backends and regions</h2><ul id="legend">'
        + "".join(items)
        + '</ul><p class="help">Drag to pan, wheel or +/− to zoom, 0 to fit. Click a region\'s box to collapse it '
        "into one box, click that box to expand it. A large graph opens with every region as one box: click one, "
        "or <b>Expand regions</b>, to see its ops. Hover a node for its name, op, composite and region. "
        "A deep graph is folded into columns: a connector such as <b>A → 2</b> continues in column 2 at "
        "<b>A ← 1</b>; click one to jump to the other.</p>"
        f"<h2>Summary</h2><pre>{html.escape(summary)}</pre></aside></main>\n"
        f"<script>{SCRIPT}</script>\n</body></html>\n"
    )


__all__ = ["render_html"]
