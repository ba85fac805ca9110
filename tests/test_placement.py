"""Placement policy: run anywhere with one WARNING per fallen-back module, or fail fast with require=."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aot
import runtime_lite
from runtime_lite.execution.placement import normalize_require
from tests.conftest import small_cnn_model

ROOT = Path(__file__).resolve().parents[1]
X = np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("placement")
    paths = {name: root / f"{name}.aotb" for name in ("host", "npu", "tensorrt")}
    aot.build(small_cnn_model()).save(paths["host"])
    aot.build(small_cnn_model(), targets=["npu"]).save(paths["npu"])
    aot.build(small_cnn_model(), targets=["tensorrt"], min_region_size=1).save(paths["tensorrt"])
    return paths


def _tensorrt_runs_here() -> bool:
    from runtime_lite.backends.tensorrt.gpu import GpuUnavailable, probe

    try:
        probe()
    except GpuUnavailable:
        return False
    return True


pytestmark = pytest.mark.skipif(
    _tensorrt_runs_here(),
    reason="TensorRT and a GPU are here: the host fallback these tests need does not happen (tests/gpu covers them)",
)


def test_fallback_runs_and_warns_once_per_module(bundles, caplog):
    with caplog.at_level(logging.INFO):
        module = runtime_lite.load(bundles["tensorrt"])
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].name == "runtime_lite.placement", [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert "'tensorrt_0' compiled for tensorrt runs on the host" in message and "require" in message
    assert module.placement["tensorrt_0"]["backend"] == "tensorrt"
    assert module.placement["tensorrt_0"]["runs_on"] == "host"
    np.testing.assert_allclose(module.run([X])[0], runtime_lite.load(bundles["host"]).run([X])[0], rtol=1e-5)


def test_require_fails_fast_naming_the_module_and_what_is_missing(bundles):
    with pytest.raises(runtime_lite.PlacementError) as error:
        runtime_lite.load(bundles["tensorrt"], require=("tensorrt",))
    message = str(error.value)
    assert "'tensorrt_0'" in message and "runs on the host" in message and "tensorrt is not installed" in message
    assert "\n" not in message


def test_require_a_backend_the_bundle_does_not_use(bundles):
    with pytest.raises(runtime_lite.PlacementError, match="required backend tensorrt has no module.*npu"):
        runtime_lite.load(bundles["npu"], require="tensorrt")
    with pytest.raises(runtime_lite.PlacementError, match="everything runs on the host"):
        runtime_lite.load(bundles["host"], require=["npu"])


def test_modules_that_run_as_compiled_need_no_warning(bundles, caplog):
    with caplog.at_level(logging.WARNING):
        module = runtime_lite.load(bundles["npu"], require="npu")
    assert not caplog.records
    assert module.placement and all(p == {"backend": "npu", "runs_on": "npu"} for p in module.placement.values())
    assert runtime_lite.load(bundles["host"]).placement == {}


def test_require_names_are_normalised():
    assert normalize_require(None) == ()
    assert normalize_require("tensorrt, npu") == ("tensorrt", "npu")
    assert normalize_require(["npu", "npu,tensorrt"]) == ("npu", "tensorrt")
    with pytest.raises(TypeError, match="strings"):
        normalize_require([3])


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime_lite", *args], capture_output=True, text=True, cwd=ROOT)


def test_cli_require_is_one_line_and_the_default_warns(bundles):
    refused = _cli("run", str(bundles["tensorrt"]), "--random-inputs", "--require", "tensorrt")
    assert refused.returncode == 1 and refused.stderr.startswith("error: module 'tensorrt_0'"), refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "ran in" not in refused.stdout
    ran = _cli("run", str(bundles["tensorrt"]), "--random-inputs")
    assert ran.returncode == 0 and ran.stderr.count("WARNING runtime_lite.placement") == 1, ran.stderr
    info = _cli("info", str(bundles["tensorrt"]))
    assert "module tensorrt_0 on backend tensorrt, runs on host" in info.stdout
    assert _cli("bench", str(bundles["tensorrt"]), "--random-inputs", "--require", "tensorrt").returncode == 1
