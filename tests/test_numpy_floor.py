"""runtime_lite on the oldest numpy and msgpack it declares, not only on the numpy 2 it is developed on.

runtime_lite/pyproject.toml declares ``numpy>=1.24`` and ``msgpack>=1.0`` (and ``onnxruntime>=1.17`` for
``runtime-lite[onnxruntime]``), and production hosts often hold numpy at 1.2x for other libraries. So
this test makes a venv holding only those floors (the oldest release of each with a wheel for this
Python, from the package index; pip's cache makes a rerun quick), installs runtime_lite there with
``--no-deps``, and runs bundles built here in a fresh process there (tests/numpy_floor_child.py):
every in-scope ONNX node test (the kernels, dtype by dtype), a CNN on the host, the NPU, in int8 and
with a symbolic batch, regions on TensorRT's host fallback and on onnxruntime (one of them a pool that
onnxruntime before 1.29 averages wrongly, which must run on the host plan there); then the serving
protocol, the GEMM pool's errstate and the CLI. Outputs must equal this process's in type, dtype and
shape, exactly for integers and within 1e-5 for floats (each numpy ships its own OpenBLAS and SIMD
loops: a last-bit difference is not a bug).

Without the package index the venv cannot be made: in CI (``CI`` set, as .ci/run sets it) that fails
the test; elsewhere it skips saying why, as tests/test_inspect.py treats a missing program.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import aot
import runtime_lite
from aot.testing import onnx_node
from tests.conftest import small_cnn_model
from tests.helpers import make_model, rand
from tests.missing import missing

ROOT = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("numpy_floor_child.py")

#: The oldest release of each declared floor with a wheel for this Python (pip cannot resolve to the oldest
#: itself; msgpack 1.0.0-1.0.2 have none for 3.10+, and would install as pure Python from source). On
#: Python 3.10 each is of the declared floor's own minor release; newer Pythons start later.
FLOORS = {
    (3, 10): {"numpy": "1.24.0", "msgpack": "1.0.3", "onnxruntime": "1.17.0"},
    (3, 11): {"numpy": "1.24.0", "msgpack": "1.0.5", "onnxruntime": "1.17.0"},
    (3, 12): {"numpy": "1.26.0", "msgpack": "1.0.6", "onnxruntime": "1.17.0"},
    (3, 13): {"numpy": "2.1.0", "msgpack": "1.1.0", "onnxruntime": "1.20.0"},
}
#: Python 3.11's -P: the script's directory (or the working one) not first on sys.path. The child runs from a
#: directory without runtime_lite in it either way; report.json's ``runtime_lite`` says which copy ran.
WITHOUT_SCRIPT_DIR = ["-P"] if sys.version_info >= (3, 11) else []
#: The bundle the serving protocol answers for (one float32 input).
SERVED = "cnn-host"


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def declared_floors() -> dict[str, str]:
    """``name -> version`` of every ``name>=version`` in runtime_lite/pyproject.toml (dependencies and extras)."""
    text = (ROOT / "runtime_lite" / "pyproject.toml").read_text()
    return dict(re.findall(r'"(numpy|msgpack|onnxruntime)>=([0-9.]+)"', text))


def test_the_pinned_versions_are_the_declared_floors():
    """Raising a floor in runtime_lite/pyproject.toml must move this test's pins with it (and the reverse)."""
    declared = declared_floors()
    assert set(declared) == {"numpy", "msgpack", "onnxruntime"}, declared
    for python, pins in FLOORS.items():
        for name, version in pins.items():
            assert _release(version) >= _release(declared[name]), f"Python {python}: {name} {version} < {declared}"
    oldest = FLOORS[min(FLOORS)]
    for name, version in declared.items():
        assert _release(oldest[name])[:2] == _release(version)[:2], f"{name}: pinned {oldest[name]}, declared {version}"


def _cases() -> list[tuple[str, bytes, list[np.ndarray]]]:
    """(name, bundle, inputs) of every bundle the floor venv runs."""
    cases = []
    for case in onnx_node.cases():
        if onnx_node.by_design(case):
            continue
        try:
            built = onnx_node.build(case)
        except onnx_node.Refused:
            continue
        for which, (bundle, feed, _) in enumerate(built.data_sets):
            cases.append((f"node-{case.name}-{which}", bundle, feed))
    x = rand(1, 3, 8, 8, seed=11)
    cnn = small_cnn_model()
    for target in ("host", "npu", "tensorrt", "onnxruntime"):
        cases.append((f"cnn-{target}", aot.build(cnn, targets=[target], log=None).to_bytes(), [x]))
    calibration = [{"x": rand(1, 3, 8, 8, seed=s)} for s in range(20)]
    int8 = aot.build(cnn, targets=["npu"], quantize=aot.QuantizeConfig(calibration), log=None)
    cases.append(("cnn-npu-int8", int8.to_bytes(), [x]))
    batched = aot.build(small_cnn_model(batch="N"), log=None).to_bytes()
    cases.append(("cnn-batch-3", batched, [rand(3, 3, 8, 8, seed=12)]))
    pool = helper.make_node(
        "AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
        count_include_pad=1,
    )  # fmt: skip
    feeds = {"x": rand(1, 2, 10, 10, seed=13)}
    pooled = aot.build(make_model([pool], feeds, ["y"]), targets=["onnxruntime"], log=None).to_bytes()
    cases.append(("average-pool-ceil-on-onnxruntime", pooled, [feeds["x"]]))
    return cases


def _pip(python: Path, *args: str) -> None:
    """pip in the floor venv; where it fails, a failure in CI and a skip saying why elsewhere."""
    command = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args]
    result = subprocess.run(command, capture_output=True, text=True, env=_clean_env(), timeout=300)
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()] or ["(no output)"]
        missing(f"pip could not reach the package index to install {' '.join(args)}: {lines[-1][:300]}")


def _clean_env() -> dict[str, str]:
    """This environment without PYTHONPATH (a checkout on it would shadow the venv's copy of runtime_lite); two
    OpenBLAS threads, so the GEMM pool exists on any machine."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OPENBLAS_NUM_THREADS"] = "2"
    return env


@pytest.fixture(scope="module")
def floor():
    """The floor venv's python, the cases, this process's outputs and the child's report and outputs."""
    pins = FLOORS.get(sys.version_info[:2])
    if pins is None:
        pytest.fail(f"add Python {sys.version_info[0]}.{sys.version_info[1]}'s oldest wheels to FLOORS")
    with tempfile.TemporaryDirectory(prefix="numpy-floor-") as temporary:
        work = Path(temporary)
        venv.create(work / "venv", with_pip=True)
        python = work / "venv" / "bin" / "python"
        _pip(python, "--only-binary=:all:", "--no-deps", *(f"{name}=={version}" for name, version in pins.items()))
        source = work / "src" / "runtime_lite"
        shutil.copytree(
            ROOT / "runtime_lite", source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
        )
        _pip(python, "--no-deps", str(source))
        cases_dir, out = work / "cases", work / "out"
        cases_dir.mkdir()
        out.mkdir()
        cases, expected = _cases(), {}
        for name, bundle, inputs in cases:
            (cases_dir / f"{name}.aotb").write_bytes(bundle)
            np.savez(cases_dir / f"{name}.inputs.npz", *inputs)
            expected[name] = runtime_lite.load(bundle).run(inputs)
        (cases_dir / "manifest.json").write_text(json.dumps([{"name": name} for name, _, _ in cases]))
        child = subprocess.run(
            [str(python), *WITHOUT_SCRIPT_DIR, str(shutil.copy(CHILD, work)), str(cases_dir), str(out), SERVED],
            capture_output=True, text=True, cwd=work, env=_clean_env(), timeout=300,
        )  # fmt: skip
        assert child.returncode == 0, child.stderr[-3000:]
        report = json.loads((out / "report.json").read_text())
        yield {"python": python, "pins": pins, "work": work, "cases": cases, "expected": expected, "out": out,
               "report": report}  # fmt: skip


def _difference(got: np.ndarray, want: np.ndarray) -> str | None:
    if (got.dtype, got.shape) != (want.dtype, want.shape):
        return f"{got.dtype}{list(got.shape)}, here {want.dtype}{list(want.shape)}"
    if want.dtype.kind in "fc":
        close = np.isclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        return None if close.all() else f"{int((~close).sum())} of {got.size} values differ by more than 1e-5"
    return None if np.array_equal(got, want) else f"{int((got != want).sum())} of {got.size} values differ"


def test_the_floor_venv_ran_the_floor_versions_and_its_own_runtime_lite(floor):
    report = floor["report"]
    assert {name: report[name] for name in floor["pins"]} == floor["pins"]
    assert report["runtime_lite"].startswith(str(floor["work"] / "venv")), report["runtime_lite"]
    assert report["pool"], "the GEMM pool did not start: its errstate check proved nothing"


def test_every_bundle_gives_the_same_outputs_on_the_floor(floor):
    assert len(floor["cases"]) > 1000  # the node tests are there
    wrong = []
    for name, want in floor["expected"].items():
        with np.load(floor["out"] / f"{name}.npz") as stored:
            got = [stored[f"arr_{i}"] for i in range(len(stored.files))]
        if len(got) != len(want):
            wrong.append(f"{name}: {len(got)} outputs, here {len(want)}")
            continue
        wrong += [f"{name} output {k}: {d}" for k, (g, w) in enumerate(zip(got, want)) if (d := _difference(g, w))]
    assert not wrong, "\n".join(wrong[:20])


def test_an_onnxruntime_region_runs_there_unless_that_release_gets_it_wrong(floor):
    placements = floor["report"]["placements"]
    assert placements["cnn-onnxruntime"] == {"onnxruntime_0": "onnxruntime"}
    fixed = _release(floor["report"]["onnxruntime"]) >= (1, 29)
    assert placements["average-pool-ceil-on-onnxruntime"] == {"onnxruntime_0": "onnxruntime" if fixed else "host"}


def test_the_serving_protocol_answers_as_the_module_runs(floor):
    want = floor["expected"][SERVED][0]
    with np.load(floor["out"] / "served.npz") as served:
        for kind in ("json", "binary"):
            assert _difference(served[kind], want) is None, kind


def test_the_cli_runs_info_run_and_bench_on_the_floor(floor, tmp_path):
    python, cases = floor["python"], floor["work"] / "cases"
    bundle = str(cases / f"{SERVED}.aotb")
    (x,) = next(inputs for name, _, inputs in floor["cases"] if name == SERVED)
    np.save(tmp_path / "x.npy", x)

    def cli(*args: str) -> subprocess.CompletedProcess:
        command = [str(python), *WITHOUT_SCRIPT_DIR, "-m", "runtime_lite", *args]
        result = subprocess.run(command, capture_output=True, text=True, env=_clean_env(), cwd=tmp_path, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        return result

    assert "output probs: float32[1,10]" in cli("info", bundle).stdout
    cli("run", bundle, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "out"))
    assert _difference(np.load(tmp_path / "out" / "probs.npy"), floor["expected"][SERVED][0]) is None
    bench = json.loads(cli("bench", bundle, "--iterations", "2", "--warmup", "1", "--json").stdout)
    assert bench["iterations"] == 2 and "numpy " + floor["pins"]["numpy"] in bench["host"]
