"""The examples run as the README says, and the shipped example model is the one its script writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_runs_and_matches_the_reference(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: runtime_lite matches the reference" in result.stdout
    assert "built" in result.stdout and "probabilities: float32[2, 10]" in result.stdout
    for target in ("host", "npu"):
        assert (tmp_path / f"small_cnn-{target}.aotb").exists()
        assert (tmp_path / f"outputs-{target}" / "probabilities.npy").exists()
    assert "$ aot-build " in result.stdout and "$ runtime-lite run " in result.stdout  # as a user types them
    assert "npu: 9 ops in 1 region" in result.stdout and "'runs_on': 'npu'" in result.stdout


def test_quickstart_removes_its_temporary_directory(tmp_path):
    import os

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True,
                            text=True, env=env)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == []


def test_shipped_example_model_is_reproducible():
    sys.path.insert(0, str(ROOT / "examples" / "models"))
    try:
        from make_small_cnn import small_cnn
    finally:
        sys.path.pop(0)
    assert small_cnn().SerializeToString() == (ROOT / "examples" / "models" / "small_cnn.onnx").read_bytes()


def run_example(script: str, *args: str, cwd=None) -> str:
    """Run ``examples/<script>`` as the README does; its stdout, after checking it succeeded."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args], capture_output=True, text=True, cwd=cwd
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_byoc_npu_example_partitions_and_computes(tmp_path):
    out = run_example("byoc_npu.py", cwd=tmp_path)
    assert "'npu.conv2d_relu_fused'" in out
    assert 'region npu_0 {Codegen="npu"}' in out and "CONV" in out
    assert "OK: the NPU computed the convolution for real" in out
    assert "regions: 1 ({'host': 0, 'npu': 43})" in out and "2 host<->npu transitions (1 backend call)" in out
    assert "OK: one NPU region, logits bit-exact with the host plan" in out


def test_tensorrt_example_degrades_gracefully_without_a_gpu(tmp_path):
    out = run_example("tensorrt_conv_relu.py", "--cache-dir", str(tmp_path))
    assert 'region tensorrt_0 {Codegen="tensorrt"}' in out
    assert "recipe of tensorrt_0 in onnxruntime vs host" in out
    assert "[fp32] output (1, 16, 30, 30)" in out and "[fp16] output" in out
    assert out.count(": OK") == 2


def test_deploy_pytorch_example_runs_without_torch_on_the_deployment_side(tmp_path):
    out = run_example("deploy_pytorch.py", "--out", str(tmp_path))
    assert 'region npu_0 {Codegen="npu"}' in out
    assert 'region tensorrt_0 {Codegen="tensorrt"}' in out
    assert "OK: both deployed bundles match PyTorch" in out
    assert sorted(p.name for p in tmp_path.glob("*.aotb")) == [
        "small_conv_net.npu.aotb",
        "small_conv_net.tensorrt.aotb",
    ]
