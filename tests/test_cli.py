"""aot-build and python -m runtime_lite, run as a user runs them: in subprocesses."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

import runtime_lite
from tests.helpers import make_model, rand


def run(*args, cwd=None, check=True):
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture
def model_file(small_model, tmp_path):
    path = tmp_path / "small.onnx"
    path.write_bytes(small_model.SerializeToString())
    return path


def test_build_then_run_from_the_shell(model_file, tmp_path, small_input):
    bundle = tmp_path / "small.aotb"
    result = run("-m", "aot.cli.build", str(model_file), "-o", str(bundle), "--target", "npu")
    summary = result.stdout
    for expected in ("built", "regions  host:", "npu:", "region", "plan ", "bundle ", "x: float32[1,3,8,8]"):
        assert expected in summary, summary
    for stage in ("import", "partition", "codegen", "write"):  # stage progress
        assert stage in result.stderr

    np.save(tmp_path / "x.npy", small_input)
    out_dir = tmp_path / "out"
    result = run(
        "-m", "runtime_lite", "run", str(bundle), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(out_dir)
    )
    assert "probs: float32[1, 10]" in result.stdout
    saved = np.load(out_dir / "probs.npy")
    np.testing.assert_array_equal(saved, runtime_lite.load(bundle).run([small_input])[0])

    info = run("-m", "runtime_lite", "info", str(bundle)).stdout
    assert "input  x: float32[1,3,8,8]" in info and "format 1.0" in info


def test_tensorrt_target_without_a_gpu_writes_recipes_and_says_so(model_file, tmp_path):
    bundle = tmp_path / "t.aotb"
    result = run(
        "-m", "aot.cli.build", str(model_file), "-o", str(bundle), "--target", "tensorrt", "--min-region-size", "1",
        "--precision", "fp16", "--workspace", "256MiB", "--cache-dir", str(tmp_path / "cache"),
    )  # fmt: skip
    assert "tensorrt: " in result.stdout and "no engine built" in result.stdout
    assert "tensorrt engine cache" in result.stdout and "0 built" in result.stdout
    assert "module tensorrt_0 on backend tensorrt" in run("-m", "runtime_lite", "info", str(bundle)).stdout


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--workspace", "lots", "--workspace 'lots': expected a size such as 512MiB"),
        ("--batch", "8:4:1", "batch range must satisfy 1 <= MIN <= OPT <= MAX"),
        ("--batch", "1-8", "--batch '1-8': expected MIN:OPT:MAX"),
        ("--precision", "int4", "--precision 'int4': expected one of fp32, fp16, int8"),
        ("--backend-option", "tensorrt.precision=int4", "tensorrt option precision='int4': expected one of fp32"),
        ("--backend-option", "tensorrt.precison=fp16", "tensorrt has no option 'precison' (its options: precision"),
        ("--backend-option", "precision=fp16", "--backend-option must look like BACKEND.NAME=VALUE"),
    ],
)
def test_bad_tensorrt_options_are_one_line_errors(model_file, tmp_path, option, value, message):
    out = tmp_path / "t.aotb"
    result = run("-m", "aot.cli.build", str(model_file), "-o", str(out), "--target", "tensorrt", option, value,
                 check=False)  # fmt: skip
    assert result.returncode != 0 and message in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()


def test_print_graph_shows_regions_and_composites(model_file, tmp_path):
    result = run("-m", "aot.cli.build", str(model_file), "--target", "npu", "--print-graph", cwd=tmp_path)
    assert 'region npu_0 {Codegen="npu"}' in result.stdout
    assert "composite npu.conv2d_relu_fused" in result.stdout


def test_default_output_name_and_print_graph(model_file, tmp_path):
    result = run("-m", "aot.cli.build", str(model_file), "--print-graph", cwd=tmp_path)
    assert (tmp_path / "small.aotb").exists()
    assert "graph small(%x: float32[1,3,8,8])" in result.stdout
    assert "conv2d(%x, @" in result.stdout


def test_input_option_fixes_symbolic_dims(tmp_path):
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])], {"x": rand(1, 3)}, ["y"], input_shapes={"x": ["N", "C"]}
    )
    path = tmp_path / "dyn.onnx"
    path.write_bytes(model.SerializeToString())
    result = run("-m", "aot.cli.build", str(path), "-o", str(tmp_path / "dyn.aotb"), "--input", "x:4x3")
    assert "x: float32[4,3]" in result.stdout
    assert runtime_lite.load(tmp_path / "dyn.aotb").inputs[0].shape == (4, 3)


def test_build_errors_are_one_line_and_leave_no_bundle(tmp_path):
    model = make_model([helper.make_node("Unique", ["x"], ["v"], name="uniq")], {"x": rand(4)}, ["v"])
    path = tmp_path / "bad.onnx"
    path.write_bytes(model.SerializeToString())
    result = run("-m", "aot.cli.build", str(path), "-o", str(tmp_path / "bad.aotb"), check=False)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert errors == ["Error: unsupported ops (1 type): Unique (node 'uniq')"]
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.glob("*.aotb*")) and not list(tmp_path.glob(".*tmp"))

    for args, words in [
        (["missing.onnx"], "does not exist"),
        ([str(path), "--input", "x"], "NAME:1x3x224x224"),
        ([str(path), "--input", "x:1xQ!"], "bad dimension"),
        ([str(path), "--target", "fpga"], "fpga"),
    ]:
        result = run("-m", "aot.cli.build", *args, check=False, cwd=tmp_path)
        assert result.returncode != 0 and words in result.stderr and "Traceback" not in result.stderr


def test_failed_build_keeps_the_previous_bundle(model_file, tmp_path):
    bundle = tmp_path / "keep.aotb"
    run("-m", "aot.cli.build", str(model_file), "-o", str(bundle), "-q")
    before = bundle.read_bytes()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    assert run("-m", "aot.cli.build", str(bad), "-o", str(bundle), check=False).returncode != 0
    assert bundle.read_bytes() == before


def test_runtime_cli_errors(tmp_path, small_bundle):
    bundle = tmp_path / "m.aotb"
    bundle.write_bytes(small_bundle)
    result = run("-m", "runtime_lite", "run", str(bundle), check=False)
    assert result.returncode == 1 and "no value for input x: float32[1,3,8,8]" in result.stderr
    np.save(tmp_path / "wrong.npy", np.zeros((2, 2), np.float32))
    result = run("-m", "runtime_lite", "run", str(bundle), "--input", f"x={tmp_path / 'wrong.npy'}", check=False)
    assert result.returncode == 1 and "input 'x'" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "junk.aotb").write_bytes(b"junk")
    result = run("-m", "runtime_lite", "run", str(tmp_path / "junk.aotb"), "--random-inputs", check=False)
    assert result.returncode == 1 and result.stderr.startswith("error: not an aot bundle")
    assert run("-m", "runtime_lite", "run", str(bundle), "--random-inputs").returncode == 0


def test_min_region_size_keeps_small_regions_on_the_host(model_file, tmp_path):
    bundle = tmp_path / "m.aotb"
    out = run("-m", "aot.cli.build", str(model_file), "-o", str(bundle), "--target", "npu", "--min-region-size", "1000")
    (regions,) = [line for line in out.stdout.splitlines() if line.strip().startswith("regions")]
    assert "npu" not in regions and runtime_lite.load(bundle).modules == []
    assert "fewer than the 1000 npu offloads (--min-region-size)" in out.stdout  # the summary says why
    bad = run("-m", "aot.cli.build", str(model_file), "--target", "npu", "--min-region-size", "0", check=False)
    assert bad.returncode != 0 and "--min-region-size" in bad.stderr
