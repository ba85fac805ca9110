"""The runtime/compiler boundary: runtime_lite runs bundles without aot, click, onnx or torch, and
no product code uses pickle, eval or exec."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_runtime_never_imports_the_compiler_or_heavy_dependencies(small_bundle, tmp_path):
    bundle = tmp_path / "m.aotb"
    bundle.write_bytes(small_bundle)
    script = f"""
import sys
import numpy as np
import runtime_lite
module = runtime_lite.load({str(bundle)!r})
out = module.run([np.zeros((1, 3, 8, 8), np.float32)])
assert out[0].shape == (1, 10)
forbidden = [m for m in sys.modules if m.split('.')[0] in ('aot', 'click', 'onnx', 'onnxruntime', 'torch', 'tensorrt', 'ray', 'starlette')]
print(','.join(forbidden))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert result.stdout.strip() == "", f"runtime_lite imported {result.stdout.strip()}"


def test_runtime_sources_import_nothing_from_the_compiler():
    pattern = re.compile(r"^\s*(from|import)\s+(aot|click|onnx|onnxruntime|torch)\b", re.M)
    offenders = [
        str(p.relative_to(ROOT)) for p in (ROOT / "runtime_lite").rglob("*.py") if pattern.search(p.read_text())
    ]
    assert offenders == []


def test_no_pickle_eval_or_exec_in_product_code():
    pattern = re.compile(r"\bimport pickle\b|\bfrom pickle\b|\bcloudpickle\b|(?<![\w.])(eval|exec)\(|allow_pickle=True")
    offenders = [
        str(p.relative_to(ROOT))
        for package in ("aot", "runtime_lite")
        for p in (ROOT / package).rglob("*.py")
        if pattern.search(p.read_text())
    ]
    assert offenders == []
