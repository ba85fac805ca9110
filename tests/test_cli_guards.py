"""aot-build never overwrites what the user did not mean, refuses flags that would do nothing, and
prints a summary whose figures agree with each other; both CLIs exit 130 on Ctrl-C with one line."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import small_cnn_model

ROOT = Path(__file__).resolve().parents[1]


def aot_build(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aot.cli.build", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


@pytest.fixture
def model_file(tmp_path) -> Path:
    path = tmp_path / "small.onnx"
    path.write_bytes(small_cnn_model().SerializeToString())
    return path


def test_output_equal_to_the_input_model_is_refused(model_file):
    before = model_file.read_bytes()
    result = aot_build(str(model_file), "-o", str(model_file))
    assert result.returncode == 1 and "is the input model" in result.stderr
    assert model_file.read_bytes() == before


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
def test_output_that_is_a_device_is_refused_and_left_alone(model_file, device):
    result = aot_build(str(model_file), "-o", device)
    assert result.returncode == 1 and "not a regular file" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert stat.S_ISCHR(os.stat(device).st_mode)


def test_output_that_is_a_directory_is_refused_in_one_line(model_file, tmp_path):
    """As docs/tools.md says: one line, not click's usage block."""
    result = aot_build(str(model_file), "-o", str(tmp_path))
    assert (
        result.returncode == 1
        and result.stderr.strip() == f"Error: cannot write bundle '{tmp_path}': it is a directory"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.onnx"]  # nothing written into it


def test_output_that_is_a_fifo_is_refused_without_blocking(model_file, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    result = aot_build(str(model_file), "-o", str(fifo))
    assert result.returncode == 1 and "not a regular file" in result.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_fp16_without_tensorrt_is_refused(model_file, tmp_path):
    result = aot_build(str(model_file), "-o", str(tmp_path / "m.aotb"), "--precision", "fp16", "--target", "npu")
    assert (
        result.returncode == 1
        and "backend options given for tensorrt, which is not a target of this build; add --target tensorrt"
        in result.stderr
    )
    assert not (tmp_path / "m.aotb").exists()


def test_summary_figures_agree(model_file, tmp_path):
    result = aot_build(str(model_file), "-o", str(tmp_path / "m.aotb"), "--target", "npu", "--min-region-size", "1")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    total = int(re.search(r"-> (\d+) ops", out).group(1))
    regions_line = next(line for line in out.splitlines() if line.strip().startswith("regions"))
    assert total == sum(int(n) for n in re.findall(r"(\d+) ops", regions_line)), out
    ops_line = next(line for line in out.splitlines() if line.strip().startswith("ops "))
    assert total == sum(int(n) for n in re.findall(r" (\d+)(?:,|$)", ops_line)), out
    size = (tmp_path / "m.aotb").stat().st_size
    assert f"bundle   {size / 1e3:.1f} kB" in out  # a small bundle is not "0.0 MB"
    assert "besides what the" in out and "backend regions hold" in out


def test_aot_build_interrupted_exits_130_in_one_line(model_file, tmp_path, monkeypatch):
    from aot.cli import build as cli

    def interrupted(*args, **kwargs):  # a test double for a Ctrl-C arriving mid-build
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build", interrupted)
    result = CliRunner().invoke(cli.main, [str(model_file), "-o", str(tmp_path / "m.aotb")])
    assert result.exit_code == 130 and result.output.strip().splitlines()[-1] == "interrupted"


def test_runtime_lite_interrupted_exits_130_in_one_line(tmp_path, monkeypatch, capsys):
    import runtime_lite
    from runtime_lite.tools import cli

    def interrupted(*args, **kwargs):  # a test double for a Ctrl-C arriving mid-load
        raise KeyboardInterrupt

    monkeypatch.setattr(runtime_lite, "load", interrupted)
    assert cli.main(["info", str(tmp_path / "any.aotb")]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_model_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    result = aot_build(str(fifo), "-o", str(tmp_path / "m.aotb"))  # a hang is a TimeoutExpired
    assert result.returncode == 1 and "Traceback" not in result.stderr
    refusal = f"Error: model '{fifo}' is not a regular file (a FIFO, device or socket); give an .onnx or .pt2 file"
    assert result.stderr.strip() == refusal
    assert not (tmp_path / "m.aotb").exists()


def test_empty_model_file_is_said_to_be_empty(tmp_path):
    from aot.cli import build as cli

    empty = tmp_path / "model.onnx"
    empty.write_bytes(b"")
    result = CliRunner().invoke(cli.main, [str(empty), "-o", str(tmp_path / "m.aotb")])
    assert result.exit_code == 1 and result.output == f"Error: model file '{empty}' is empty\n"


def test_the_onnx_loader_refuses_a_fifo_and_an_empty_file_too(tmp_path):
    """aot.build(path) from Python: the same refusals as the command, from the ONNX frontend."""
    fifo, empty = tmp_path / "fifo.onnx", tmp_path / "empty.onnx"
    os.mkfifo(fifo)
    empty.write_bytes(b"")
    script = (
        "import sys, aot\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        aot.build(path)\n"
        "    except aot.errors.ModelError as e:\n"
        "        print(e)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(fifo), str(empty)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.stdout.splitlines() == [
        f"cannot read model file '{fifo}': not a regular file",
        f"model file '{empty}' is empty",
    ], result.stderr


@pytest.mark.parametrize(
    "shape, words",
    [
        ("99999999999999999999x3x8x8", "dim 99999999999999999999 is larger than a tensor may be"),
        ("1..99999999999999999999x3x8x8", "dim 99999999999999999999 is larger than a tensor may be"),
        ("1048576x1048576x3x8", "26388279066624 elements, more than a tensor may hold"),
        ("x".join(["1"] * 33), "33 dims, more than a bundle holds (32)"),
    ],
)
def test_input_dims_past_what_a_bundle_holds_name_the_input_option(model_file, tmp_path, shape, words):
    from aot.cli import build as cli

    result = CliRunner().invoke(cli.main, [str(model_file), "-o", str(tmp_path / "m.aotb"), "--input", f"x:{shape}"])
    assert result.exit_code == 1 and result.output.startswith(f"Error: --input 'x:{shape}': {words}"), result.output
    assert len(result.output.splitlines()) == 1, result.output
    assert not (tmp_path / "m.aotb").exists()


def test_a_shape_given_twice_for_one_input_is_one_line(model_file, tmp_path):
    from aot.cli import build as cli

    args = [str(model_file), "-o", str(tmp_path / "m.aotb"), "--input", "x:1x3x32x32", "--input", "x:2x3x32x32"]
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 1, result.output
    assert result.output.strip() == "Error: --input 'x:2x3x32x32': input 'x' was given a shape already", result.output
    assert not (tmp_path / "m.aotb").exists()
