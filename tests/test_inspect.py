"""aot-inspect: the summary and the drawings, run as a user runs them."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from aot.compiler import build
from tests.test_cli import run

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def npu_bundle(small_model, tmp_path):
    path = tmp_path / "small.aotb"
    result = build(small_model, targets=["npu"], name="small")
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


@pytest.mark.parametrize("suffix", [".svg", ".html"])
def test_drawing_names_every_region_and_node(npu_bundle, tmp_path, suffix):
    path, result = npu_bundle
    drawing = tmp_path / f"graph{suffix}"
    run("-m", "aot.cli.inspect", str(path), "--graph", str(drawing))
    text = drawing.read_text()
    svg = text[text.index("<svg") : text.index("</svg>") + 6]
    root = ET.fromstring(svg)
    labels = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    titles = [t.text for t in root.iter(f"{SVG}title")]
    for region in result.partitioned.regions:
        assert f"{region.id}: {len(region.nodes)} ops on npu" in labels
        for node in region.nodes:
            assert any(t.startswith(f"{node.name}: {node.op}") and region.id in t for t in titles)
    assert len(titles) == len(result.partitioned.nodes) + 1  # every op and the input
    fills = {r.get("fill") for r in root.iter(f"{SVG}rect")}
    assert "#f6b26b" in fills and "#cfd8e3" in fills  # npu and host colours both used


def test_host_only_bundle_says_so(small_model, tmp_path):
    path = tmp_path / "h.aotb"
    build(small_model).save(path)
    assert "regions   none" in run("-m", "aot.cli.inspect", str(path)).stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.aotb"], "cannot read bundle"),
        (["BUNDLE", "--graph", "out.png"], "written as .svg, .html or .onnx"),
        (["BUNDLE", "--graph", "no/such/dir/out.svg"], "cannot write drawing"),
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
