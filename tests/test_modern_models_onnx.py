"""Today's models through ONNX: ``torch.onnx.export(..., dynamo=True)``, then aot, against PyTorch and onnxruntime.

Tiny random-init configs of the Hugging Face architectures (tests/hf_models.py) and a
torchvision classifier. CI runs five of the nine architectures (BERT, GPT-2, LLaMA, ViT,
Whisper: the exporter takes ~5 s per model); ``AOT_MODERN_ALL=1`` runs all nine, and
``benchmarks/model_coverage.py`` runs every torchvision builder and the real sizes
(``--full``) and writes docs/models.md.

Text models are exported with a symbolic batch and sequence length, int64 token ids and
a padded attention mask as inputs: one host bundle must run batch 1..4 and sequence
length 8..64 without rebuilding. ``--target tensorrt`` (host fallback without TensorRT)
runs the same sizes; the NPU needs static shapes, so its bundle fixes the example's and
must place regions. Every output is within relative L2 1e-4 of PyTorch and of onnxruntime
on the same file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

import aot
import runtime_lite
from tests import hf_models
from tests.helpers import onnxruntime_outputs
from tests.onnx_export import export_onnx
from tests.torchvision_compat import import_torchvision

TOLERANCE = 1e-4
SIZES = [(1, 8), (4, 64), (3, 21)]  # (batch, sequence length)
CI_MODELS = ["bert", "gpt2", "llama", "vit", "whisper_encoder"]
MODELS = list(hf_models.FACTORIES) if os.environ.get("AOT_MODERN_ALL") == "1" else CI_MODELS


def relative_l2(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-12))


def check(module, path, model, inputs: dict, what: str) -> None:
    feeds = {k: v.numpy() for k, v in inputs.items()}
    actual = module.run(feeds)
    expected = hf_models.reference_outputs(model, inputs)
    from_ort = onnxruntime_outputs(onnx.load(path), feeds)
    assert len(actual) == len(expected) == len(from_ort)
    for a, e, o in zip(actual, expected, from_ort):
        assert a.shape == tuple(e.shape) and a.dtype == o.dtype, (what, a.shape, e.shape, a.dtype, o.dtype)
        assert relative_l2(a, e.numpy()) <= TOLERANCE, f"{what}: rel. L2 vs PyTorch {relative_l2(a, e.numpy()):.2e}"
        assert relative_l2(a, o) <= TOLERANCE, f"{what}: rel. L2 vs onnxruntime {relative_l2(a, o):.2e}"


@pytest.mark.parametrize("name", MODELS)
def test_hf_model_via_onnx_matches_pytorch_at_every_size(name, tmp_path):
    model, example, dynamic = hf_models.FACTORIES[name]()
    path = str(tmp_path / f"{name}.onnx")
    export_onnx(model, example, dynamic, path)
    for target in ("host", "tensorrt"):
        module = runtime_lite.load(aot.build(path, targets=[target]).to_bytes())
        assert [i.name for i in module.inputs] == list(example)
        assert isinstance(module.inputs[0].shape[0], str), module.inputs[0]  # the batch stays symbolic
        if "input_ids" in example:
            assert module.inputs[0].dtype == "int64" and isinstance(module.inputs[0].shape[1], str)
        for batch, seq in SIZES if target == "host" else SIZES[-1:]:
            check(module, path, model, hf_models.resized(example, dynamic, batch, seq), f"{target} {batch}x{seq}")
    fixed = aot.build(path, targets=["npu"], input_shapes={k: tuple(v.shape) for k, v in example.items()})
    assert fixed.regions.get("npu", 0) > 0, fixed.regions
    check(runtime_lite.load(fixed.to_bytes()), path, model, example, "npu, static shapes")


def test_torchvision_classifier_via_onnx_matches_pytorch(tmp_path):
    torchvision = import_torchvision()
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small(weights=None).eval()  # SE, hard-swish, depthwise
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    example = {"x": torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))}
    path = str(tmp_path / "mobilenet_v3_small.onnx")
    export_onnx(model, example, {"x": {0: hf_models.BATCH}}, path)
    for target in ("host", "npu", "tensorrt"):
        module = runtime_lite.load(aot.build(path, targets=[target]).to_bytes())
        for batch in (1, 3):
            inputs = {"x": torch.randn(batch, 3, 64, 64, generator=torch.Generator().manual_seed(batch))}
            check(module, path, model, inputs, f"{target} batch {batch}")


_COVERAGE_WITHOUT = """
import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # not installed: import fails, find_spec finds nothing
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _model_coverage(tmp_path: Path, hidden: str, *args: str) -> subprocess.CompletedProcess:
    """``benchmarks/model_coverage.py ARGS`` in a process where the ``hidden`` packages are not installed."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "model_coverage.py"
    command = [
        sys.executable,
        "-c",
        _COVERAGE_WITHOUT,
        hidden,
        str(script),
        "--out",
        str(tmp_path / "models.md"),
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("hidden", "line"),
    [
        ("onnxscript", "error: onnxscript is not installed: pip install -e '.[test]'\n"),
        ("torch,onnxscript", "error: torch and onnxscript are not installed: pip install -e '.[test]'\n"),
    ],
)
def test_model_coverage_refuses_to_start_without_the_test_extra(tmp_path, hidden, line):
    """Without onnxscript every ONNX-route cell failed in the exporter and was written down as the model's ✗."""
    result = _model_coverage(tmp_path, hidden, "--only", "squeezenet1_1", "--rows", str(tmp_path / "rows.jsonl"))
    assert (result.returncode, result.stderr) == (1, line)
    assert list(tmp_path.iterdir()) == []  # nothing recorded, no table written


def test_model_coverage_needs_no_onnxscript_for_the_torch_export_route_alone(tmp_path):
    """onnxscript is the ONNX route's alone. (``--only`` naming no model: the table is written, nothing runs.)"""
    result = _model_coverage(tmp_path, "onnxscript", "--routes", "torch.export", "--only", "no_such_model")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "models.md").exists()
