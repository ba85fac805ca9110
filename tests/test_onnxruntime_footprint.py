"""The onnxruntime footprint is an upper bound of what onnxruntime allocates (issue 40, docs/RELIABILITY.md 1b).

The issue's cases at ``max_memory = 64 MiB``: a Resize with ``axes`` and one with
``keep_aspect_ratio_policy`` that the walk sized far too small, twenty graph outputs the
module never fetches that the walk freed and onnxruntime keeps, and a 200,000-node
chain whose load had no bound. Then the proof op by op: for every allow-listed op in
the onnx wheel's backend node tests that onnxruntime runs, the walk's per-node output
shapes and element sizes equal what onnxruntime actually returns.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
import runtime_lite
from runtime_lite import BundleError
from runtime_lite.backends.onnxruntime.footprint import ITEMSIZE, _element_types
from runtime_lite.backends.onnxruntime.recipe_check import ALLOWED_OPS, check_recipe
from runtime_lite.errors import ExecutionError
from runtime_lite.execution import load_budget
from tests.helpers import make_model
from tests.hostile import Seed

ort = pytest.importorskip("onnxruntime")
BUDGET = 64 << 20
X = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def relu_seed() -> Seed:
    """An onnxruntime bundle of one Relu over x[1, 1, 8, 8]; recipes below replace its recipe."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": X}, ["y"])
    result = aot.build(model, targets=["onnxruntime"], min_region_size=1, log=None)
    return Seed("relu", copy.deepcopy(result.header), [bytes(p) for p in result.blobs.payloads], [X])


def _names(seed: Seed) -> tuple[str, str]:
    recipe = onnx.load_from_string(seed.payloads[seed.header["modules"][0]["payloads"]["recipe"]])
    return recipe.graph.input[0].name, recipe.graph.output[0].name


def _with_recipe(seed: Seed, nodes, extra_outputs=(), inits=None, opset: int = 18) -> bytes:
    """``seed`` whose recipe is ``nodes`` from its input to its output (and ``extra_outputs`` as graph outputs)."""
    x, y = _names(seed)
    rename = {"x": x, "y": y}
    for node in nodes:
        node.input[:] = [rename.get(n, n) for n in node.input]
        node.output[:] = [rename.get(n, n) for n in node.output]
    outputs = [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)]
    outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in extra_outputs]
    graph = helper.make_graph(
        nodes, "hostile", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 1, 8, 8])], outputs,
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    payloads = list(seed.payloads)
    payloads[seed.header["modules"][0]["payloads"]["recipe"]] = model.SerializeToString()
    return seed.pack(seed.header, payloads)


def _refused_at_run(bundle: bytes) -> str:
    module = runtime_lite.load(bundle, max_memory=BUDGET)
    assert module.placement["onnxruntime_0"]["runs_on"] == "onnxruntime", module.placement
    with pytest.raises(ExecutionError) as refused:
        module.run([X])
    return str(refused.value)


def test_a_resize_with_axes_is_sized_as_onnxruntime_makes_it(relu_seed):
    """The issue: the walk sized (4194304,), onnxruntime made [1, 4194304, 8, 8] (+1088 MiB)."""
    nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], axes=[1], mode="nearest")]
    bundle = _with_recipe(relu_seed, nodes, inits={"sizes": np.array([4194304], np.int64)})
    assert "onnxruntime would hold 1,073,741,824 bytes" in _refused_at_run(bundle)  # [1, 4194304, 8, 8] float32


def test_a_resize_keeping_the_aspect_ratio_is_sized_as_onnxruntime_makes_it(relu_seed):
    """not_smaller scales every resized axis by the largest ratio: [1,1,8,8] -> [32, 32, 256, 256], not [1,1,1,256]."""
    nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], keep_aspect_ratio_policy="not_smaller")]
    bundle = _with_recipe(relu_seed, nodes, inits={"sizes": np.array([1, 1, 1, 256], np.int64)})
    assert f"onnxruntime would hold {32 * 32 * 256 * 256 * 4:,} bytes" in _refused_at_run(bundle)


def test_graph_outputs_the_module_never_fetches_stay_alive_in_the_footprint(relu_seed):
    """Twenty Tiles of the input, each 4 MiB, as extra graph outputs: onnxruntime keeps all 80 MiB alive."""
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    extras = [f"t{i}" for i in range(20)]
    nodes += [helper.make_node("Tile", ["x", "reps"], [name]) for name in extras]
    bundle = _with_recipe(relu_seed, nodes, extras, inits={"reps": np.array([1, 1, 128, 128], np.int64)})
    assert f"onnxruntime would hold {20 * (4 << 20) + X.nbytes:,} bytes" in _refused_at_run(bundle)  # and y
    # the same recipe fits a budget that holds all of them, and computes what the bundle declares
    roomy = runtime_lite.load(bundle, max_memory=128 << 20)
    np.testing.assert_array_equal(roomy.run([X])[0], np.maximum(X, 0))


def _chain(seed: Seed, length: int) -> bytes:
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"r{i}"], [f"r{i + 1}"]) for i in range(length - 1)]
    nodes.append(helper.make_node("Relu", [f"r{length - 1}" if length > 1 else "x"], ["y"]))
    return _with_recipe(seed, nodes, opset=17)


def test_a_long_chain_in_a_small_bundle_is_refused_by_the_load_budget(relu_seed):
    """The issue's 200,000-node Relu chain (4 MiB, 83 s to load and run): refused while the recipe is parsed."""
    bundle = _chain(relu_seed, 200_000)
    with pytest.raises(BundleError, match="more graph nodes than a .*-byte bundle may load") as refused:
        runtime_lite.load(bundle)
    assert "\n" not in str(refused.value) and "onnxruntime.payloads.recipe" in str(refused.value)
    budget = load_budget.LoadBudget(len(bundle))
    assert budget.limit == load_budget.MIN_NODES < 200_000  # 4 MiB buys no more than the floor
    small = runtime_lite.load(_chain(relu_seed, 500))  # well inside the floor: loads and runs on onnxruntime
    assert small.placement["onnxruntime_0"]["runs_on"] == "onnxruntime"
    np.testing.assert_array_equal(small.run([X])[0], np.maximum(X, 0))


def test_the_load_budget_is_shared_by_the_recipes_of_one_bundle():
    budget = load_budget.LoadBudget(1 << 20)
    budget.charge(load_budget.MIN_NODES - 10, "modules[0]")
    with pytest.raises(BundleError, match="bundle field 'modules\\[1\\]': more graph nodes"):
        budget.charge(11, "modules[1]")


# -- the proof, op by op ---------------------------------------------------------------------------------------

#: Inputs up to this many elements become initializers, as the recipe writer stores shapes, axes and scales.
SMALL = 64


def _backend_cases():
    from onnx.backend.test.case import node as node_cases

    with np.errstate(all="ignore"):
        cases = node_cases.collect_testcases(None)
    for case in cases:
        nodes = case.model.graph.node
        if nodes and all(n.op_type in ALLOWED_OPS and n.domain in ("", "ai.onnx") for n in nodes):
            yield case


def _as_recipe(case) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The case's model as the recipe check sees a recipe: small operands as initializers, the other inputs
    declared with the test data's shapes, opset and IR clamped into the check's range; its remaining inputs."""
    model = copy.deepcopy(case.model)
    inputs, _ = case.data_sets[0]
    graph = model.graph
    feeds = {}
    declared = list(graph.input)
    del graph.input[:]
    for info, value in zip(declared, inputs):
        value = np.asarray(value)
        if value.dtype.kind in "iuf" and value.size <= SMALL and value.dtype != np.float16:
            graph.initializer.append(numpy_helper.from_array(value, info.name))
        else:
            graph.input.append(helper.make_tensor_value_info(info.name, info.type.tensor_type.elem_type, value.shape))
            feeds[info.name] = value
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    # into the check's 13..21: the allow-listed ops past 21 added types only (a case using something else
    # no longer loads in onnxruntime, and is left out)
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", min(max(opset, 13), 21)))
    model.ir_version = min(model.ir_version, 10)
    # every node output a graph output, so onnxruntime returns each one
    outputs = {o.name for o in graph.output}
    for node in graph.node:
        for name in node.output:
            if name and name not in outputs:
                graph.output.append(helper.make_empty_tensor_value_info(name))
                outputs.add(name)
    return model, feeds


def test_the_walk_sizes_every_allow_listed_op_as_onnxruntime_computes_it():
    compared, ops, unfollowed, mismatches = 0, set(), set(), []
    for case in _backend_cases():
        model, feeds = _as_recipe(case)
        try:
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            names = [o.name for o in session.get_outputs()]
            actual = dict(zip(names, session.run(names, feeds)))
        except Exception:  # noqa: BLE001 - a case this onnxruntime does not run (opset, type): not a recipe it runs
            continue
        try:
            facts = check_recipe(model.SerializeToString(), {}, case.name)
        except BundleError:
            continue  # refused before onnxruntime: nothing to bound
        types = _element_types(facts.types, facts.nodes)
        for node in facts.nodes:
            for name in node.outputs:
                if not name or name not in actual:
                    continue
                shape = facts.shapes.get(name)
                if shape is None or None in shape or types.get(name) not in ITEMSIZE:
                    unfollowed.add(node.op_type)  # the footprint is then unbounded: the host plan runs it
                    continue
                got = np.asarray(actual[name])
                compared += 1
                ops.add(node.op_type)
                if tuple(shape) != got.shape or ITEMSIZE[types[name]] != got.dtype.itemsize:
                    mismatches.append(f"{case.name}: {node.op_type} {name} walk {shape}x{ITEMSIZE.get(types[name])}B, "
                                      f"onnxruntime {got.shape}x{got.dtype.itemsize}B")  # fmt: skip
    print(f"{compared} outputs of {len(ops)} ops compared; not followed (host plan): {sorted(unfollowed)}")
    assert not mismatches, "\n".join(mismatches)
    assert len(ops) >= 60 and {"Resize", "Tile", "Expand", "Pad", "Concat", "Gather", "Conv"} <= ops


def test_a_range_of_a_trillion_is_refused_before_onnxruntime_allocates_and_a_zero_step_at_load(relu_seed):
    bounds = {"s": np.array(0.0, np.float32), "l": np.array(1e12, np.float32), "d": np.array(1.0, np.float32)}
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Range", ["s", "l", "d"], ["r"])]
    refused = _refused_at_run(_with_recipe(relu_seed, nodes, extra_outputs=["r"], inits=bounds))
    assert "BudgetExceeded" in refused and "max_memory" in refused, refused
    stuck = {**bounds, "d": np.array(0.0, np.float32)}
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Range", ["s", "l", "d"], ["r"])]
    with pytest.raises(BundleError, match="Range with a step of 0"):
        runtime_lite.load(_with_recipe(relu_seed, nodes, extra_outputs=["r"], inits=stuck))
