"""Placement by measurement (issue 41): ``--target auto`` regions on whichever installed CPU engine ran them fastest.

The verdict is cached per region, CPU, threads and engine versions, under ``AOT_CACHE_DIR`` (a temporary
directory here). ``FakeClock`` and ``CostlyEngine`` are test doubles: engines whose runs cost fixed,
known times on a clock the measurement reads, so which one is chosen and how many runs the budget allows
are checked without timing anything real.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest

import aot
import runtime_lite
from aot.testing import relative_l2
from runtime_lite import BundleError
from runtime_lite.backends import auto
from runtime_lite.backends.auto import verdict
from runtime_lite.errors import OptionError
from tests.conftest import small_cnn_model
from tests.helpers import onnxruntime_outputs, wide_model
from tests.hostile import Seed
from tests.test_onnxruntime_backend import HOSTILE_RECIPES

needs_openvino = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None,
    reason="openvino is not installed (pip install 'runtime-lite[openvino]'); the test extra installs it",
)
X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AOT_CACHE_DIR", str(tmp_path))
    return tmp_path


def _bundle(model=None) -> bytes:
    return aot.build(model or small_cnn_model(), targets=["auto"], log=None).to_bytes()


def _detail(module) -> str:
    (placement,) = module.placement.values()
    return placement["detail"]


@needs_openvino
def test_the_first_load_measures_both_engines_keeps_the_fastest_and_later_loads_reuse_the_verdict(cache_dir):
    bundle = _bundle()
    first = runtime_lite.load(bundle, backend_options={"auto": {"threads": 1, "runs": 3}})
    detail = _detail(first)
    assert "measured here: " in detail and "onnxruntime" in detail and "openvino" in detail, detail
    (record_path,) = (cache_dir / "placement").iterdir()
    record = json.loads(record_path.read_text())
    assert record["engine"] == min(record["seconds"], key=record["seconds"].get) == first._modules[0].handle.engine_name
    assert set(record["key"]["engines"]) == {"onnxruntime", "openvino"} and record["key"]["threads"] == 1
    assert detail.startswith(f"on {record['engine']} ")
    again = runtime_lite.load(bundle, backend_options={"auto": {"threads": 1, "runs": 3}})
    assert "cached verdict" in _detail(again) and again._modules[0].handle.engine_name == record["engine"]
    expected = onnxruntime_outputs(small_cnn_model(), {"x": X})
    for module in (first, again):
        assert relative_l2(module.run({"x": X})[0], expected[0]) <= 1e-5


@needs_openvino
def test_a_verdict_for_other_engine_versions_or_a_corrupt_one_is_measured_again(cache_dir, monkeypatch):
    bundle = _bundle()
    runtime_lite.load(bundle, backend_options={"auto": {"runs": 2}})
    (record_path,) = (cache_dir / "placement").iterdir()
    record_path.write_text("{not json")
    assert "measured here" in _detail(runtime_lite.load(bundle, backend_options={"auto": {"runs": 2}}))
    _, build = auto.ENGINES["openvino"]
    monkeypatch.setitem(auto.ENGINES, "openvino", (lambda: "2099.1", build))  # test double: another release
    assert "measured here" in _detail(runtime_lite.load(bundle, backend_options={"auto": {"runs": 2}}))
    assert len(list((cache_dir / "placement").iterdir())) == 2  # one verdict per key


@needs_openvino
@pytest.mark.parametrize("engine", ["onnxruntime", "openvino"])
def test_an_engine_can_be_pinned(engine, cache_dir):
    module = runtime_lite.load(_bundle(wide_model()), backend_options={"auto": {"engine": engine}})
    assert _detail(module).startswith(f"on {engine} ") and "pinned" in _detail(module)
    assert module._modules[0].handle.engine_name == engine
    (event,) = [e for e in module.profile({"x": X}).events if e.get("module") == "auto_0"]
    assert event["placement"] == engine
    assert not (cache_dir / "placement").exists()  # nothing measured, nothing cached
    assert relative_l2(module.run({"x": X})[0], onnxruntime_outputs(wide_model(), {"x": X})[0]) <= 1e-5


def test_without_openvino_the_installed_engine_runs_it_and_without_any_the_host_plan(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # test double: openvino is not installed
    module = runtime_lite.load(_bundle())
    assert _detail(module).startswith("on onnxruntime ") and "the one installed" in _detail(module)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    host = runtime_lite.load(_bundle())
    assert host.placement["auto_0"]["runs_on"] == "host"
    assert "onnxruntime is not installed" in _detail(host) and "openvino is not installed" in _detail(host)
    np.testing.assert_allclose(host.run({"x": X})[0], module.run({"x": X})[0], rtol=1e-4, atol=1e-5)


class FakeClock:
    """Test double for ``time`` in the auto backend: it moves only when an engine runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class CostlyEngine:
    """Test double: an engine whose every run costs ``cost`` seconds on the fake clock."""

    def __init__(self, clock: FakeClock, cost: float) -> None:
        self.clock, self.cost, self.runs = clock, cost, 0

    def run(self, inputs):
        self.clock.now += self.cost
        self.runs += 1


def test_the_fastest_engine_wins_within_the_budget(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(auto, "time", clock)
    slow, fast = CostlyEngine(clock, 0.5), CostlyEngine(clock, 2**-6)  # binary fractions: exact sums
    measured = auto.time_engines({"slow": slow, "fast": fast}, [], runs=10, budget_s=2.0)
    assert measured == {"slow": 0.5, "fast": 2**-6}
    # Two passes, each engine's block 0.5 s: untimed runs for its first 0.2 s, then timed ones. The slow engine's
    # one untimed and one timed run fill each block; the fast one settles for 13 runs, then its 5 timed runs fit
    assert slow.runs == 2 * (1 + 1) and fast.runs == 2 * (13 + 5)
    glacial = CostlyEngine(clock, 30.0)
    assert auto.time_engines({"glacial": glacial}, [], runs=10, budget_s=2.0) == {"glacial": 30.0}
    assert glacial.runs == 2 * 2  # at least one untimed and one timed run a pass, then the budget stops it


class NoisyEngine(CostlyEngine):
    """Test double: an engine whose timed runs of the first pass met another process on the cores (10x)."""

    def run(self, inputs):
        self.clock.now += self.cost * (10 if 205 <= self.runs < 210 else 1)  # 205 untimed runs settle it first
        self.runs += 1


def test_a_disturbed_block_does_not_decide(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(auto, "time", clock)
    disturbed, steady = NoisyEngine(clock, 2**-10), CostlyEngine(clock, 2**-9)
    measured = auto.time_engines({"disturbed": disturbed, "steady": steady}, [], runs=10, budget_s=2.0)
    assert disturbed.runs == 2 * (205 + 5)
    assert min(measured, key=measured.get) == "disturbed" and measured["disturbed"] == 2**-10


@pytest.mark.parametrize(
    "options, match",
    [
        ({"engine": "tensorrt"}, "engine='tensorrt'"),
        ({"threads": -1}, "threads=-1"),
        ({"runs": 0}, "runs=0"),
        ({"budget_s": 0}, "budget_s=0"),
        ({"budget_s": "forever"}, "budget_s='forever'"),
        ({"cache": "maybe"}, "cache='maybe'"),
        ({"measure": True}, "no option 'measure'"),
    ],
)
def test_bad_options_are_one_line_errors_naming_the_option(options, match):
    with pytest.raises(OptionError, match=match) as error:
        runtime_lite.load(_bundle(), backend_options={"auto": options})
    assert "\n" not in str(error.value) and "auto" in str(error.value)


@pytest.mark.parametrize("what", ["a placeholder pointed at a path", "a control-flow op", "a weight of another shape"])
def test_a_hostile_recipe_is_refused_before_any_engine_sees_it(what, monkeypatch):
    def never(*args, **kwargs):  # test double: an engine that must not be reached
        raise AssertionError("an engine was handed a hostile recipe")

    for name, (version, _) in list(auto.ENGINES.items()):
        monkeypatch.setitem(auto.ENGINES, name, (version, never))
    result = aot.build(wide_model(), targets=["auto"], log=None)
    seed = Seed("auto", result.header, [bytes(p) for p in result.blobs.payloads], [X])
    index = seed.header["modules"][0]["payloads"]["recipe"]
    import onnx

    recipe = onnx.load_from_string(seed.payloads[index])
    mutate, match = HOSTILE_RECIPES[what]
    mutate(recipe)
    payloads = list(seed.payloads)
    payloads[index] = recipe.SerializeToString()
    with pytest.raises(BundleError, match=match) as error:
        runtime_lite.load(seed.pack(seed.header, payloads))
    assert "auto.payloads.recipe" in str(error.value) and "\n" not in str(error.value)


def test_a_verdict_naming_an_engine_outside_its_key_is_ignored(tmp_path):
    key = {"version": verdict.VERSION, "engines": {"onnxruntime": "1.32.0", "openvino": "2026.4.1"}}
    path = verdict.cache_path(key, tmp_path)
    verdict.write_verdict(path, key, "openvino", {"onnxruntime": 0.002, "openvino": 0.001})
    assert verdict.read_verdict(path, key) == ("openvino", {"onnxruntime": 0.002, "openvino": 0.001})
    path.write_text(json.dumps({"key": key, "engine": "tensorrt", "seconds": {}}))
    assert verdict.read_verdict(path, key) is None
    path.write_text(json.dumps({"key": {**key, "version": 0}, "engine": "openvino", "seconds": {}}))
    assert verdict.read_verdict(path, key) is None


def _one_node(node, inputs: dict, outputs: dict, initializers=()):
    from onnx import TensorProto, helper

    types = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64}
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, types[t], s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, types[t], s) for n, (t, s) in outputs.items()], list(initializers),
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@needs_openvino
def test_symbolic_image_dims_a_kernel_is_wider_than_are_timed_at_a_size_it_takes(cache_dir):
    """A 3x3 convolution over [N, 3, H, W]: at 1x1 no engine can run it, so the timing takes H = W = 32 (the batch
    at 1); the load measures, and the module computes what onnxruntime does on the original file."""
    from onnx import helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(1).standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    model = _one_node(helper.make_node("Conv", ["x", "w"], ["y"]), {"x": ("float32", ["N", 3, "H", "W"])},
                      {"y": ("float32", ["N", 8, "H2", "W2"])}, [weight])  # fmt: skip
    module = runtime_lite.load(_bundle(model), backend_options={"auto": {"runs": 2}})
    assert "measured here: " in _detail(module), _detail(module)
    x = np.random.default_rng(2).standard_normal((2, 3, 20, 17)).astype(np.float32)
    assert relative_l2(module.run({"x": x})[0], onnxruntime_outputs(model, {"x": x})[0]) < 1e-5


@needs_openvino
def test_raw_audio_under_a_wide_window_is_timed_at_a_length_it_takes(cache_dir):
    """A 512-tap strided Conv1d over raw audio [N, 1, T] (an STFT front end's): no length up to an image's side runs
    it, so the timing takes 4096 samples; it was left untimed ("kernel extent 512 is wider than the padded input")."""
    from onnx import helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(1).standard_normal((16, 1, 512)).astype(np.float32), "w")
    model = _one_node(helper.make_node("Conv", ["x", "w"], ["y"], strides=[128]), {"x": ("float32", ["N", 1, "T"])},
                      {"y": ("float32", ["N", 16, "F"])}, [weight])  # fmt: skip
    module = runtime_lite.load(_bundle(model), backend_options={"auto": {"runs": 2}})
    assert "measured here: " in _detail(module), _detail(module)
    x = np.random.default_rng(2).standard_normal((1, 1, 1600)).astype(np.float32)
    assert relative_l2(module.run({"x": x})[0], onnxruntime_outputs(model, {"x": x})[0]) < 1e-5


@needs_openvino
@pytest.mark.parametrize(("bounds", "timed"), [(None, (1, 3, 224, 224)), ((256, 1280), (1, 3, 256, 256)),
                                               ((8, 64), (1, 3, 64, 64))])  # fmt: skip
def test_engines_are_timed_at_a_working_size_within_the_bundles_bounds(cache_dir, monkeypatch, bounds, timed):
    """A detector's engines timed on a 1x1 image told apart noise, and a bundle declaring H, W in 256..1280 was timed
    at a size it refuses: the timing now takes a working size (224), moved inside the declared bounds."""
    from onnx import helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(1).standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    model = _one_node(helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
                      {"x": ("float32", ["N", 3, "H", "W"])}, {"y": ("float32", ["N", 8, "H", "W"])}, [weight])  # fmt: skip
    shapes = None if bounds is None else {"x": ("N", 3, bounds, bounds)}
    bundle = aot.build(model, targets=["auto"], input_shapes=shapes, log=None).to_bytes()
    seen = []
    real = auto.time_engines
    monkeypatch.setattr(
        auto, "time_engines", lambda engines, inputs, *a: seen.append(inputs[0].shape) or real(engines, inputs, *a)
    )
    module = runtime_lite.load(bundle, backend_options={"auto": {"runs": 2}})
    assert seen == [timed], _detail(module)
    assert "measured here: " in _detail(module)


@needs_openvino
def test_a_region_no_sample_input_runs_loads_on_an_engine_untimed_and_keeps_no_verdict(cache_dir):
    """A 1-D input gathered at index 3: every sample holds its leading axis at 1, which no engine can index. The load
    must not fail: the first engine runs it untimed, says why, and no verdict is kept (a later load tries again)."""
    from onnx import helper, numpy_helper

    index = numpy_helper.from_array(np.array(3, np.int64), "i")
    model = _one_node(helper.make_node("Gather", ["x", "i"], ["y"], axis=0), {"x": ("float32", ["L"])},
                      {"y": ("float32", [])}, [index])  # fmt: skip
    module = runtime_lite.load(_bundle(model), backend_options={"auto": {"runs": 2}})
    detail = _detail(module)
    assert "not measured: no sample input of its signature runs (" in detail, detail
    assert module._modules[0].handle.engine_name == next(iter(auto.ENGINES))
    assert not (cache_dir / "placement").exists() or not list((cache_dir / "placement").iterdir())
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(module.run({"x": x})[0], x[3])
