"""The docs list what the code supports: every ONNX op the frontend reads, every canonical op."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from aot.frontend.onnx.converters import CONVERTERS
from aot.ir.ops import OPS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def test_ops_page_lists_every_onnx_op_and_canonical_op():
    text = (DOCS / "ops.md").read_text()
    documented = set(re.findall(r"`([\w.]+)`", text))  # com.microsoft.Gelu: a contrib op's converter
    assert set(CONVERTERS) - documented == set()
    assert set(OPS) - documented == set()


def test_pytorch_page_lists_every_aten_converter():
    from aot.frontend.torch.aten import ATEN

    documented = set(re.findall(r"`(\w+)`", (DOCS / "pytorch.md").read_text()))
    assert {name.split(".", 1)[1] for name in ATEN if name.startswith("aten.")} - documented == set()


def test_benchmarks_page_is_generated_from_the_results_and_stays_short():
    """BENCHMARKS.md is what benchmarks/report.py makes of benchmarks/results/: no hand edits, no history."""
    spec = importlib.util.spec_from_file_location("benchmarks_report", ROOT / "benchmarks" / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    page = (ROOT / "BENCHMARKS.md").read_text()
    assert page == report.build_page(), "BENCHMARKS.md is stale: run python benchmarks/report.py"
    assert len(page.encode()) < 24_000  # current figures only: about 4 KB for each of the CPU kinds measured
    for path in (ROOT / "benchmarks" / "results").glob("*/*.json"):
        record = json.loads(path.read_text())
        assert {"cpu", "date", "command", "columns", "rows"} <= set(record), path
        assert "VNNI" in record["cpu"] and ("AVX" in record["cpu"]), path  # the ISA and VNNI, named
        assert all(len(row) == len(record["columns"]) + 1 for row in record["rows"]), path
