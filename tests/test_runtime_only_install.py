"""Acceptance: `pip install ./runtime_lite` alone runs a bundle in a fresh virtual environment.

The venv has no aot, onnx, click, torch or tensorrt; two bundles (SqueezeNet with random
weights, partitioned for the virtual NPU, and for TensorRT, which without a GPU runs its
host fallback) are built here, run there in a new process, and the outputs compared.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import venv
from pathlib import Path

import numpy as np

import aot
import runtime_lite
from aot.testing import load_zoo_model
from aot.testing.zoo import zoo_input

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import sys
import numpy as np
import runtime_lite
module = runtime_lite.load(sys.argv[1])
outputs = module.run({k: np.load(v) for k, v in zip(sys.argv[2::2], sys.argv[3::2])})
np.save("out.npy", outputs[0])
for name in ("aot", "onnx", "click", "torch", "onnxruntime", "openvino", "tensorrt"):
    try:
        __import__(name)
    except ImportError:
        continue
    raise SystemExit(f"{name} is importable in the runtime-only environment")
print(runtime_lite.__version__, runtime_lite.__file__)
"""


def test_runtime_alone_runs_a_bundle_in_a_fresh_venv(tmp_path):
    source = tmp_path / "src" / "runtime_lite"
    shutil.copytree(ROOT / "runtime_lite", source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    env_dir = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a checkout on it would shadow the venv's copy
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", str(source)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert install.returncode == 0, install.stderr[-2000:]

    model = load_zoo_model("squeezenet")
    feeds = zoo_input(model)
    for target in ("npu", "tensorrt"):
        bundle = tmp_path / f"squeezenet-{target}.aotb"
        result = aot.build(model, targets=[target])
        assert [m["backend"] for m in result.header["modules"]] and all(
            m["backend"] == target for m in result.header["modules"]
        ), f"the bundle should exercise the {target} backend"
        result.save(bundle)
        args = [str(bundle)]
        for name, array in feeds.items():
            np.save(tmp_path / "input.npy", array)
            args += [name, str(tmp_path / "input.npy")]
        work = tmp_path / f"work-{target}"
        work.mkdir()
        result = subprocess.run([str(python), "-c", SCRIPT, *args], capture_output=True, text=True, cwd=work, env=env)
        assert result.returncode == 0, result.stderr[-2000:]
        assert str(env_dir) in result.stdout  # the venv's own copy ran, not this checkout
        np.testing.assert_array_equal(np.load(work / "out.npy"), runtime_lite.load(bundle).run(feeds)[0])
        bench = subprocess.run(  # the console script the runtime-only package installs
            [str(env_dir / "bin" / "runtime-lite"), "bench", str(bundle), "--random-inputs", "--iterations", "2",
             "--json"], capture_output=True, text=True, env=env,
        )  # fmt: skip
        assert bench.returncode == 0, bench.stderr[-2000:]
        assert json.loads(bench.stdout)["iterations"] == 2
