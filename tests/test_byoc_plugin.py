"""Acceptance: a backend brought as its own pip package, with no edit to aot or runtime_lite.

``examples/byoc_plugin`` (backend ``myaccel``) is pip-installed into a fresh virtual
environment layered over this one; there ``aot-build --target myaccel`` partitions
and builds zoo models, and a new process in which aot, onnx, click and torch cannot
be imported loads and runs the bundle with runtime_lite. Outputs must match
onnxruntime. This process, which does not have the plugin, must refuse the bundle
with one line saying which backend to install.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import runtime_lite
from aot.testing import load_zoo_model, relative_l2
from aot.testing.zoo import zoo_input
from tests.child_env import child_venv
from tests.helpers import make_model, onnxruntime_outputs, rand
from tests.source_tree import python_sources

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "byoc_plugin"
MODELS = ("resnet50", "squeezenet", "shufflenet")

#: Runs in the plugin's environment as a runtime-only host: the compiler's packages cannot be imported.
RUN_WITHOUT_COMPILER = """
import importlib.abc, json, sys
class NoCompiler(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("aot", "onnx", "click", "torch", "onnxruntime"):
            raise ImportError(f"{name} is not installed on this deployment host")
sys.meta_path.insert(0, NoCompiler())
import numpy as np
import runtime_lite
module = runtime_lite.load(sys.argv[1])
feeds = {name: np.load(path) for name, path in json.loads(sys.argv[2]).items()}
np.save(sys.argv[3], module.run(feeds)[0])
print(json.dumps(module.placement))
"""


@pytest.fixture(scope="module")
def plugin_python(tmp_path_factory) -> Path:
    """A venv over this environment (aot and runtime_lite visible) with the plugin pip-installed."""
    env_dir = tmp_path_factory.mktemp("plugin") / "venv"
    python = child_venv(env_dir, with_pip=True)
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-deps", str(PLUGIN)],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    return python


def _aot_build(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "aot.cli.build", *args], capture_output=True, text=True)


@pytest.mark.parametrize("name", MODELS)
def test_plugin_backend_builds_and_runs_zoo_models_like_onnxruntime(plugin_python, tmp_path, name):
    model = load_zoo_model(name, random_weights=True)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    bundle = tmp_path / f"{name}.aotb"
    built = _aot_build(plugin_python, str(path), "--target", "myaccel", "-o", str(bundle))
    assert built.returncode == 0, built.stderr[-2000:]
    assert "myaccel: " in built.stdout and " regions" in built.stdout  # the summary's regions line

    feeds = zoo_input(model)
    files = {}
    for i, (input_name, array) in enumerate(feeds.items()):
        files[input_name] = str(tmp_path / f"in{i}.npy")
        np.save(files[input_name], array)
    out = tmp_path / "out.npy"
    ran = subprocess.run(
        [str(plugin_python), "-c", RUN_WITHOUT_COMPILER, str(bundle), json.dumps(files), str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    placement = json.loads(ran.stdout)
    assert placement and all(p == {"backend": "myaccel", "runs_on": "myaccel", "detail": p["detail"]}
                             for p in placement.values())  # fmt: skip
    expected = onnxruntime_outputs(model, feeds, threads=2)[0]
    assert relative_l2(np.load(out), expected) <= 1e-5

    inspected = subprocess.run([str(plugin_python), "-m", "aot.cli.inspect", str(bundle)], capture_output=True,
                               text=True)  # fmt: skip
    assert inspected.returncode == 0 and "region    myaccel_0 on myaccel" in inspected.stdout

    with pytest.raises(runtime_lite.BundleError, match="needs backend 'myaccel'.*install the package"):
        runtime_lite.load(bundle)  # this environment has no myaccel


def test_plugin_checks_say_why_an_op_stays_on_the_host(plugin_python, tmp_path):
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], dilations=[2, 2], pads=[2, 2, 2, 2]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    path = tmp_path / "dilated.onnx"
    onnx.save(make_model(nodes, {"x": rand(1, 3, 16, 16)}, ["y"], initializers={"w": rand(4, 3, 3, 3)}), path)
    built = _aot_build(plugin_python, str(path), "--target", "myaccel", "--print-graph", "-o", str(tmp_path / "d.aotb"))
    assert built.returncode == 0, built.stderr[-2000:]
    assert "stays on the host: myaccel.conv2d_act: conv2d" in built.stdout
    assert "dilations [2, 2] not supported by myaccel" in built.stdout
    assert "myaccel left on the host: refused conv2d, relu" in built.stdout


def test_targets_and_options_of_installed_plugins_are_listed_and_checked(plugin_python, tmp_path):
    listed = _aot_build(plugin_python, "--list-backends")  # no MODEL: it is not needed
    assert listed.returncode == 0 and "myaccel (min region 1 ops" in listed.stdout
    typo = _aot_build(plugin_python, str(tmp_path / "m.onnx"), "--target", "myacel")
    assert (
        typo.returncode != 0
        and "unknown target 'myacel' (installed: host, auto, myaccel, npu, onnxruntime, openvino, tensorrt)"
        in typo.stderr
    )
    backends = subprocess.run([str(plugin_python), "-m", "runtime_lite", "backends"], capture_output=True, text=True)
    assert "myaccel (available)" in backends.stdout and "myaccel.check_finite" in backends.stdout


def test_a_plugin_needs_no_edit_to_aot_or_runtime_lite():
    """The only names of the plugin are in its own package: aot and runtime_lite never mention it."""
    for package in ("aot", "runtime_lite"):
        for source in python_sources(package):
            assert "myaccel" not in source.read_text(), f"{source} names the plugin"
    assert sys.modules.get("myaccel") is None
