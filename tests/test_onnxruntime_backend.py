"""The onnxruntime backend (issue 27): regions as recipes on onnxruntime's CPU provider, weights stored once.

Checked against onnxruntime running the original model. ``blocked_onnxruntime`` is a
test double for a host without onnxruntime: it makes ``import onnxruntime`` fail.
"""

from __future__ import annotations

import logging
import sys

import msgpack
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
import runtime_lite
from aot.errors import BuildError
from aot.testing import relative_l2
from runtime_lite import BundleError
from runtime_lite.backends.onnxruntime import recipe_check, shapes
from runtime_lite.backends.onnxruntime.int8 import kernels_here
from runtime_lite.backends.onnxruntime.recipe_check import PLACEHOLDER, check_recipe
from runtime_lite.errors import OptionError, PlacementError
from tests import hostile
from tests.conftest import small_cnn_model
from tests.helpers import make_model, onnxruntime_outputs, rand, wide_model
from tests.hostile import Seed

X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
EMULATED = kernels_here("emulated")


@pytest.fixture
def blocked_onnxruntime(monkeypatch):
    """Test double: a host where onnxruntime is not installed (``import onnxruntime`` raises ImportError)."""
    monkeypatch.setitem(sys.modules, "onnxruntime", None)


@pytest.fixture
def onnxruntime_fallback_on(monkeypatch):
    """The deployment default the suite's conftest switches off for the older TensorRT tests."""
    monkeypatch.delenv("AOT_ONNXRUNTIME_FALLBACK", raising=False)


def masked_model() -> onnx.ModelProto:
    """An embedding lookup and an attention-style mask: Gather, Equal, Where, Cast, MatMul, Softmax."""
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0, name="embed"),
        helper.make_node("MatMul", ["emb", "w"], ["h"], name="proj"),
        helper.make_node("Equal", ["ids", "pad"], ["is_pad"], name="is_pad"),
        helper.make_node("Unsqueeze", ["is_pad", "last"], ["mask"], name="mask"),
        helper.make_node("Where", ["mask", "neg", "h"], ["masked"], name="where"),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1, name="softmax"),
        helper.make_node("Cast", ["is_pad"], ["pad_f"], to=TensorProto.FLOAT, name="cast"),
    ]
    inits = {
        "table": rand(50, 32, seed=1),
        "w": rand(32, 16, seed=2),
        "pad": np.array(0, np.int64),
        "last": np.array([-1], np.int64),
        "neg": np.array(-1e4, np.float32),
    }
    ids = np.array([[3, 0, 7, 0, 11, 49]], np.int64)
    return make_model(nodes, {"ids": ids}, ["p", "pad_f"], inits)


def _build(model, targets=("onnxruntime",), **options) -> aot.compiler.build.BuildResult:
    return aot.build(model, targets=list(targets), log=None, **options)


def _error(actual: list[np.ndarray], expected: list[np.ndarray]) -> float:
    return max(relative_l2(a, e) for a, e in zip(actual, expected))


# -- it runs, as one region, and agrees with onnxruntime -------------------------------------------------


@pytest.mark.parametrize("which", ["cnn", "masked"])
def test_the_whole_model_is_one_region_on_onnxruntime_and_matches_it(which):
    model = small_cnn_model() if which == "cnn" else masked_model()
    feeds = {"x": X} if which == "cnn" else {"ids": np.array([[3, 0, 7, 0, 11, 49]], np.int64)}
    result = _build(model)
    assert result.regions["host"] == 0 and result.regions["onnxruntime"] == len(result.partitioned.nodes)
    module = runtime_lite.load(result.to_bytes(), backend_options={"onnxruntime": {"threads": 1}})
    (placement,) = module.placement.values()
    assert placement["runs_on"] == "onnxruntime" and "on onnxruntime" in placement["detail"]
    assert _error(module.run(feeds), onnxruntime_outputs(model, feeds)) <= 1e-5


def qdq_conv_model() -> onnx.ModelProto:
    """A convolution quantized as onnxruntime.quantization writes it: Q/DQ activations, int8 per-channel weights."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "zp"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wzp"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "ys", "zp"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "zp"], ["y"]),
    ]
    inits = {
        "xs": np.array(0.05, np.float32), "zp": np.array(0, np.int8), "ys": np.array(0.1, np.float32),
        "w": rng.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8), "wzp": np.zeros(8, np.int8),
        "ws": (rng.random(8) * 0.02 + 0.001).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32),
    }  # fmt: skip
    return make_model(nodes, {"x": X}, ["y"], inits, opset=17)


@pytest.mark.parametrize("optimization", ["basic", "all"])
def test_a_quantized_model_computes_its_own_quantization_not_one_onnxruntime_adds(optimization):
    """aot folds DequantizeLinear(int8 weight) into the float weight; onnxruntime's WeightBiasQuantization would
    quantize that weight again with scales of its own, 1% away here (2% on a QDQ MobileNetV2)."""
    model = qdq_conv_model()
    feeds = {"x": np.random.default_rng(4).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    here = kernels_here("auto")
    # a model quantized before aot is an int8 recipe: without VNNI auto runs it on float kernels, which drop the
    # activations' Q/DQ (0.07 from the model's arithmetic here; tests/test_prequantized_models.py bounds them), so
    # there the quantized function is asked for: the emulated kernels
    int8 = "auto" if here.kernels == "integer" else "emulated"
    module = runtime_lite.load(
        _build(model).to_bytes(), backend_options={"onnxruntime": {"optimization": optimization, "int8": int8}}
    )
    assert [p["runs_on"] for p in module.placement.values()] == ["onnxruntime"]
    actual = module.run(feeds)
    host = runtime_lite.load(aot.build(model, log=None).to_bytes()).run(feeds)  # the Q/DQ in float, as written
    # onnxruntime on the original, exactly: on its integer kernels where the CPU has VNNI; where it has not,
    # those saturate their 16-bit pair sums (0.034 from the model's arithmetic on an AMD EPYC Zen3), so on
    # float kernels over the same Q/DQ, as runtime_lite's onnxruntime.int8=emulated runs an int8 recipe
    original = onnxruntime_outputs(model, feeds, config=(here if here.kernels == "integer" else EMULATED).config)
    assert min(_error(actual, host), _error(actual, original)) <= 1e-5  # one or the other, exactly
    assert _error(actual, original) <= 2e-3  # and int8 arithmetic is one 8-bit step from float on ties


def test_weights_are_stored_once_and_handed_to_onnxruntime_without_a_copy():
    model = wide_model()
    delegated, host_only = _build(model).to_bytes(), aot.build(model, log=None).to_bytes()
    assert len(delegated) <= 1.05 * len(host_only), (len(delegated), len(host_only))
    module = runtime_lite.load(delegated)
    handle = module._modules[0].handle
    assert len(handle.weights) == 2  # the conv and dense weights; the bias (1 KiB) is inline in the recipe
    for (name, array), value in zip(handle.weights.items(), handle.session._values):
        assert not array.flags.writeable, name  # a view of the bundle's blob
        assert value is array, name  # handed as an in-memory external-data file that onnxruntime reads in place
    feeds = {"x": X}
    assert _error(module.run(feeds), onnxruntime_outputs(model, feeds)) <= 1e-5


def _add_a_placeholder_weight(w: np.ndarray, name: str = "w") -> tuple[bytes, np.ndarray]:
    """y = x + w, with ``w`` an external-data placeholder the caller supplies (as aot writes a large weight)."""
    tensor = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(w.shape),
                              data_location=TensorProto.EXTERNAL)  # fmt: skip
    tensor.external_data.add(key="location", value=PLACEHOLDER)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", name], ["y"])], "add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(w.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(w.shape))], [tensor],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString(), w


def test_onnxruntime_reads_each_weight_in_place_from_the_buffer_it_is_handed():
    """The placeholder's location is renamed in place to a file of its own, handed as a buffer onnxruntime reads
    directly: a change to the array after the session was built shows in the next run (no copy was taken)."""
    from runtime_lite.backends.onnxruntime.session import Session, SessionSettings

    recipe, w = _add_a_placeholder_weight(np.zeros((256, 256), np.float32))
    facts = check_recipe(recipe, {"w": w}, "test")
    at = facts.placeholder_at["w"]
    assert recipe[at : at + len(PLACEHOLDER)] == PLACEHOLDER.encode()  # where the check saw the location's text
    session = Session(recipe, {"w": w}, ["x"], ["y"], SessionSettings(threads=1), placeholders=facts.placeholder_at)
    assert session._values[0] is w  # the in-memory file path, not an OrtValue
    x = np.ones((256, 256), np.float32)
    np.testing.assert_array_equal(session.run([x])[0], x)
    w[3, 4] = 5.0
    assert session.run([x])[0][3, 4] == 6.0


def test_a_placeholder_not_where_the_check_saw_it_is_handed_as_an_ortvalue():
    """A stale offset (the guard reads the placeholder's own bytes there first) keeps the OrtValue path: same
    result, and no byte of the recipe is overwritten."""
    from runtime_lite.backends.onnxruntime.session import Session, SessionSettings

    recipe, w = _add_a_placeholder_weight(np.full((64, 64), 2.0, np.float32))
    facts = check_recipe(recipe, {"w": w}, "test")
    stale = {"w": facts.placeholder_at["w"] + 1}
    session = Session(recipe, {"w": w}, ["x"], ["y"], SessionSettings(threads=1), placeholders=stale)
    assert not isinstance(session._values[0], np.ndarray)  # an OrtValue
    np.testing.assert_array_equal(session.run([np.ones((64, 64), np.float32)])[0], np.full((64, 64), 3.0))


# -- options ---------------------------------------------------------------------------------------------


def test_declared_options_reach_the_session():
    module = runtime_lite.load(
        _build(small_cnn_model()).to_bytes(),
        backend_options={"onnxruntime": {"threads": "1", "optimization": "basic", "arena": "off", "spinning": "off"}},
    )
    session = module._modules[0].handle.session._session
    options = session.get_session_options()
    assert options.intra_op_num_threads == 1 and not options.enable_cpu_mem_arena
    assert str(options.graph_optimization_level).endswith("ORT_ENABLE_BASIC")
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert module.run({"x": X})[0].shape == (1, 10)
    default = runtime_lite.load(_build(small_cnn_model()).to_bytes())._modules[0].handle.session._session
    try:
        spinning = default.get_session_options().get_session_config_entry("session.intra_op.allow_spinning")
    except Exception:  # not set at all: onnxruntime's own default (spinning)
        spinning = None
    assert spinning != "0"


@pytest.mark.parametrize(
    "options, match",
    [
        ({"threads": -1}, "threads=-1"),
        ({"threads": "two"}, "threads='two'"),
        ({"threads": True}, "threads=True"),
        ({"threads": 1.5}, "threads=1.5"),
        ({"optimization": "max"}, "optimization='max'"),
        ({"optimization": 3}, "optimization=3"),
        ({"arena": "maybe"}, "arena='maybe'"),
        ({"arena": 1}, "arena=1"),
        ({"enabled": "sometimes"}, "enabled='sometimes'"),
        ({"spinning": "fast"}, "spinning='fast'"),
        ({"spinning": 0}, "spinning=0"),
        ({"intra_threads": 2}, "no option 'intra_threads'"),
        ("threads=2", "must be a mapping"),
    ],
)
def test_bad_options_are_one_line_errors_naming_the_option(options, match):
    bundle = _build(small_cnn_model()).to_bytes()
    with pytest.raises(OptionError, match=match) as error:
        runtime_lite.load(bundle, backend_options={"onnxruntime": options})
    assert "\n" not in str(error.value)


# -- without onnxruntime ---------------------------------------------------------------------------------


def test_without_onnxruntime_the_region_runs_its_host_plan_and_says_why_once(blocked_onnxruntime, caplog):
    bundle = _build(small_cnn_model()).to_bytes()
    with caplog.at_level(logging.WARNING):
        module = runtime_lite.load(bundle)
    (placement,) = module.placement.values()
    assert placement["runs_on"] == "host" and "onnxruntime is not installed" in placement["detail"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "onnxruntime is not installed" in warnings[0].getMessage()
    host = runtime_lite.load(aot.build(small_cnn_model(), log=None).to_bytes())
    np.testing.assert_array_equal(module.run({"x": X})[0], host.run({"x": X})[0])


def test_enabled_false_runs_the_host_plan_and_says_so():
    module = runtime_lite.load(
        _build(small_cnn_model()).to_bytes(), backend_options={"onnxruntime": {"enabled": False}}
    )
    placement = module.placement["onnxruntime_0"]
    assert placement["runs_on"] == "host" and "onnxruntime.enabled=false" in placement["detail"]
    assert _error(module.run({"x": X}), onnxruntime_outputs(small_cnn_model(), {"x": X})) <= 1e-5


def test_require_onnxruntime_fails_instead_of_falling_back(blocked_onnxruntime):
    bundle = _build(small_cnn_model()).to_bytes()
    with pytest.raises(
        PlacementError, match="'onnxruntime_0' \\(compiled for onnxruntime, required\\) runs on the host"
    ):
        runtime_lite.load(bundle, require=("onnxruntime",))


# -- untrusted recipes -----------------------------------------------------------------------------------


def _recipe_bundle(model=None) -> tuple[Seed, int, onnx.ModelProto]:
    """The bundle taken apart (tests/hostile.Seed), the index of its recipe payload, and the recipe."""
    result = _build(model or wide_model(), min_region_size=1)
    seed = Seed("ort", result.header, [bytes(p) for p in result.blobs.payloads], [X])
    index = seed.header["modules"][0]["payloads"]["recipe"]
    return seed, index, onnx.load_from_string(seed.payloads[index])


def _with_recipe(seed: Seed, index: int, recipe: onnx.ModelProto | bytes) -> bytes:
    payloads = list(seed.payloads)
    payloads[index] = recipe if isinstance(recipe, bytes) else recipe.SerializeToString()
    return seed.pack(seed.header, payloads)


def _external(tensor: onnx.TensorProto, location: str) -> None:
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location


def _inline_to_path(m):
    small = next(t for t in m.graph.initializer if t.data_location != TensorProto.EXTERNAL)
    _external(small, "../../../../etc/passwd")


def _placeholder_to_path(m):
    _external(next(t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL), "/etc/passwd")


def _memory_address(m):
    _external(next(t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL), "*/_ORT_MEM_ADDR_/*")


def _offset_entry(m):
    tensor = next(t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL)
    entry = tensor.external_data.add()
    entry.key, entry.value = "offset", "4096"


def _custom_domain(m):
    m.graph.node[0].domain = "com.microsoft"
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))


def _subgraph(m):
    branch = helper.make_graph([], "b", [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)])
    m.graph.node[0].attribute.append(helper.make_attribute("body", branch))


def _if(m):
    branch = helper.make_graph([], "b", [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)])
    m.graph.node.append(helper.make_node("If", ["x"], ["never"], then_branch=branch, else_branch=branch))


def _opset(m):
    m.opset_import[0].version = 99


def _function(m):
    m.functions.append(onnx.FunctionProto(name="f", domain="evil"))


def _sparse(m):
    values = numpy_helper.from_array(np.ones(1, np.float32), "v")
    indices = numpy_helper.from_array(np.zeros(1, np.int64), "i")
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [4]))


def _dims(m):
    tensor = next(t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL)
    tensor.dims[0] += 1


HOSTILE_RECIPES = {
    "an inline initializer pointed at a path": (_inline_to_path, "points its data outside the recipe"),
    "a placeholder pointed at a path": (_placeholder_to_path, "not the bundle's placeholder"),
    "onnxruntime's in-memory address location": (_memory_address, "not the bundle's placeholder"),
    "an offset into the placeholder": (_offset_entry, "not the bundle's placeholder"),
    "a custom-domain op": (_custom_domain, "domain 'com.microsoft'"),
    "a subgraph attribute": (_subgraph, "g \\(a subgraph\\)"),
    "a control-flow op": (_if, "op 'If', which is not on the recipe allow-list"),
    "opset 99": (_opset, "opset 99"),
    "a model-local function": (_function, "functions"),
    "a sparse initializer": (_sparse, "sparse_initializer"),
    "a weight of another shape": (_dims, "but the bundle's weight is"),
}


@pytest.mark.parametrize("what", list(HOSTILE_RECIPES))
def test_a_hostile_recipe_is_refused_before_onnxruntime_sees_it(what):
    seed, index, recipe = _recipe_bundle()
    mutate, match = HOSTILE_RECIPES[what]
    mutate(recipe)
    with pytest.raises(BundleError, match=match) as error:
        runtime_lite.load(_with_recipe(seed, index, recipe))
    assert "onnxruntime.payloads.recipe" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("cut", [1, 7, 100])
def test_a_truncated_recipe_is_refused_even_without_onnxruntime(blocked_onnxruntime, cut):
    seed, index, recipe = _recipe_bundle()
    data = recipe.SerializeToString()
    with pytest.raises(BundleError, match="onnxruntime.payloads.recipe"):
        runtime_lite.load(_with_recipe(seed, index, data[:-cut]))


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda w: w[0].update(constant=10**6), "weights\\[0\\].constant"),
        (lambda w: w[0].update(payload="fallback"), "weights\\[0\\].payload"),
        (lambda w: w.append(dict(w[0])), "named twice"),
        (lambda w: w.append({**w[0], "name": "nowhere"}), "which no initializer of the recipe holds"),
    ],
)
def test_weight_references_are_checked(change, match):
    seed, _, _ = _recipe_bundle()
    weights = seed.header["modules"][0]["compile_specs"]["weights"]
    change(weights)
    with pytest.raises(BundleError, match=match):
        runtime_lite.load(seed.pack(seed.header))


def test_the_build_checks_each_recipe_with_the_runtimes_reader(monkeypatch):
    """An op the writer emits but the runtime's allow-list lacks is a build error, never a bundle a host refuses."""
    monkeypatch.setattr(recipe_check, "ALLOWED_OPS", recipe_check.ALLOWED_OPS - {"Relu"})
    with pytest.raises(BuildError, match="op 'Relu', which is not on the recipe allow-list"):
        _build(small_cnn_model())


def test_the_recipe_walk_reads_what_onnx_wrote():
    _, _, recipe = _recipe_bundle(masked_model())
    data = recipe.SerializeToString()
    externals = {t.name: np.zeros(t.dims, np.float32) for t in recipe.graph.initializer if t.external_data}
    facts = check_recipe(data, externals, "recipe")
    assert facts.opset == 17 and facts.ir_version == recipe.ir_version
    assert facts.op_types == {op: sum(n.op_type == op for n in recipe.graph.node) for op in facts.op_types}
    assert sorted(facts.external) == sorted(externals) and all(
        t.external_data[0].value == PLACEHOLDER for t in recipe.graph.initializer if t.external_data
    )


# -- TensorRT regions, and several targets ---------------------------------------------------------------


def test_a_tensorrt_region_without_an_engine_runs_its_recipe_on_onnxruntime(onnxruntime_fallback_on, caplog):
    bundle = _build(small_cnn_model(), ("tensorrt",), min_region_size=1).to_bytes()
    with caplog.at_level(logging.WARNING):
        module = runtime_lite.load(bundle)
    (placement,) = module.placement.values()
    assert placement["runs_on"] == "onnxruntime" and "CPU provider" in placement["detail"]
    assert any("runs on onnxruntime" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert _error(module.run({"x": X}), onnxruntime_outputs(small_cnn_model(), {"x": X})) <= 1e-5
    off = runtime_lite.load(bundle, backend_options={"tensorrt": {"onnxruntime_fallback": False}})
    assert off.placement["tensorrt_0"]["runs_on"] == "host"


def test_a_tensorrt_region_without_onnxruntime_runs_on_the_host(onnxruntime_fallback_on, blocked_onnxruntime):
    module = runtime_lite.load(_build(small_cnn_model(), ("tensorrt",), min_region_size=1).to_bytes())
    placement = module.placement["tensorrt_0"]
    assert placement["runs_on"] == "host" and "not on onnxruntime either" in placement["detail"]


def test_floor_modulo_of_floats_stays_on_the_host():
    """Mod with fmod=0 on floats is ONNX only from opset 28: onnxruntime took the opset-17 recipe and failed every
    run (``fmod attribute must be true for floating point types``); integer and fmod=1 forms still delegate."""
    x = np.array([[-4.5, -3.0, 2.5, 7.25]], np.float32)
    y = np.array([[2.0, -2.5, -1.5, 3.0]], np.float32)
    for fmod, dtype, expected in ((0, np.float32, np.mod), (1, np.float32, np.fmod), (0, np.int64, np.mod)):
        a, b = x.astype(dtype) * (2 if dtype == np.int64 else 1), y.astype(dtype) * (2 if dtype == np.int64 else 1)
        nodes = [helper.make_node("Mod", ["x", "y"], ["m"], fmod=fmod), helper.make_node("Abs", ["m"], ["r"])]
        out_type = {"r": np.dtype(dtype).name}
        result = _build(make_model(nodes, {"x": a, "y": b}, out_type, opset=13), min_region_size=1)
        on_host = [n.op for n in result.graph.nodes if n.op == "mod"]  # ops left outside every region
        assert bool(on_host) == (fmod == 0 and dtype == np.float32), (fmod, dtype)
        np.testing.assert_array_equal(runtime_lite.load(result.to_bytes()).run({"x": a, "y": b})[0],
                                      np.abs(expected(a, b)))  # fmt: skip


def _cnn_with_an_op_the_npu_lacks() -> onnx.ModelProto:
    """The small CNN with an Exp before its flatten: the NPU runs everything else, so onnxruntime gets the Exp."""
    model = small_cnn_model()
    flatten = next(i for i, n in enumerate(model.graph.node) if n.op_type == "Flatten")
    model.graph.node[flatten].input[0] = "e"
    model.graph.node.insert(flatten, helper.make_node("Exp", ["p"], ["e"], name="exp"))
    return model


@pytest.mark.parametrize("first", ["npu", "tensorrt"])
def test_two_targets_partition_in_priority_order_and_run(first):
    model = masked_model() if first == "tensorrt" else _cnn_with_an_op_the_npu_lacks()
    feeds = {"ids": np.array([[3, 0, 7, 0, 11, 49]], np.int64)} if first == "tensorrt" else {"x": X}
    both = _build(model, (first, "onnxruntime"), min_region_size=1)
    counts = both.regions
    assert counts[first] > 0 and counts["onnxruntime"] > 0 and counts["host"] == 0, counts
    flipped = _build(model, ("onnxruntime", first), min_region_size=1).regions
    assert flipped["onnxruntime"] == len(both.partitioned.nodes) and not flipped.get(first), flipped
    module = runtime_lite.load(both.to_bytes())
    assert {p["backend"] for p in module.placement.values()} == {first, "onnxruntime"}
    assert _error(module.run(feeds), onnxruntime_outputs(model, feeds)) <= 1e-5


@pytest.mark.parametrize("which", ["masked", "wide"])
def test_a_region_too_small_for_the_first_target_goes_to_the_next_not_the_host(which):
    """TensorRT offloads regions of 5 ops or more; onnxruntime takes single ops. A region TensorRT drops for
    its size is offered to onnxruntime: the wide model's 4 ops ran on numpy, the masked model's matmul and
    softmax too, next to an onnxruntime target that takes them."""
    model = masked_model() if which == "masked" else wide_model()
    feeds = {"ids": np.array([[3, 0, 7, 0, 11, 49]], np.int64)} if which == "masked" else {"x": X}
    result = _build(model, ("tensorrt", "onnxruntime"))
    assert result.regions["host"] == 0 and not result.regions.get("tensorrt"), result.regions
    assert not [note for note in result.notes if "left on the host" in note], result.notes
    why = [str(r) for rs in result.partitioned.refusals.values() for r in rs]  # what --print-graph shows
    assert any("fewer than the 5 tensorrt offloads" in reason for reason in why), why
    module = runtime_lite.load(result.to_bytes())
    assert {p["runs_on"] for p in module.placement.values()} == {"onnxruntime"}
    assert _error(module.run(feeds), onnxruntime_outputs(model, feeds)) <= 1e-5


def test_describe_and_the_bundle_say_where_each_region_runs():
    result = _build(small_cnn_model())
    record = result.header["modules"][0]
    assert record["backend"] == "onnxruntime" and record["compile_specs"]["format"] == "onnxruntime-recipe/1"
    assert set(record["payloads"]) == {"recipe", "fallback", "fallback_weights"}
    fallback = msgpack.unpackb(bytes(result.blobs.payloads[record["payloads"]["fallback"]]))
    assert fallback["format"] == "host-plan/1"
    module = runtime_lite.load(result.to_bytes())
    assert module.modules[0]["backend"] == "onnxruntime" and "on onnxruntime" in module.modules[0]["placement"]


GEOMETRY_INPUT = np.random.default_rng(0).standard_normal((1, 2, 9, 11)).astype(np.float32)


def _load_and_run(data: bytes, options: dict) -> str:
    module = runtime_lite.load(data, backend_options=options)
    module.run({"x": GEOMETRY_INPUT})
    return module.placement["onnxruntime_0"]["runs_on"]


def test_a_kernel_wider_than_its_input_is_refused_before_onnxruntime_aborts_on_it():
    """The campaign's finding (docs/RELIABILITY.md): onnxruntime 1.32 aborts the process (SIGABRT in its static
    shape inference) on a convolution whose dilated kernel (dilation 33) is wider than its 11-wide input. The
    check follows the shapes onnxruntime infers and refuses it; in a child process, so a regression fails here."""
    seed, index, recipe = _recipe_bundle(hostile._geometry_model())
    conv = next(n for n in recipe.graph.node if n.op_type == "Conv")
    next(a for a in conv.attribute if a.name == "dilations").ints[:] = [2, 33]
    kind, message = hostile.isolated(_load_and_run, _with_recipe(seed, index, recipe), {})
    assert kind == "raised" and message.startswith("BundleError") and "kernel extent 67 is wider" in message


def test_the_shape_walk_checks_geometry_and_says_what_it_cannot_follow():
    conv = {"kernel_shape": [3, 3], "strides": [1, 2], "pads": [1, 0, 1, 0], "dilations": [2, 1]}
    node = shapes.Node("Conv", ["x", "w"], ["y"], conv, "conv")
    weights = {"w": (4, 2, 3, 3)}
    assert shapes.check_geometry({"x": (None, 2, 9, 11)}, weights, {}, [node]) is None  # a symbolic batch
    with pytest.raises(shapes.BadGeometry, match="kernel extent 67"):
        wide = shapes.Node("Conv", ["x", "w"], ["y"], {**conv, "dilations": [2, 33]}, "conv")
        shapes.check_geometry({"x": (1, 2, 9, 11)}, weights, {}, [wide])
    with pytest.raises(shapes.BadGeometry, match="stride 0"):
        shapes.check_geometry({"x": (1, 2, 9, 11)}, weights, {}, [shapes.Node("Conv", ["x", "w"], ["y"],
                              {**conv, "strides": [0, 1]}, "conv")])  # fmt: skip
    # A reshape whose target shape the walk cannot read: the conv after it is unverified, never guessed.
    unread = shapes.Node("Reshape", ["x", "target"], ["r"], {}, "reshape")
    after = shapes.Node("Conv", ["r", "w"], ["y"], conv, "conv")
    lost = shapes.check_geometry({"x": (1, 2, 9, 11)}, {**weights, "target": (4,)}, {}, [unread, after])
    assert "could not be followed" in lost
    known = {**weights, "target": (4,)}
    readable = shapes.check_geometry({"x": (1, 2, 99)}, known, {"target": [1, 2, 9, 11]}, [unread, after])
    assert readable is None


def test_an_unverified_recipe_runs_on_the_host_and_says_why(monkeypatch):
    def cannot_follow(node, ins, ints):  # test double: the shape walk models no op
        raise LookupError(node.op_type)

    monkeypatch.setattr(shapes, "_infer", cannot_follow)
    module = runtime_lite.load(_build(wide_model()).to_bytes())
    placement = module.placement["onnxruntime_0"]
    assert placement["runs_on"] == "host" and "could not verify its geometry" in placement["detail"]
    assert _error(module.run({"x": X}), onnxruntime_outputs(wide_model(), {"x": X})) <= 1e-5


def gather_nd_model() -> onnx.ModelProto:
    """GatherND with and without batch dims (``logits[arange(batch), last]`` as exporters write it)."""
    nodes = [
        helper.make_node("GatherND", ["x", "rows"], ["per_batch"], batch_dims=1),
        helper.make_node("GatherND", ["x", "cells"], ["picked"]),
        helper.make_node("Relu", ["picked"], ["y"]),
    ]
    inits = {"rows": np.array([[[1], [3]], [[0], [2]]], np.int64), "cells": np.array([[0, 1], [1, 3]], np.int64)}
    return make_model(nodes, {"x": rand(2, 4, 3)}, ["per_batch", "y"], inits)


@pytest.mark.parametrize("which", ["cnn", "wide", "masked", "geometry", "gather_nd"])
def test_the_shape_walk_agrees_with_onnx_shape_inference(which):
    """Every shape the walk follows is the one onnx infers for the same recipe (onnxruntime runs the same inference).
    An op it did not follow would leave its region on the host: its memory could not be bounded (GatherND did)."""
    model = {"cnn": small_cnn_model, "wide": wide_model, "masked": masked_model, "geometry": hostile._geometry_model,
             "gather_nd": gather_nd_model}  # fmt: skip
    _, _, recipe = _recipe_bundle(model[which]())
    externals = {t.name: np.zeros(t.dims, np.float32) for t in recipe.graph.initializer if t.external_data}
    facts = check_recipe(recipe.SerializeToString(), externals, "recipe")
    followed, unverified = shapes.walk(facts.inputs, facts.dims, facts.operands, facts.nodes)
    assert unverified is None
    for t in recipe.graph.initializer:  # onnx's inference needs no weight bytes, only their declared dims
        t.ClearField("external_data")
        t.data_location = TensorProto.DEFAULT
    inferred = onnx.shape_inference.infer_shapes(recipe, strict_mode=True).graph
    expected = {
        v.name: tuple(d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim)
        for v in [*inferred.value_info, *inferred.output]
    }
    produced = {o for n in recipe.graph.node for o in n.output}
    assert produced <= set(followed)
    assert {name: followed[name] for name in produced} == {name: expected[name] for name in produced}


def test_onnxruntime_admits_exactly_what_its_lowerings_write():
    from aot.compiler.backends.onnxruntime import patterns
    from aot.compiler.backends.onnxruntime.lowerings import ONNXRUNTIME_EXPORTS
    from aot.compiler.pattern import root_ops

    admitted = set().union(*(root_ops(p.pattern) for p in patterns.onnxruntime_patterns()))
    assert admitted == set(ONNXRUNTIME_EXPORTS)


# -- releases within runtime-lite[onnxruntime]'s range that compute an op wrongly (known_bugs.py) --------


def _ceil_average_pool() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The AveragePool that onnxruntime before 1.29 averages over the wrong count (found on 1.17-1.28)."""
    pool = helper.make_node(
        "AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
        count_include_pad=1, name="pool",
    )  # fmt: skip
    feeds = {"x": rand(1, 2, 10, 10)}
    return make_model([pool], feeds, ["y"]), feeds


def _empty_reduce_max() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """ReduceMax over an empty axis, which onnxruntime before 1.21 fails instead of giving -inf."""
    reduce = helper.make_node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=0, name="reduce")
    feeds = {"x": np.zeros((2, 0, 3), np.float32)}
    return make_model([reduce], feeds, ["y"]), feeds


@pytest.mark.parametrize(
    ("model", "old", "fixed", "words"),
    [
        (_ceil_average_pool, "1.28.0", "1.29.0", "before 1.29 averages AveragePool graph.node[0]"),
        (_empty_reduce_max, "1.20.0", "1.21.0", "before 1.21 fails ReduceMax graph.node[0] over an empty tensor"),
    ],
    ids=["average-pool-ceil-include-pad", "empty-reduce-max"],
)
def test_an_onnxruntime_that_gets_a_recipe_wrong_leaves_it_to_the_host_plan(model, old, fixed, words, monkeypatch):
    """Checked against onnx's reference evaluator, not onnxruntime: the point is that some releases are wrong."""
    import onnxruntime
    from onnx.reference import ReferenceEvaluator

    graph, feeds = model()
    expected = ReferenceEvaluator(graph).run(None, feeds)
    bundle = _build(graph).to_bytes()
    for version, runs_on in ((old, "host"), (fixed, "onnxruntime")):
        monkeypatch.setattr(onnxruntime, "__version__", version)  # test double: the release the host has
        module = runtime_lite.load(bundle)
        placement = module.placement["onnxruntime_0"]
        assert placement["runs_on"] == runs_on, placement
        assert (words in placement["detail"]) == (runs_on == "host") and version in placement["detail"]
        if runs_on == "host":  # the real onnxruntime here is a fixed one: its numbers say nothing about the gate
            np.testing.assert_allclose(module.run(feeds)[0], expected[0], rtol=1e-6, atol=1e-6)


def test_onnxruntime_release_numbers_are_read_from_any_version_string():
    from runtime_lite.backends.onnxruntime.known_bugs import release

    assert release("1.17.0") == (1, 17) and release("1.29.0.dev20260101") == (1, 29) and release("2.0") == (2, 0)
    assert release("unknown") == (0, 0)
