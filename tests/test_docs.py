"""The docs list what the code supports: every ONNX op the frontend reads, every canonical op."""

from __future__ import annotations

import re
from pathlib import Path

from aot.frontend.onnx.converters import CONVERTERS
from aot.ir.ops import OPS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_ops_page_lists_every_onnx_op_and_canonical_op():
    text = (DOCS / "ops.md").read_text()
    documented = set(re.findall(r"`(\w+)`", text))
    assert set(CONVERTERS) - documented == set()
    assert set(OPS) - documented == set()


def test_pytorch_page_lists_every_aten_converter():
    from aot.frontend.torch.aten import ATEN

    documented = set(re.findall(r"`(\w+)`", (DOCS / "pytorch.md").read_text()))
    assert {name.split(".", 1)[1] for name in ATEN if name.startswith("aten.")} - documented == set()
