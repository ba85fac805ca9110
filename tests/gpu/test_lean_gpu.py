"""TensorRT's lean runtime on a real GPU: it imports, makes a runtime, refuses what it cannot run, runs what it can.

Skipped, with the reason, where the lean runtime (``tensorrt_lean`` or
``tensorrt_lean_bindings``), cuda-python or a CUDA device is missing. (On a machine
without a GPU the lean bindings 10.16 import, but a ``Runtime`` made there wraps a null
pointer and crashes the process when touched: never make one before the probe.)
"""

from __future__ import annotations

import importlib
import logging
import sys

import numpy as np
import pytest

import runtime_lite
from aot.compiler import build
from aot.compiler.backends.tensorrt import TensorRTOptions
from aot.testing import relative_l2
from runtime_lite.backends.tensorrt import gpu
from runtime_lite.backends.tensorrt.engine_cache import EngineCache
from runtime_lite.backends.tensorrt.spec import BuildSettings
from tests.helpers import build_and_load, conv_relu_graph


def _lean():
    for name in ("tensorrt_lean", "tensorrt_lean_bindings"):
        try:
            return importlib.import_module(name), None
        except ImportError as e:
            reason = f"TensorRT's lean runtime is not installed ({e})"
    return None, reason


def _reason() -> str | None:
    lean, reason = _lean()
    if lean is None:
        return reason
    try:
        from cuda.bindings import runtime as cudart
    except ImportError as e:
        return f"cuda-python is not installed ({e})"
    err, count = cudart.cudaGetDeviceCount()
    return None if err == cudart.cudaError_t.cudaSuccess and count else f"no CUDA device ({err})"


REASON = _reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
WEIGHT = np.random.default_rng(0).standard_normal((16, 3, 3, 3)).astype(np.float32)
DATA = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)


def test_the_lean_runtime_refuses_a_corrupt_engine():
    lean, _ = _lean()
    runtime = lean.Runtime(lean.Logger(lean.Logger.WARNING))
    assert runtime.deserialize_cuda_engine(b"not an engine" * 100) is None


@pytest.fixture
def probe_again():
    """The device probe forgets what it found, before and after the test (which changes the TensorRT seen)."""
    gpu.probe.cache_clear()
    gpu._modules.cache_clear()
    yield
    gpu.probe.cache_clear()
    gpu._modules.cache_clear()


def _built(tmp_path, **settings) -> bytes:
    pytest.importorskip("tensorrt", reason="building the engines needs the full TensorRT")
    options = TensorRTOptions(BuildSettings(**settings), cache=EngineCache(tmp_path / "cache"), progress=None)
    result = build(
        conv_relu_graph(WEIGHT), targets=["tensorrt"], min_region_size=1, backend_options={"tensorrt": options}
    )
    return result.to_bytes()


def test_a_module_runs_on_the_lean_runtime_alone(tmp_path, probe_again, monkeypatch, caplog):
    lean_bundle = _built(tmp_path, version_compatible=True, exclude_lean_runtime=True)
    plain_bundle = _built(tmp_path / "plain")
    gpu.probe.cache_clear()
    gpu._modules.cache_clear()
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # the lean runtime is now the only TensorRT
    assert gpu.probe()[0].runtime == "lean"
    module = runtime_lite.load(lean_bundle, backend_options={"tensorrt": {"allow_engine_build": False}})
    assert "from the bundle" in module.modules[0]["placement"], module.modules
    expected = build_and_load(conv_relu_graph(WEIGHT)).run({"data": DATA})[0]
    assert relative_l2(module.run({"data": DATA})[0], expected) <= 1e-3
    with caplog.at_level(logging.INFO, logger="runtime_lite.tensorrt"):
        refused = runtime_lite.load(plain_bundle, backend_options={"tensorrt": {"allow_engine_build": False}})
    assert "on the host" in refused.modules[0]["placement"] and "exclude-lean-runtime" in caplog.text
