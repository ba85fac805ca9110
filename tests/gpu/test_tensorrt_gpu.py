"""Real TensorRT on a real GPU: run where tensorrt and cuda-python import and a CUDA device exists.

Elsewhere every test here is skipped, with the reason. These are the checks the
stand-in cannot make: TensorRT's parser accepts our recipes, the builder builds
them (strongly typed where the version has it), and the engines compute what the
host computes.
"""

from __future__ import annotations

import numpy as np
import pytest

import runtime_lite
from aot.compiler import build
from aot.compiler.backends.tensorrt import TensorRTOptions
from aot.testing import ZOO_MODELS, load_zoo_model, relative_l2
from aot.testing.zoo import zoo_input
from runtime_lite.backends.tensorrt.engine_cache import EngineCache
from runtime_lite.backends.tensorrt.gpu import GpuUnavailable, probe
from runtime_lite.backends.tensorrt.spec import BuildSettings
from tests.helpers import build_and_load, conv_relu_graph


def _real_gpu() -> str | None:
    try:
        device, trt, _ = probe()
    except GpuUnavailable as e:
        return f"no TensorRT GPU here: {e}"
    if "standins" in (getattr(trt, "__file__", "") or ""):
        return "tensorrt is the test stand-in, not the real library"
    if getattr(device, "runtime", None) == "lean":  # runs engines, builds none: tests/gpu/test_lean_gpu.py
        return f"only TensorRT's lean runtime is here ({device}); building engines needs the full TensorRT"
    print(f"real TensorRT GPU: {device}")
    return None


REASON = _real_gpu()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

WEIGHT = np.random.default_rng(0).standard_normal((16, 3, 3, 3)).astype(np.float32)
DATA = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)


def _options(tmp_path, **settings):
    return {"tensorrt": TensorRTOptions(BuildSettings(**settings), cache=EngineCache(tmp_path / "cache"))}


@pytest.mark.parametrize("precision, tolerance", [("fp32", 1e-3), ("fp16", 1e-2)])
def test_tutorial_conv_relu_on_the_gpu(tmp_path, precision, tolerance):
    result = build(conv_relu_graph(WEIGHT), targets=["tensorrt"], min_region_size=1,
                   backend_options=_options(tmp_path, precision=precision))  # fmt: skip
    module = runtime_lite.load(result.to_bytes(), backend_options={"tensorrt": {"cache_dir": tmp_path / "cache"}})
    assert "from the bundle" in module.modules[0]["placement"], module.modules
    expected = build_and_load(conv_relu_graph(WEIGHT)).run({"data": DATA})[0]
    assert relative_l2(module.run({"data": DATA})[0], expected) <= tolerance


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_zoo_models_on_the_gpu(tmp_path, name):
    model = load_zoo_model(name, random_weights=True, logits=True)
    feeds = zoo_input(model)
    result = build(model, targets=["tensorrt"], backend_options=_options(tmp_path))
    module = runtime_lite.load(result.to_bytes(), backend_options={"tensorrt": {"cache_dir": tmp_path / "cache"}})
    assert all("from the bundle" in m["placement"] for m in module.modules), module.modules
    host = build_and_load(model).run(feeds)
    for ours, expected in zip(module.run(feeds), host):
        assert relative_l2(ours, expected) <= 1e-3  # TF32 convolutions on Ampere+ round more than fp32


def test_symbolic_batch_profile_on_the_gpu(tmp_path):
    result = build(conv_relu_graph(WEIGHT, "N"), targets=["tensorrt"], min_region_size=1,
                   backend_options=_options(tmp_path, batch=(1, 4, 8)))  # fmt: skip
    module = runtime_lite.load(result.to_bytes())
    for batch in (1, 3, 8):
        data = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        expected = build_and_load(conv_relu_graph(WEIGHT, batch)).run({"data": data})[0]
        assert relative_l2(module.run({"data": data})[0], expected) <= 1e-3


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_device_arrays_through_a_real_engine(tmp_path, cuda_graphs):
    cupy = pytest.importorskip("cupy", reason="device-array tests need CuPy")
    result = build(conv_relu_graph(WEIGHT, "N"), targets=["tensorrt"], min_region_size=1,
                   backend_options=_options(tmp_path, batch=(1, 4, 8)))  # fmt: skip
    module = runtime_lite.load(result.to_bytes(), backend_options={"tensorrt": {"cuda_graphs": cuda_graphs}})
    for batch in (1, 4, 2, 4):
        data = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        expected = build_and_load(conv_relu_graph(WEIGHT, batch)).run({"data": data})[0]
        on_gpu = module.run({"data": cupy.asarray(data)}, outputs_on="device")[0]
        assert relative_l2(cupy.asnumpy(cupy.asarray(on_gpu)), expected) <= 1e-3
        assert relative_l2(module.run({"data": cupy.asarray(data)})[0], expected) <= 1e-3
        assert relative_l2(module.run({"data": data})[0], expected) <= 1e-3
