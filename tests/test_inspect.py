"""aot-inspect: the summary and the drawings, run as a user runs them."""

from __future__ import annotations

import collections
import re
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.compiler import build
from aot.inspect import load_view
from aot.inspect.draw import Palette, render_svg
from aot.testing.zoo import load_zoo_model
from tests.missing import require_program
from tests.test_cli import run

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def npu_bundle(small_model, tmp_path):
    """The small CNN on the NPU with its flatten kept on the host: two regions and a host op to draw."""
    from aot.compiler.partition import fuse_ops_by_pattern, merge_composite_functions
    from aot.compiler.pattern_registry import get_patterns_with_prefix

    patterns = [p for p in get_patterns_with_prefix("npu") if p.name != "npu.flatten"]
    path = tmp_path / "small.aotb"
    result = build(small_model, name="small",
                   partitioner=lambda g: merge_composite_functions(fuse_ops_by_pattern(g, patterns)))  # fmt: skip
    result.save(path)
    return path, result


def test_summary_names_signature_regions_payloads_and_producer(npu_bundle):
    path, result = npu_bundle
    out = run("-m", "aot.cli.inspect", str(path)).stdout
    assert "format 1.0" in out and "producer  aot" in out
    assert "input     x: float32[1,3,8,8]" in out and "output    probs: float32[1,10]" in out
    for region in result.partitioned.regions:
        assert f"region    {region.id} on npu: {len(region.nodes)} ops" in out
    assert "payloads graph" in out and "conv2d" in out


@pytest.fixture
def dot():
    return require_program("dot", "graphviz")


def _svg(text: str) -> ET.Element:
    return ET.fromstring(text[text.index("<svg") : text.index("</svg>") + 6])


def _node_titles(root: ET.Element) -> list[str]:
    return [g.find(f"{SVG}title").text for g in root.iter(f"{SVG}g") if "node" in (g.get("class") or "").split()]


@pytest.mark.parametrize("suffix", [".svg", ".html"])
def test_drawing_names_every_region_and_node(npu_bundle, tmp_path, suffix, dot):
    path, result = npu_bundle
    drawing = tmp_path / f"graph{suffix}"
    run("-m", "aot.cli.inspect", str(path), "--graph", str(drawing))
    text = drawing.read_text()
    root = _svg(text)
    titles = _node_titles(root)
    legend = " ".join(t.text or "" for t in root.iter(f"{SVG}text")) if suffix == ".svg" else text
    clusters = {g.get("data-region"): g for g in root.iter(f"{SVG}g") if g.get("class") == "cluster"}
    region_fills = set()
    for region in result.partitioned.regions:
        assert f"{region.id}: {len(region.nodes)} ops on npu" in legend
        for node in region.nodes:
            assert any(t.startswith(f"{node.name}: {node.op}") and region.id in t for t in titles)
        assert region.id in clusters  # a box around every region
        region_fills.add(clusters[region.id].find(f"{SVG}rect").get("fill"))
    assert len(titles) == len(result.partitioned.nodes) + 1  # every op and the input
    assert len(region_fills) == len(result.partitioned.regions) >= 2  # a shade of its own per region
    fills = {r.get("fill") for r in root.iter(f"{SVG}rect")}
    assert "#f6b26b" in fills and "#cfd8e3" in fills  # npu (its first region) and host colours both used
    paths = [p for p in root.iter(f"{SVG}path") if p.get("data-from")]
    assert len(paths) == sum(len(n.inputs) for n in load_view(path).nodes)  # every data-flow edge, routed by dot
    assert all(" C" in p.get("d") for p in paths)  # as splines


@pytest.mark.parametrize("name", ["densenet121", "resnet50"])
def test_deep_graphs_are_folded_into_columns_of_sane_aspect(name, tmp_path, dot):
    path = tmp_path / f"{name}.aotb"
    build(load_zoo_model(name, random_weights=False), targets=["npu"], name=name).save(path)
    drawing = tmp_path / "graph.svg"
    run("-m", "aot.cli.inspect", str(path), "--graph", str(drawing))
    text = drawing.read_text()
    root = _svg(text)
    width, height = float(root.get("width")), float(root.get("height"))
    assert 0.5 < width / height < 2.5, (width, height)  # one column was 494 x 23632 px for DenseNet-121
    view = load_view(path)
    assert len(_node_titles(root)) == len(view.nodes)
    ports = [g for g in root.iter(f"{SVG}g") if g.get("class") == "port"]
    assert ports, "a graph this deep is folded"
    links = collections.Counter(p.get("data-link") for p in ports)
    assert all(n >= 2 for n in links.values())  # every connector has its partner in a later column
    cut = {p.get("data-from") for p in root.iter(f"{SVG}path") if p.get("data-to", "").startswith("o")}
    assert len(cut) == len(links)
    again = tmp_path / "again.svg"
    run("-m", "aot.cli.inspect", str(path), "--graph", str(again))
    assert again.read_text() == text  # the same drawing every time
    one_column = tmp_path / "one.svg"
    run("-m", "aot.cli.inspect", str(path), "--graph", str(one_column), "--columns", "1")
    root = _svg(one_column.read_text())
    assert float(root.get("height")) > 5 * float(root.get("width"))
    assert not [g for g in root.iter(f"{SVG}g") if g.get("class") == "port"]


def test_collapse_regions_draws_each_region_as_one_box(npu_bundle, tmp_path, dot):
    path, result = npu_bundle
    drawing = tmp_path / "graph.svg"
    run("-m", "aot.cli.inspect", str(path), "--graph", str(drawing), "--collapse-regions")
    titles = _node_titles(_svg(drawing.read_text()))
    host = [n for n in result.partitioned.nodes if n.name not in {m.name for r in result.partitioned.regions
                                                                   for m in r.nodes}]  # fmt: skip
    assert len(titles) == 1 + len(host) + len(result.partitioned.regions)
    for region in result.partitioned.regions:
        assert sum(t.startswith(f"region {region.id} on npu: {len(region.nodes)} ops") for t in titles) == 1


def test_drawing_without_graphviz_says_what_to_install(npu_bundle, tmp_path, monkeypatch):
    path, _ = npu_bundle
    monkeypatch.setenv("AOT_DOT", str(tmp_path / "no-such-dot"))
    result = run("-m", "aot.cli.inspect", str(path), "--graph", str(tmp_path / "g.html"), check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "apt-get install graphviz" in result.stderr
    assert not (tmp_path / "g.html").exists() and result.stdout == ""
    assert run("-m", "aot.cli.inspect", str(path), "--graph", str(tmp_path / "g.onnx")).returncode == 0  # no dot


def test_a_failing_dot_is_one_line(npu_bundle, tmp_path, monkeypatch):
    path, _ = npu_bundle
    broken = tmp_path / "dot"
    broken.write_text("#!/bin/sh\necho 'Error: something inside dot' >&2\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setenv("AOT_DOT", str(broken))
    result = run("-m", "aot.cli.inspect", str(path), "--graph", str(tmp_path / "g.svg"), check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: Graphviz dot failed to lay out the graph: Error: something inside dot"
    )
    assert not (tmp_path / "g.svg").exists()


def test_host_only_bundle_says_so(small_model, tmp_path):
    path = tmp_path / "h.aotb"
    build(small_model).save(path)
    assert "regions   none" in run("-m", "aot.cli.inspect", str(path)).stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.aotb"], "cannot read bundle"),
        (["BUNDLE", "--graph", "out.png"], "written as .svg, .html or .onnx"),
        (["BUNDLE", "--graph", "no/such/dir/out.svg"], "cannot write --graph 'no/such/dir/out.svg': its folder"),
        (["GARBAGE"], "not an aot bundle"),
    ],
)
def test_bad_arguments_fail_with_one_line(npu_bundle, tmp_path, args, message):
    path, _ = npu_bundle
    garbage = tmp_path / "garbage.aotb"
    garbage.write_bytes(b"hello, not a bundle" * 10)
    args = [str(path) if a == "BUNDLE" else str(garbage) if a == "GARBAGE" else a for a in args]
    result = run("-m", "aot.cli.inspect", *args, cwd=tmp_path, check=False)
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_graph_as_onnx_for_netron_annotates_every_node(npu_bundle, tmp_path):
    import onnx

    path, result = npu_bundle
    exported = tmp_path / "graph.onnx"
    run("-m", "aot.cli.inspect", str(path), "--graph", str(exported))
    model = onnx.load(exported)
    onnx.checker.check_model(model)  # a well-formed ONNX file Netron opens
    attrs = {n.name: {a.name: a.s.decode() for a in n.attribute} for n in model.graph.node}
    assert len(attrs) == len(result.partitioned.nodes)
    for region in result.partitioned.regions:
        for node in region.nodes:
            assert attrs[node.name]["backend"] == "npu" and attrs[node.name]["region"] == region.id
    in_regions = {n.name for r in result.partitioned.regions for n in r.nodes}
    assert all(a["backend"] == "host" for name, a in attrs.items() if name not in in_regions)
    produced = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    assert all(i in produced for n in model.graph.node for i in n.input)  # the data flow is wired
    assert [o.name for o in model.graph.output] == ["probs"]
    refused = run("-m", "aot.cli.inspect", str(path), "--graph", str(tmp_path / "g.png"), check=False)
    assert refused.returncode != 0 and "written as .svg, .html or .onnx" in refused.stderr


def _chromium(exe: str, tmp_path, *args: str, window: str = "1400,900") -> subprocess.CompletedProcess:
    """Headless Chromium, offline and quiet, logging the page's console to stderr."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chromium-profile'}", "--hide-scrollbars", "--force-color-profile=srgb",
             "--enable-logging=stderr", "--v=0", f"--window-size={window}"]  # fmt: skip
    done = subprocess.run([exe, *flags, *args], capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console  # the page logs nothing: no exception, no error
    return done


def _pixels(png) -> tuple[tuple[int, int], collections.Counter]:
    """The image's size and how many pixels have each (r, g, b) colour."""
    from PIL import Image

    with Image.open(png) as image:
        rgb = np.asarray(image.convert("RGB"), dtype=np.uint32)
    packed = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]
    values, counts = np.unique(packed, return_counts=True)
    colors = collections.Counter(
        {(int(v) >> 16, (int(v) >> 8) & 255, int(v) & 255): int(n) for v, n in zip(values, counts)}
    )
    return (rgb.shape[1], rgb.shape[0]), colors


def test_html_view_renders_and_runs_in_chromium(npu_bundle, tmp_path, dot):
    chromium = require_program("chromium", "chromium", "chromium-browser", "google-chrome")
    path, result = npu_bundle
    page = tmp_path / "graph.html"
    run("-m", "aot.cli.inspect", str(path), "--graph", str(page))
    text = page.read_text()
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) <= {"http://www.w3.org/2000/svg"}  # nothing fetched
    regions = len(result.partitioned.regions)

    dom = _chromium(chromium, tmp_path, "--dump-dom", page.as_uri() + "#collapse=all").stdout
    assert 'data-viewer="ready"' in dom and not re.search("<html[^>]*data-js-error", dom)  # the script ran, no error
    assert re.search(r'<g id="pan" transform="translate\([-\d.e]+,[-\d.e]+\) scale\([\d.e]+\)"', dom)
    assert f'data-collapsed="{regions}"' in dom  # every region folded into one box

    npu, host, white = (0xF6, 0xB2, 0x6B), (0xCF, 0xD8, 0xE3), (0xFF, 0xFF, 0xFF)
    expanded, collapsed = tmp_path / "expanded.png", tmp_path / "collapsed.png"
    _chromium(chromium, tmp_path, f"--screenshot={expanded}", page.as_uri())
    _chromium(chromium, tmp_path, f"--screenshot={collapsed}", page.as_uri() + "#collapse=all")
    size, colors = _pixels(expanded)
    assert size == (1400, 900)
    total = size[0] * size[1]
    assert colors[white] < 0.9 * total and len(colors) > 100  # not blank: a drawing, text, a side panel
    assert colors[npu] > 2000 and colors[host] > 300  # npu_0's ops and the host's flatten, filled
    _, folded = _pixels(collapsed)
    assert folded[npu] > 1.5 * colors[npu]  # npu_0 drawn as one filled box


# -- issue 37: a 600-op, 48-region graph that reads at first sight ---------------------------------------------


def many_regions_model(regions: int = 48, convs_per_region: int = 6, channels: int = 8) -> onnx.ModelProto:
    """A chain of ``regions`` NPU regions (conv + relu pairs) split by a host op the NPU never takes (``Sin``)."""
    rng = np.random.default_rng(0)
    nodes, weights, x = [], [], "x"
    for r in range(regions):
        for j in range(convs_per_region):
            k = f"{r}_{j}"
            w = rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) * 0.1
            weights.append(numpy_helper.from_array(w, f"w{k}"))
            nodes.append(helper.make_node("Conv", [x, f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1], name=f"conv{k}"))
            nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"], name=f"relu{k}"))
            x = f"r{k}"
        nodes.append(helper.make_node("Sin", [x], [f"s{r}"], name=f"sin{r}"))
        x = f"s{r}"
    shape = [1, channels, 8, 8]
    graph = helper.make_graph(nodes, "many_regions", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)], weights)  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def many_regions(tmp_path_factory):
    path = tmp_path_factory.mktemp("many") / "many.aotb"
    result = build(many_regions_model(), targets=["npu"], log=None)
    result.save(path)
    assert len(result.partitioned.regions) == 48 and sum(result.regions.values()) == 624
    return path


def test_every_region_has_a_colour_of_its_own(many_regions):
    palette = Palette.of(load_view(str(many_regions)))
    colors = list(palette.regions.values())
    assert len(set(colors)) == len(colors) == 48
    rgb = [np.array([int(c[i : i + 2], 16) for i in (1, 3, 5)], dtype=float) for c in colors]
    # regions drawn near each other (up to 3 apart in execution order) differ clearly, not by a shade
    assert min(np.abs(rgb[i] - rgb[j]).max() for i in range(48) for j in range(i + 1, min(48, i + 4))) >= 40


def test_the_title_stays_clear_of_the_column_headers(many_regions, dot):
    svg = render_svg(load_view(str(many_regions)))
    title_baseline = float(re.search(r'<text x="\d+" y="([\d.]+)" font-size="14"', svg).group(1))
    graph_top = float(re.search(r'<g class="graph" transform="translate\([\d.]+,([\d.]+)\)"', svg).group(1))
    assert "column 2" in svg  # folded: the headers exist
    assert graph_top - 6 - 10 >= title_baseline + 4  # a header (baseline 6 px above the graph, 10 px high) below it


def test_a_600_op_48_region_page_opens_readable(many_regions, tmp_path, dot):
    """In a 1400x1000 window: the compact drawing, at 100% or more, every region a box of its own colour."""
    chromium = require_program("chromium", "chromium", "chromium-browser", "google-chrome")
    page = tmp_path / "many.html"
    run("-m", "aot.cli.inspect", str(many_regions), "--graph", str(page))
    window = "1400,1000"
    dom = _chromium(chromium, tmp_path, "--dump-dom", page.as_uri(), window=window).stdout
    assert 'data-viewer="ready"' in dom and 'data-drawing="compact"' in dom and 'data-collapsed="48"' in dom
    zoom = int(re.search(r'<span id="zoom">(\d+)%</span>', dom).group(1))
    assert zoom >= 100, zoom  # labels at their drawn size or larger: 11 px text, readable
    expanded = _chromium(chromium, tmp_path, "--dump-dom", page.as_uri() + "#find=sin47", window=window).stdout
    assert 'data-drawing="full"' in expanded  # finding an op opens the full drawing
    shot = tmp_path / "many.png"
    _chromium(chromium, tmp_path, f"--screenshot={shot}", page.as_uri(), window=window)
    size, colors = _pixels(shot)
    assert size == (1400, 1000)
    palette = Palette.of(load_view(str(many_regions)))
    drawn = [c for c in palette.regions.values() if colors[tuple(int(c[i : i + 2], 16) for i in (1, 3, 5))] > 500]
    assert len(drawn) >= 20, drawn  # the opening view shows many region boxes, each in its own colour
