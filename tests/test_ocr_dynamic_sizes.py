"""Issue 39's acceptance on real files: PaddleOCR's detector, recognizer and orientation classifier.

Each is written by paddle2onnx with symbolic dims (``p2o.DynamicDimension.0``, ``?``) and shipped in
``rapidocr-onnxruntime`` (tests/ocr_data.py). Each is built once without ``--input``, then run in a
fresh process (no compiler imported) at several sizes: widths the recognizer's stride does not
divide (77, 100), the detector on rendered text pages (its output on noise is ~1e-7 everywhere),
and an extreme of a bounded build. Outputs are held to 1e-4 relative L2 of onnxruntime on the same
file, on the host plan and ``--target onnxruntime`` (one region: shapes computed at run time stay
inside it); ``--target npu`` and ``--target tensorrt`` build, run, and say why what cannot be
static stays on the host.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import aot
from tests.ocr_data import model_path, render_line, text_page

ROOT = Path(__file__).resolve().parents[1]
#: (height, width) per model: the detector needs multiples of 32 (its FPN adds stride-32 maps to
#: upsampled ones); the recognizer and classifier take any width, 77 and 100 not a multiple of their stride.
SIZES = {
    "det": [(96, 160), (128, 128), (256, 480)],
    "rec": [(48, 77), (48, 192), (48, 320)],
    "cls": [(48, 77), (48, 100), (48, 192)],
}
TOLERANCE = 1e-4  # relative L2; measured: below 1e-5 on each (float32 summation order differs)

#: Run in a fresh process: load each bundle, run each input, save the outputs (no aot, no onnx imported).
CHILD = """
import json, sys
from pathlib import Path
import numpy as np
import runtime_lite
job = json.loads(sys.argv[1])
for name, bundle in job["bundles"].items():
    module = runtime_lite.load(bundle)
    placement = {k: v["runs_on"] for k, v in module.placement.items()}
    print(json.dumps({"bundle": name, "placement": placement, "aot_imported": "aot" in sys.modules}))
    for path in sorted(Path(job["inputs"]).glob("*.npy")):
        (out,) = module.run([np.load(path)])
        np.save(Path(job["outputs"]) / f"{name}-{path.name}", out)
"""


def _input(kind: str, height: int, width: int) -> np.ndarray:
    if kind == "det":
        return text_page(height, width, seed=height * width)
    rng = random.Random(width)
    return render_line("Invoice 4021" if width > 100 else "Tax 12", rng, width=width)


def _run_fresh(bundles: dict[str, Path], inputs: Path, outputs: Path) -> list[dict]:
    job = json.dumps(
        {"bundles": {k: str(v) for k, v in bundles.items()}, "inputs": str(inputs), "outputs": str(outputs)}
    )
    done = subprocess.run(
        [sys.executable, "-c", CHILD, job], capture_output=True, text=True, cwd=ROOT, timeout=600,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(outputs)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _rel_l2(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


@pytest.mark.parametrize("kind", sorted(SIZES))
def test_built_once_without_input_each_runs_every_size_in_a_fresh_process(kind, tmp_path):
    source = model_path(kind)
    bundles = {}
    for target in ("host", "onnxruntime"):
        result = aot.build(str(source), targets=[target], log=None)
        if target == "onnxruntime":  # one region: nothing computed from shapes is left between regions
            assert result.regions == {"host": 0, "onnxruntime": sum(result.regions.values())}, result.regions
            assert len(result.header["modules"]) == 1
        bundles[target] = tmp_path / f"{kind}-{target}.aotb"
        result.save(bundles[target])
    inputs, outputs = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    outputs.mkdir()
    feeds = {f"{h}x{w}.npy": _input(kind, h, w) for h, w in SIZES[kind]}
    for name, x in feeds.items():
        np.save(inputs / name, x)
    reports = _run_fresh(bundles, inputs, outputs)
    assert not any(r["aot_imported"] for r in reports)
    assert {r["bundle"]: sorted(set(r["placement"].values())) for r in reports} == {
        "host": [],
        "onnxruntime": ["onnxruntime"],
    }
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    for name, x in feeds.items():
        (expected,) = session.run(None, {"x": x})
        for target in bundles:
            actual = np.load(outputs / f"{target}-{name}")
            assert actual.shape == expected.shape, (target, name)
            assert _rel_l2(actual, expected) <= TOLERANCE, (target, name, _rel_l2(actual, expected))


def test_a_size_the_detector_cannot_take_is_one_line_naming_where(tmp_path):
    """123x77 is no multiple of 32: onnxruntime refuses the file itself; both bundles refuse in one line."""
    import runtime_lite

    x = text_page(123, 77)
    with pytest.raises(Exception, match="Concat|Add"):  # onnxruntime's own refusal
        ort.InferenceSession(str(model_path("det")), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for target in ("host", "onnxruntime"):
        module = runtime_lite.load(aot.build(str(model_path("det")), targets=[target], log=None).to_bytes())
        with pytest.raises(runtime_lite.errors.ExecutionError) as caught:
            module.run([x])
        message = str(caught.value)
        assert "\n" not in message and "broadcast" in message and ("Add" in message or "add" in message), message


MEMORY_CHILD = """
import json, sys
import numpy as np
import runtime_lite
bundle, low, high = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
module = runtime_lite.load(bundle)
module.run([np.zeros(low, np.float32)])
module.run([np.zeros(high, np.float32)])  # what a first run sets up (BLAS buffers, thread pools) is not the run's
x = np.random.default_rng(0).standard_normal(high).astype(np.float32)
status = lambda key: int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith(key))) * 1024
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets the peak (VmHWM) to what is resident now: the run's own peak is measured
before = status("VmRSS:")
module.run([x])
peak = status("VmHWM:")
print(json.dumps({"growth": peak - before, "peak": peak, "before": before,
                  "activations": module.worst_case_activation_bytes, "budget": module.worst_case_budget_bytes}))
"""


@pytest.mark.parametrize(
    "kind, bounds, low, high",
    [
        ("rec", (1, 3, 48, (16, 640)), (1, 3, 48, 16), (1, 3, 48, 640)),
        ("det", (1, 3, (64, 480), (64, 480)), (1, 3, 64, 64), (1, 3, 480, 480)),
    ],
)
def test_at_the_upper_bound_a_run_stays_within_the_stated_worst_case(kind, bounds, low, high, tmp_path):
    """Bounded builds state their worst case; a run at the upper bound (a fresh process, after a first run
    at each bound set up what any first run does) grows the peak RSS by no more than the stated budget + 10%,
    and both bounds' extremes match onnxruntime."""
    result = aot.build(str(model_path(kind)), input_shapes={"x": bounds}, log=None)
    bundle = tmp_path / f"{kind}.aotb"
    result.save(bundle)
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_CHILD, str(bundle), json.dumps(low), json.dumps(high)], capture_output=True,
        text=True, cwd=ROOT, timeout=600, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.splitlines()[-1])
    print(f"{kind} at {high}: peak RSS grew {figures['growth'] / 2**20:.1f} MiB; stated activations "
          f"{figures['activations'] / 2**20:.1f} MiB, budget {figures['budget'] / 2**20:.1f} MiB")  # fmt: skip
    assert figures["growth"] <= 1.1 * figures["budget"], figures
    import runtime_lite

    module = runtime_lite.load(result.to_bytes())
    session = ort.InferenceSession(str(model_path(kind)), providers=["CPUExecutionProvider"])
    for shape in (low, high):
        x = _input(kind, shape[2], shape[3])
        assert _rel_l2(module.run([x])[0], session.run(None, {"x": x})[0]) <= TOLERANCE, shape


@pytest.mark.parametrize("target, reason", [("npu", "static shapes"), ("tensorrt", "symbolic")])
def test_npu_and_tensorrt_build_run_and_state_why_run_time_sizes_stay_on_the_host(target, reason):
    import runtime_lite

    result = aot.build(str(model_path("cls")), targets=[target], log=None)
    notes = [n for n in result.notes if target in n]
    assert any(reason in n for n in notes), result.notes
    module = runtime_lite.load(result.to_bytes())
    session = ort.InferenceSession(str(model_path("cls")), providers=["CPUExecutionProvider"])
    for h, w in [(48, 77), (48, 192)]:
        x = _input("cls", h, w)
        assert _rel_l2(module.run([x])[0], session.run(None, {"x": x})[0]) <= TOLERANCE
