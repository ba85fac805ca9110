"""The OpenVINO backend (issue 41): onnxruntime's recipes, weights stored once, on OpenVINO's CPU plugin.

Checked against onnxruntime running the original model. ``blocked_openvino`` is a test double for a host
without OpenVINO: it makes ``import openvino`` fail. The tests that run OpenVINO itself skip, saying so, only
where it is not installed (the ``test`` extra installs it, so CI runs them).
"""

from __future__ import annotations

import importlib.util
import logging
import random
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import aot
import runtime_lite
from aot.testing import relative_l2
from aot.testing.zoo import load_zoo_model
from runtime_lite import BundleError
from runtime_lite.backends.onnxruntime.recipe_check import check_recipe
from runtime_lite.backends.openvino import engine
from runtime_lite.backends.openvino.memory_recipe import MEMORY_LOCATION, in_memory
from runtime_lite.errors import ExecutionError, OptionError, PlacementError
from tests import hostile
from tests.conftest import small_cnn_model
from tests.helpers import attention_head_nodes, make_model, onnxruntime_outputs, rand, wide_model
from tests.hostile import Seed
from tests.test_onnxruntime_backend import HOSTILE_RECIPES

NO_OPENVINO = "openvino is not installed (pip install 'runtime-lite[openvino]'); the test extra installs it"
needs_openvino = pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason=NO_OPENVINO)

X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)


@pytest.fixture
def blocked_openvino(monkeypatch):
    """Test double: a host where OpenVINO is not installed (``import openvino`` raises ImportError)."""
    monkeypatch.setitem(sys.modules, "openvino", None)


@pytest.fixture
def read_model_calls(monkeypatch):
    """A spy on ``openvino.Core.read_model``: the recipes OpenVINO's parser was handed."""
    ov = pytest.importorskip("openvino", reason=NO_OPENVINO)
    calls, real = [], ov.Core.read_model

    def spy(self, model, *args, **kwargs):
        calls.append(model)
        return real(self, model, *args, **kwargs)

    monkeypatch.setattr(ov.Core, "read_model", spy)
    return calls


def attention_model() -> onnx.ModelProto:
    """One self-attention head with a residual and layer norm: MatMul, Transpose, Div, Softmax, Add."""
    nodes = [
        *attention_head_nodes("x", "attended"),
        helper.make_node("Add", ["attended", "x"], ["residual"]),
        helper.make_node("LayerNormalization", ["residual", "gamma", "beta"], ["y"], axis=-1),
    ]
    inits = {
        "wq": rand(64, 64, seed=1, low=-0.2, high=0.2), "wk": rand(64, 64, seed=2, low=-0.2, high=0.2),
        "wv": rand(64, 64, seed=3, low=-0.2, high=0.2), "scale": np.array(8.0, np.float32),
        "gamma": rand(64, seed=4, low=0.5, high=1.5), "beta": rand(64, seed=5, low=-0.1, high=0.1),
    }  # fmt: skip
    return make_model(nodes, {"x": rand(1, 16, 64, seed=6)}, ["y"], inits, opset=17)


def _build(model, **options) -> aot.compiler.build.BuildResult:
    return aot.build(model, targets=["openvino"], log=None, **options)


def _error(actual: list[np.ndarray], expected: list[np.ndarray]) -> float:
    return max(relative_l2(a, e) for a, e in zip(actual, expected))


# -- it runs, as one region, and agrees with onnxruntime on the original -------------------------------------


def _cases():
    yield "cnn", small_cnn_model, {"x": X}
    yield "attention", attention_model, {"x": rand(1, 16, 64, seed=7)}
    for name in ("squeezenet", "shufflenet"):
        feeds = {"data_0" if name == "squeezenet" else "gpu_0/data_0": rand(1, 3, 224, 224, seed=8)}
        yield name, lambda name=name: load_zoo_model(name), feeds


CASES = {name: (make, feeds) for name, make, feeds in _cases()}


@needs_openvino
@pytest.mark.parametrize("which", list(CASES))
def test_the_whole_model_is_one_region_on_openvino_and_matches_onnxruntime(which):
    make, feeds = CASES[which]
    model = make()
    result = _build(model)
    assert result.regions["host"] == 0 and result.regions["openvino"] == len(result.partitioned.nodes)
    module = runtime_lite.load(result.to_bytes(), backend_options={"openvino": {"threads": 1}})
    (placement,) = module.placement.values()
    assert placement["runs_on"] == "openvino" and "on openvino" in placement["detail"], placement
    # f32 on every CPU (openvino's CPU default is bf16 where the CPU has AMX): ISA-independent within 1e-5
    assert _error(module.run(feeds), onnxruntime_outputs(model, feeds)) <= 1e-5


@needs_openvino
def test_weights_are_stored_once_and_openvino_reads_them_at_the_bundles_addresses(read_model_calls):
    model = wide_model()
    delegated, host_only = _build(model).to_bytes(), aot.build(model, log=None).to_bytes()
    assert len(delegated) <= 1.05 * len(host_only), (len(delegated), len(host_only))
    module = runtime_lite.load(delegated)
    handle = module._modules[0].handle
    assert len(handle.weights) == 2 and all(not a.flags.writeable for a in handle.weights.values())
    (handed,) = read_model_calls
    recipe = onnx.load_from_string(handed)
    located = {t.name: {e.key: e.value for e in t.external_data} for t in recipe.graph.initializer if t.external_data}
    assert located == {
        name: {"location": MEMORY_LOCATION, "offset": str(a.ctypes.data), "length": str(a.nbytes)}
        for name, a in handle.weights.items()
    }
    assert _error(module.run({"x": X}), onnxruntime_outputs(model, {"x": X})) <= 1e-5


def test_the_in_memory_recipe_changes_only_the_placeholders():
    seed, index, recipe = _recipe_bundle()
    weights = {t.name: np.zeros(t.dims, np.float32) for t in recipe.graph.initializer if t.external_data}
    rewritten = onnx.load_from_string(in_memory(seed.payloads[index], weights))
    for before, after in zip(recipe.graph.initializer, rewritten.graph.initializer):
        if before.name in weights:
            assert after.external_data[1].value == str(weights[before.name].ctypes.data)
            del before.external_data[:], after.external_data[:]
        assert before == after
    assert list(recipe.graph.node) == list(rewritten.graph.node) and recipe.opset_import == rewritten.opset_import
    with pytest.raises(BundleError, match="not the bundle's placeholder"):  # a bundle may never say it
        check_recipe(in_memory(seed.payloads[index], weights), weights, "recipe")


@needs_openvino
def test_a_symbolic_batch_runs_at_any_size_and_an_empty_one_on_the_host_plan():
    """OpenVINO's CPU plugin refuses a zero batch ("Batch size is zero"); the host plan, bound then, runs it."""
    model = small_cnn_model(batch="N")
    module = runtime_lite.load(_build(model).to_bytes())
    handle = module._modules[0].handle
    for batch in (1, 3, 2):
        x = rand(batch, 3, 8, 8, seed=batch)
        assert _error(module.run({"x": x}), onnxruntime_outputs(model, {"x": x})) <= 1e-5
    assert handle.fallback is None  # not bound while the engine ran everything
    empty = np.zeros((0, 3, 8, 8), np.float32)
    (out,) = module.run({"x": empty})
    assert out.shape == onnxruntime_outputs(model, {"x": empty})[0].shape == (0, 10)
    assert handle.fallback is not None and module.placement["openvino_0"]["runs_on"] == "openvino"


@needs_openvino
def test_a_run_openvino_fails_is_one_line(monkeypatch):
    module = runtime_lite.load(_build(small_cnn_model()).to_bytes())
    request = module._modules[0].handle.engine._request()

    class FailingRequest:  # test double: OpenVINO's many-line failure from inside its plugin
        def __getattr__(self, name):
            return getattr(request, name)

        def infer(self, **options):
            raise RuntimeError("Exception from src/inference/src/cpp/infer_request.cpp:224:\n[CPU] Add: broken\n\n")

    monkeypatch.setattr(module._modules[0].handle.engine, "_request", lambda: FailingRequest())
    with pytest.raises(ExecutionError, match=r"openvino failed the run: \[CPU\] Add: broken") as error:
        module.run({"x": X})
    assert "\n" not in str(error.value)


# -- options ---------------------------------------------------------------------------------------------


@needs_openvino
def test_declared_options_reach_the_compiled_model():
    options = {"threads": "1", "hint": "throughput", "precision": "f32", "pinning": "off"}
    module = runtime_lite.load(_build(small_cnn_model()).to_bytes(), backend_options={"openvino": options})
    compiled = module._modules[0].handle.engine._compiled
    assert int(compiled.get_property("INFERENCE_NUM_THREADS")) == 1
    assert str(compiled.get_property("PERFORMANCE_HINT")).upper().endswith("THROUGHPUT")
    assert "float32" in str(compiled.get_property("INFERENCE_PRECISION_HINT"))
    assert compiled.get_property("ENABLE_CPU_PINNING") is False
    assert "1 threads, throughput hint, f32, unpinned" in module.placement["openvino_0"]["detail"]
    assert module.run({"x": X})[0].shape == (1, 10)
    (event,) = [e for e in module.profile({"x": X}).events if e.get("module") == "openvino_0"]
    assert event["placement"] == "openvino" and event["module"] == "openvino_0" and event["wall_s"] > 0


@pytest.mark.parametrize(
    "options, match",
    [
        ({"threads": -1}, "threads=-1"),
        ({"threads": "two"}, "threads='two'"),
        ({"threads": True}, "threads=True"),
        ({"hint": "fast"}, "hint='fast'"),
        ({"hint": 1}, "hint=1"),
        ({"precision": "int4"}, "precision='int4'"),
        ({"enabled": "sometimes"}, "enabled='sometimes'"),
        ({"pinning": "tight"}, "pinning='tight'"),
        ({"streams": 2}, "no option 'streams'"),
        ("threads=2", "must be a mapping"),
    ],
)
def test_bad_options_are_one_line_errors_naming_the_option(options, match):
    bundle = _build(small_cnn_model()).to_bytes()
    with pytest.raises(OptionError, match=match) as error:
        runtime_lite.load(bundle, backend_options={"openvino": options})
    assert "\n" not in str(error.value) and "openvino" in str(error.value)


# -- without OpenVINO ------------------------------------------------------------------------------------


def test_without_openvino_the_region_runs_its_host_plan_and_says_why_once(blocked_openvino, caplog):
    bundle = _build(small_cnn_model()).to_bytes()
    with caplog.at_level(logging.WARNING):
        module = runtime_lite.load(bundle)
    (placement,) = module.placement.values()
    assert placement["runs_on"] == "host" and "openvino is not installed" in placement["detail"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "openvino is not installed" in warnings[0].getMessage()
    host = runtime_lite.load(aot.build(small_cnn_model(), log=None).to_bytes())
    np.testing.assert_array_equal(module.run({"x": X})[0], host.run({"x": X})[0])


def test_enabled_false_runs_the_host_plan_and_says_so(read_model_calls):
    module = runtime_lite.load(_build(small_cnn_model()).to_bytes(), backend_options={"openvino": {"enabled": False}})
    placement = module.placement["openvino_0"]
    assert placement["runs_on"] == "host" and "openvino.enabled=false" in placement["detail"]
    assert read_model_calls == []
    assert _error(module.run({"x": X}), onnxruntime_outputs(small_cnn_model(), {"x": X})) <= 1e-5


def test_require_openvino_fails_instead_of_falling_back(blocked_openvino):
    bundle = _build(small_cnn_model()).to_bytes()
    with pytest.raises(PlacementError, match="'openvino_0' \\(compiled for openvino, required\\) runs on the host"):
        runtime_lite.load(bundle, require=("openvino",))


def test_runtime_lite_imports_openvino_only_for_an_openvino_module(tmp_path):
    host_bundle = tmp_path / "host.aot"
    host_bundle.write_bytes(aot.build(small_cnn_model(), log=None).to_bytes())
    code = (
        "import sys, runtime_lite; from runtime_lite.backends import get_backend; get_backend('openvino'); "
        f"runtime_lite.load({str(host_bundle)!r}); print('openvino' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False", done.stderr


# -- untrusted recipes -----------------------------------------------------------------------------------


def _recipe_bundle() -> tuple[Seed, int, onnx.ModelProto]:
    """The bundle taken apart (tests/hostile.Seed), the index of its recipe payload, and the recipe."""
    result = _build(wide_model(), min_region_size=1)
    seed = Seed("openvino", result.header, [bytes(p) for p in result.blobs.payloads], [X])
    index = seed.header["modules"][0]["payloads"]["recipe"]
    return seed, index, onnx.load_from_string(seed.payloads[index])


def _with_recipe(seed: Seed, index: int, recipe: onnx.ModelProto | bytes) -> bytes:
    payloads = list(seed.payloads)
    payloads[index] = recipe if isinstance(recipe, bytes) else recipe.SerializeToString()
    return seed.pack(seed.header, payloads)


@pytest.mark.parametrize("what", list(HOSTILE_RECIPES))
def test_a_hostile_recipe_is_refused_before_openvino_parses_it(what, read_model_calls):
    seed, index, recipe = _recipe_bundle()
    mutate, match = HOSTILE_RECIPES[what]
    mutate(recipe)
    with pytest.raises(BundleError, match=match) as error:
        runtime_lite.load(_with_recipe(seed, index, recipe))
    assert "openvino.payloads.recipe" in str(error.value) and "\n" not in str(error.value)
    assert read_model_calls == []


@needs_openvino
def test_mutated_openvino_recipes_are_rejected_refused_or_run_never_worse():
    """The hostile-bundle campaign's recipe family (tests/hostile.py) on OpenVINO modules, in worker processes
    with an address-space cap: each case is refused by the recipe check, refused by OpenVINO in one line,
    falls back, or runs; never a crash, a hang, a file read or a foreign exception."""
    harness = hostile.Harness(workers=2, start_method="spawn")  # this process ran OpenVINO: no forked workers
    try:
        harness.run(hostile.onnxruntime_cases(hostile.onnxruntime_seeds("openvino"), 120, random.Random(41)))
    finally:
        harness.close()
    assert not harness.failures, "\n".join(f"{what}: {outcome}" for what, outcome, _ in harness.failures)
    assert harness.outcomes["ran"] > 0 and harness.outcomes["rejected at load"] > 0, harness.outcomes


@pytest.mark.parametrize("cut", [1, 7, 100])
def test_a_truncated_recipe_is_refused_even_without_openvino(blocked_openvino, cut):
    seed, index, recipe = _recipe_bundle()
    with pytest.raises(BundleError, match="openvino.payloads.recipe") as error:
        runtime_lite.load(_with_recipe(seed, index, recipe.SerializeToString()[:-cut]))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda w: w[0].update(constant=10**6), "openvino.compile_specs.weights\\[0\\].constant"),
        (lambda w: w[0].update(payload="fallback"), "weights\\[0\\].payload"),
        (lambda w: w.append(dict(w[0])), "openvino.compile_specs.weights\\[2\\].name.*named twice"),
        (lambda w: w.append({**w[0], "name": "nowhere"}), "which no initializer of the recipe holds"),
    ],
)
def test_weight_references_are_checked(change, match):
    seed, _, _ = _recipe_bundle()
    change(seed.header["modules"][0]["compile_specs"]["weights"])
    with pytest.raises(BundleError, match=match) as error:
        runtime_lite.load(seed.pack(seed.header))
    assert "\n" not in str(error.value)


# -- budgets ---------------------------------------------------------------------------------------------


@needs_openvino
def test_a_run_past_max_memory_is_refused_before_openvino_allocates():
    nodes = [
        helper.make_node("Expand", ["x", "shape"], ["big"]),
        helper.make_node("ReduceSum", ["big", "axes"], ["y"], keepdims=0),
    ]
    inits = {"shape": np.array([1000, 1000], np.int64), "axes": np.array([0, 1], np.int64)}
    one = np.ones((1, 1), np.float32)
    bundle = _build(make_model(nodes, {"x": one}, ["y"], inits)).to_bytes()
    module = runtime_lite.load(bundle, max_memory=1 << 20)  # the expand alone is 4 MB
    assert module.placement["openvino_0"]["runs_on"] == "openvino"
    with pytest.raises(ExecutionError, match=r"openvino would hold 4,000,00\d bytes .* max_memory = 1,048,576"):
        module.run({"x": one})
    assert runtime_lite.load(bundle, max_memory=16 << 20).run({"x": one})[0] == pytest.approx(1e6)


@needs_openvino
def test_a_run_past_max_run_seconds_is_cancelled(monkeypatch):
    nodes = [helper.make_node("Sin", [f"v{i}"], [f"v{i + 1}"], name=f"sin{i}") for i in range(100)]
    nodes[0].input[0], nodes[-1].output[0] = "x", "y"
    x = np.linspace(-3, 3, 1 << 20, dtype=np.float32).reshape(1, -1)
    module = runtime_lite.load(_build(make_model(nodes, {"x": x}, ["y"])).to_bytes(), max_run_seconds=30.0)
    module.run({"x": x})  # well inside its deadline

    class LateClock:  # test double: engine.py's clock reads 29.999 s later than the run's start, 1 ms left
        @staticmethod
        def monotonic() -> float:
            return time.monotonic() + 29.999

    monkeypatch.setattr(engine, "time", LateClock)
    with pytest.raises(ExecutionError, match=r"max_run_seconds") as error:
        module.run({"x": x})
    assert "\n" not in str(error.value)
    monkeypatch.undo()
    assert module.run({"x": x})[0].shape == x.shape  # the request is usable after a cancelled run


def test_the_build_admits_for_openvino_exactly_what_it_admits_for_onnxruntime():
    """But onnxruntime's contrib ops (com.microsoft.*), which only onnxruntime's kernels compute."""
    from aot.compiler.backends import get_compiler_backend
    from aot.ir import contrib

    ov, ort = get_compiler_backend("openvino"), get_compiler_backend("onnxruntime")
    assert sorted(p.name.split(".", 1)[1] for p in ov.patterns()) == sorted(
        p.name.split(".", 1)[1] for p in ort.patterns() if p.name != f"onnxruntime.{contrib.OP}"
    )
    masked = make_model(
        [helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0), helper.make_node("Softmax", ["emb"], ["p"])],
        {"ids": np.array([[1, 2]], np.int64)},
        ["p"],
        {"table": rand(8, 4, seed=1)},
    )
    assert _build(masked).regions == {"host": 0, "openvino": 2}
    assert TensorProto.FLOAT  # the recipe is onnxruntime's: same format tag, same record
    assert _build(masked).header["modules"][0]["compile_specs"]["format"] == "onnxruntime-recipe/1"
