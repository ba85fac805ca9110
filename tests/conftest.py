"""Fixtures shared across the test suite."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from onnx import helper

import aot
from tests import memory
from tests.helpers import make_model, rand

#: The suite compares outputs bit for bit (an NPU-partitioned bundle against the host one, a
#: run against the first). Under gemm_policy.py's ``blas`` verdict a co-tenant sends some
#: products from OpenBLAS's threads to the split, whose float rounding differs: so the suite
#: runs the split unless asked otherwise, and tests/test_gemm_policy.py checks both paths.
os.environ.setdefault("RUNTIME_LITE_GEMM", "split")


@pytest.fixture(autouse=True, scope="session")
def _tensorrt_regions_fall_back_to_the_host():
    """A TensorRT region without an engine runs its recipe on onnxruntime by default, and this machine has
    onnxruntime; the suite's TensorRT tests are about the numpy fallback, so they switch that step off
    (tests/test_onnxruntime_backend.py switches it back on to test it). Session-wide, so that module-scoped
    fixtures see it too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AOT_ONNXRUNTIME_FALLBACK", "0")
        yield


# Engine caches authenticate their entries with a key kept outside the cache (engine_cache.cache_key_file):
# the tests, and the processes they start, use one of their own, never the developer's ~/.config/aot key.
os.environ.setdefault("AOT_CACHE_KEY_FILE", os.path.join(tempfile.mkdtemp(prefix="aot-test-key-"), "engine-cache.key"))


def small_cnn_model(batch: int | str = 1, opset: int = 13):
    """conv -> batch norm -> relu -> pool -> flatten -> gemm -> softmax, with real weights."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("BatchNormalization", ["c", "s", "t", "m", "v"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "gw", "gb"], ["g"], transB=1, name="fc"),
        helper.make_node("Softmax", ["g"], ["probs"], axis=1, name="softmax"),
    ]
    inits = {
        "w": rand(4, 3, 3, 3, seed=1),
        "b": rand(4, seed=2),
        "s": rand(4, seed=3, low=0.5, high=1.5),
        "t": rand(4, seed=4),
        "m": rand(4, seed=5),
        "v": rand(4, seed=6, low=0.5, high=1.5),
        "gw": rand(10, 64, seed=7),
        "gb": rand(10, seed=8),
    }
    return make_model(
        nodes, {"x": rand(1, 3, 8, 8)}, ["probs"], inits, opset=opset, input_shapes={"x": [batch, 3, 8, 8]}
    )


@pytest.fixture(scope="session")
def small_model():
    return small_cnn_model()


@pytest.fixture(scope="session")
def small_build(small_model):
    return aot.build(small_model)


@pytest.fixture(scope="session")
def small_bundle(small_build) -> bytes:
    return small_build.to_bytes()


@pytest.fixture
def small_input():
    return np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32)


# --- memory: free between tests, the biggest models in their own process, the peak reported (tests/memory.py) ---

_peak = {"mib": 0.0, "test": "collection"}
_own_processes: list[tuple[str, float]] = []
_child = {"outcome": "passed", "text": ""}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "own_process: run in a child pytest, whose memory goes back when it exits (tests/memory.py)"
    )
    config.addinivalue_line("markers", "isa: compares numbers whose last bits depend on the CPU's vector ISA")


# --- numerics that depend on the CPU's vector ISA: CI runs them twice ---

#: Modules whose assertions compare numbers from vectorised kernels (numpy's own loops, OpenBLAS, onnxruntime's
#: MLAS) against a reference with a tolerance. AVX2 and AVX-512 kernels sum in other orders and fuse multiply-adds
#: differently, so a tolerance tuned on one ISA can fail on the other. .ci/run runs these again with numpy's
#: AVX-512 dispatch off (NPY_DISABLE_CPU_FEATURES), so an AVX-512 CI machine catches an AVX2-only failure of
#: numpy's loops. onnxruntime has no such switch: its int8 kernels' ISA paths are pinned by the load-time
#: choice runtime_lite makes, which the int8 tests force both ways (test_int8_real_models.py computes on
#: onnxruntime only, so it runs once).
ISA_SENSITIVE_MODULES = frozenset({
    "test_onnx_ops.py", "test_zoo.py", "test_cnn_kernels.py", "test_transformer_kernels.py", "test_conv_lowering.py",
    "test_pool_lowering.py", "test_quantization.py", "test_onnxruntime_backend.py", "test_npu.py",
    "test_aten_ops.py", "test_conformance.py", "test_empty_batches.py", "test_gemm_policy.py", "test_idioms.py",
    "test_int8_onnxruntime.py", "test_calibration_choice.py", "test_npu_int8_mobile.py", "test_npu_mobile.py",
    "test_openvino_backend.py", "test_dynamic_images.py", "test_dynamic_recurrent.py", "test_npu_real_models.py",
    "test_openvino_int8.py", "test_qoperator.py", "test_int8_transformers.py", "test_int8_report_outputs.py",
    "test_onnx_ml_ops.py", "test_onnx_if.py",
})  # fmt: skip


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in ISA_SENSITIVE_MODULES:
            item.add_marker(pytest.mark.isa)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("own_process") is None or os.environ.get(memory.CHILD_ENV):
        return None
    result = memory.run_in_own_process(pyfuncitem.nodeid, pyfuncitem.config.rootpath)
    _own_processes.append((pyfuncitem.nodeid, result["peak_mib"]))
    if result["outcome"] == "skipped":
        pytest.skip(result["text"])
    if result["outcome"] != "passed":
        pytest.fail(f"(run in its own process)\n{result['text']}", pytrace=False)
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    memory.release_memory()
    peak = memory.peak_rss_mib()
    if peak > _peak["mib"]:
        _peak.update(mib=peak, test=item.nodeid)


def pytest_runtest_logreport(report):
    if not os.environ.get(memory.CHILD_ENV) or _child["outcome"] == "failed":
        return
    if report.failed:
        _child.update(outcome="failed", text=report.longreprtext)
    elif report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _child.update(outcome="skipped", text=reason.removeprefix("Skipped: "))


def pytest_sessionfinish(session, exitstatus):
    child = os.environ.get(memory.CHILD_ENV)
    if child:
        memory.write_child_report(child, _child["outcome"], _child["text"])
        return
    if memory.peak_rss_mib() > _peak["mib"]:
        _peak.update(mib=memory.peak_rss_mib(), test="the end of the session")
    limit = memory.limit_gb()
    if limit and _peak["mib"] > limit * 1024 and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if os.environ.get(memory.CHILD_ENV):
        return
    write = terminalreporter.write_line
    write(f"peak RSS of the pytest process: {_peak['mib'] / 1024:.2f} GiB, reached in {_peak['test']}")
    for nodeid, peak in _own_processes:
        write(f"  run in its own process: {nodeid}: peak RSS {peak / 1024:.2f} GiB")
    limit = memory.limit_gb()
    if limit and _peak["mib"] > limit * 1024:
        write(
            f"FAILED: the pytest process held more than {limit:g} GiB ({memory.LIMIT_ENV}; 0 turns this off)", red=True
        )


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """A stand-in GPU machine for one test (tests/tensorrt_standin.py), closed after it."""
    from tests.tensorrt_standin import StandinMachine

    m = StandinMachine(monkeypatch, tmp_path / "builds.log")
    m.become()
    yield m
    m.close()
