"""A newcomer's first hour (issue 30): the README's journeys and the small surprises on the way.

Each test runs the commands as a user types them, in subprocesses, and checks what they
print: work is refused before it starts when its output cannot be written, listings need
no model, and a target that gets nothing says how to fix it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aot
import runtime_lite
from tests.conftest import small_cnn_model
from tests.missing import require_program

ROOT = Path(__file__).resolve().parents[1]
SMALL_CNN = ROOT / "examples" / "models" / "small_cnn.onnx"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd)


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.lower().startswith("error")]


@pytest.fixture(scope="module")
def batched_bundle(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("first_hour") / "batched.aotb"
    aot.build(small_cnn_model(batch="N")).save(path)
    return path


def test_list_backends_needs_no_model():
    result = run("-m", "aot.cli.build", "--list-backends")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "host (always)" and "npu (min region" in result.stdout
    missing = run("-m", "aot.cli.build")  # without the flag MODEL is still required
    assert missing.returncode == 2 and "Missing argument 'MODEL'" in missing.stderr


def test_npu_on_the_shipped_model_says_how_to_fix_its_symbolic_batch(tmp_path):
    result = run("-m", "aot.cli.build", str(SMALL_CNN), "-o", str(tmp_path / "m.aotb"), "--target", "npu")
    assert result.returncode == 0, result.stderr
    assert "--input images:1x3x32x32" in result.stdout and "input_shapes={'images': (1, 3, 32, 32)}" in result.stdout
    fixed = run("-m", "aot.cli.build", str(SMALL_CNN), "-o", str(tmp_path / "f.aotb"), "--target", "npu",
                "--input", "images:1x3x32x32")  # fmt: skip
    assert "npu: 9 ops in 1 region" in fixed.stdout and "fix the symbolic dims" not in fixed.stdout


def test_the_readme_npu_example_is_true_as_written():
    npu = aot.build(str(SMALL_CNN), targets=["npu"], input_shapes={"images": (1, 3, 32, 32)})
    assert npu.regions == {"host": 0, "npu": 9}
    readme = (ROOT / "README.md").read_text()
    assert "print(npu.regions)  # ops per backend: {'host': 0, 'npu': 9}" in readme


def test_a_build_into_a_missing_folder_fails_before_compiling(tmp_path):
    result = run("-m", "aot.cli.build", str(SMALL_CNN), "-o", str(tmp_path / "missing" / "x.aotb"))
    assert result.returncode == 1
    assert error_lines(result) == [f"Error: cannot write bundle '{tmp_path / 'missing' / 'x.aotb'}': its folder "
                                   f"{tmp_path / 'missing'} does not exist"]  # fmt: skip
    assert "import" not in result.stderr and "built" not in result.stdout  # no stage ran


def test_run_profile_into_a_missing_folder_fails_before_running(batched_bundle, tmp_path):
    trace = tmp_path / "missing" / "t.json"
    result = run("-m", "runtime_lite", "run", str(batched_bundle), "--random-inputs", "--profile", str(trace))
    assert result.returncode == 1 and "ran in" not in result.stdout
    assert result.stderr.strip() == f"error: --profile '{trace}': its folder {trace.parent} does not exist"


def test_output_dir_naming_a_file_is_one_clear_line(batched_bundle, tmp_path):
    file = tmp_path / "out"
    file.write_text("")
    result = run("-m", "runtime_lite", "run", str(batched_bundle), "--random-inputs", "--output-dir", str(file))
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: --output-dir '{file}': it exists and is not a directory"


def test_inspect_graph_into_a_missing_folder_fails_before_the_summary(batched_bundle, tmp_path):
    drawing = tmp_path / "missing" / "x.onnx"
    result = run("-m", "aot.cli.inspect", str(batched_bundle), "--graph", str(drawing))
    assert result.returncode == 1 and result.stdout == ""
    assert error_lines(result) == [
        f"Error: cannot write --graph '{drawing}': its folder {drawing.parent} does not exist"
    ]


def test_bench_makes_random_inputs_by_default_and_says_so(batched_bundle):
    result = run("-m", "runtime_lite", "bench", str(batched_bundle), "--iterations", "2", "--warmup", "0")
    assert result.returncode == 0, result.stderr
    assert "no --input given: random inputs of the signature's shapes (seed 0)" in result.stderr
    assert "random inputs (seed 0)" in result.stdout.splitlines()[0]
    asked = run("-m", "runtime_lite", "bench", str(batched_bundle), "--random-inputs", "--iterations", "2", "--json")
    assert json.loads(asked.stdout)["inputs"] == "random inputs (seed 0)" and "no --input" not in asked.stderr


def test_a_misspelt_input_name_is_called_unknown(batched_bundle, tmp_path):
    data = tmp_path / "x.npy"
    np.save(data, np.zeros((1, 3, 8, 8), np.float32))
    result = run("-m", "runtime_lite", "run", str(batched_bundle), "--input", f"image={data}")
    assert result.returncode == 1
    assert result.stderr.strip().startswith(
        "error: unknown input 'image': this bundle's inputs are x: float32[N,3,8,8]"
    )


def test_loading_a_model_instead_of_a_bundle_says_to_compile_it():
    with pytest.raises(runtime_lite.BundleError, match="looks like an ONNX model: compile it with aot-build first"):
        runtime_lite.load(SMALL_CNN)


def test_counts_read_as_english(tmp_path):
    from aot.words import counted

    assert [counted(1, "type"), counted(2, "type"), counted(0, "box", "boxes")] == ["1 type", "2 types", "0 boxes"]
    result = run("-m", "aot.cli.build", str(SMALL_CNN), "-o", str(tmp_path / "m.aotb"))
    assert "(6 constants in 6 blobs)" in result.stdout and "9 instructions" in result.stdout


def test_no_engines_help_describes_the_switch():
    text = " ".join(run("-m", "aot.cli.build", "--help").stdout.split())
    assert "--no-engines tensorrt: write ONNX recipes only and build no engine" in text


def test_verbose_says_where_every_backend_module_runs(tmp_path):
    bundle = tmp_path / "npu.aotb"
    aot.build(str(SMALL_CNN), targets=["npu"], input_shapes={"images": (1, 3, 32, 32)}).save(bundle)
    result = run("-m", "runtime_lite", "info", str(bundle), "-v")
    assert result.returncode == 0, result.stderr
    placed = [line for line in result.stderr.splitlines() if line.startswith("INFO runtime_lite.placement")]
    assert placed == ["INFO runtime_lite.placement: module 'npu_0' compiled for npu runs on npu"]


def test_torch_dim_names_reach_the_signature():
    import torch  # the test extra installs it

    class Add(torch.nn.Module):
        def forward(self, x, y):
            return (x.relu() + y).reshape(x.shape[0], -1, 1)

    batch = torch.export.Dim("batch")
    example = (torch.randn(2, 3), torch.randn(2, 3))
    program = torch.export.export(Add(), example, dynamic_shapes={"x": {0: batch}, "y": {0: batch}})
    module = runtime_lite.load(aot.build(program).to_bytes())
    assert [s.shape for s in module.inputs] == [("batch", 3), ("batch", 3)]
    assert module.outputs[0].shape == ("batch", 3, 1)
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    (y,) = module.run([x, x])
    np.testing.assert_array_equal(y, Add()(torch.from_numpy(x), torch.from_numpy(x)).numpy())


def test_collapsed_drawing_counts_what_it_draws(tmp_path):
    require_program("dot", "graphviz")  # the .svg drawing is laid out by Graphviz
    bundle = tmp_path / "npu.aotb"
    aot.build(str(SMALL_CNN), targets=["npu"], input_shapes={"images": (1, 3, 32, 32)}).save(bundle)
    result = run("-m", "aot.cli.inspect", str(bundle), "--graph", str(tmp_path / "g.onnx"), "--collapse-regions")
    assert result.stdout.splitlines()[-1] == f"wrote 10 nodes to {tmp_path / 'g.onnx'}"  # .onnx is never collapsed
    result = run("-m", "aot.cli.inspect", str(bundle), "--graph", str(tmp_path / "g.svg"), "--collapse-regions")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"wrote 2 boxes (10 nodes, 1 region collapsed) to {tmp_path / 'g.svg'}"
