"""A run on onnxruntime keeps the load's budgets: max_memory before the session allocates, max_run_seconds during it.

The host plan refuses a run whose next allocation would pass ``max_memory``; a delegate region used to
hand onnxruntime whatever its graph asked for (an Expand of one element to 2 GB under a 1 GiB budget ran,
and a larger one gets the process killed). runtime_lite/backends/onnxruntime/footprint.py sizes the run's
activations from the input shapes first.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import aot
import runtime_lite
from runtime_lite.backends.onnxruntime import footprint, session, shapes
from runtime_lite.errors import ExecutionError
from tests.helpers import make_model
from tests.test_onnxruntime_backend import Seed

ONE = np.ones((1, 1), np.float32)


def expand_model(rows: int, cols: int) -> onnx.ModelProto:
    """One element grown to rows x cols by a constant shape, then summed: a few hundred bytes of graph."""
    nodes = [
        helper.make_node("Expand", ["x", "shape"], ["big"], name="grow"),
        helper.make_node("ReduceSum", ["big", "axes"], ["y"], keepdims=0, name="sum"),
    ]
    inits = {"shape": np.array([rows, cols], np.int64), "axes": np.array([0, 1], np.int64)}
    return make_model(nodes, {"x": ONE}, ["y"], inits)


def _load(model: onnx.ModelProto, **options) -> runtime_lite.Module:
    return runtime_lite.load(aot.build(model, targets=["onnxruntime"], log=None).to_bytes(), **options)


def test_a_run_past_max_memory_is_refused_before_onnxruntime_allocates():
    module = _load(expand_model(1000, 1000), max_memory=1 << 20)  # the expand alone is 4 MB
    assert module.placement["onnxruntime_0"]["runs_on"] == "onnxruntime"
    with pytest.raises(ExecutionError, match=r"onnxruntime would hold 4,000,00\d bytes .* max_memory = 1,048,576"):
        module.run({"x": ONE})
    roomy = _load(expand_model(1000, 1000), max_memory=16 << 20)
    assert roomy.run({"x": ONE})[0] == pytest.approx(1e6)  # within budget it runs, on onnxruntime


def test_the_footprint_holds_each_activation_until_its_last_reader_and_sizes_it_by_type():
    nodes = [
        shapes.Node("Relu", ["x"], ["a"], {}, "relu"),
        shapes.Node("Exp", ["a"], ["b"], {}, "exp"),
        shapes.Node("Cast", ["b"], ["wide"], {"to": TensorProto.DOUBLE}, "cast"),  # 8 bytes an element
        shapes.Node("Greater", ["a", "b"], ["mask"], {}, "greater"),  # 1 byte; a and b are read for the last time
        shapes.Node("Not", ["mask"], ["y"], {}, "not"),
    ]
    plan = footprint.Footprint({"x": (None, 100)}, {}, {}, nodes, {"x": TensorProto.FLOAT}, ["x"], ["y", "wide"])
    assert plan.unbounded is None
    n = 3
    a = b = n * 100 * 4
    wide, mask = n * 100 * 8, n * 100
    # live after each node: a; a+b; a+b+wide; a+b+wide+mask, then a and b freed; wide+mask+y (y: n * 100)
    assert plan.peak_bytes([(n, 100)]) == a + b + wide + mask
    assert plan.peak_bytes([(2 * n, 100)]) == 2 * (a + b + wide + mask)  # a symbolic batch, another signature


def test_a_symbolic_batch_is_sized_per_run():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Exp", ["r"], ["y"], name="exp")]
    model = make_model(nodes, {"x": np.ones((2, 256), np.float32)}, ["y"], input_shapes={"x": ["N", 256]})
    module = _load(model, max_memory=64 << 10)  # 64 kB: batch 8 needs 16 kB, batch 1000 2 MB
    small = np.ones((8, 256), np.float32)
    np.testing.assert_allclose(module.run({"x": small})[0], np.exp(small), rtol=1e-6)
    with pytest.raises(ExecutionError, match="onnxruntime would hold"):
        module.run({"x": np.ones((1000, 256), np.float32)})


def test_a_recipe_whose_memory_cannot_be_bounded_runs_on_the_host_and_says_why():
    """A shape the walk cannot read (an Abs between the constant and the Reshape: the walk computes shapes
    through Shape, Cast, Gather, Slice, Concat and integer arithmetic only): no bound, so no onnxruntime."""
    nodes = [
        helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    model = make_model(nodes, {"x": np.ones((4, 6), np.float32)}, ["y"], {"target": np.array([3, 8], np.int64)})
    result = aot.build(model, targets=["onnxruntime"], log=None, min_region_size=1)
    seed = Seed("ort", result.header, [bytes(p) for p in result.blobs.payloads], [])
    index = seed.header["modules"][0]["payloads"]["recipe"]
    recipe = onnx.load_from_string(seed.payloads[index])
    reshape = next(n for n in recipe.graph.node if n.op_type == "Reshape")
    recipe.graph.node.insert(0, helper.make_node("Abs", [reshape.input[1]], ["abs_target"]))
    reshape.input[1] = "abs_target"
    payloads = list(seed.payloads)
    payloads[index] = recipe.SerializeToString()
    module = runtime_lite.load(seed.pack(seed.header, payloads))
    placement = module.placement["onnxruntime_0"]
    assert placement["runs_on"] == "host" and "could not bound its memory" in placement["detail"]
    x = np.arange(24, dtype=np.float32).reshape(4, 6) - 12
    np.testing.assert_array_equal(module.run({"x": x})[0], np.maximum(x.reshape(3, 8), 0))
    with pytest.raises(runtime_lite.errors.PlacementError):
        runtime_lite.load(seed.pack(seed.header, payloads), require=("onnxruntime",))


def test_a_run_past_max_run_seconds_is_stopped_by_onnxruntime(monkeypatch):
    """``RunOptions.terminate`` set at the deadline stops the session between nodes; the run fails in one line."""
    steps = 100  # a chain of sines over 4 MB: ~1 ms a node here, far longer than the 20 ms the run is given
    nodes = [helper.make_node("Sin", [f"v{i}"], [f"v{i + 1}"], name=f"sin{i}") for i in range(steps)]
    nodes[0].input[0], nodes[-1].output[0] = "x", "y"
    x = np.linspace(-3, 3, 1 << 20, dtype=np.float32).reshape(1, -1)
    module = _load(make_model(nodes, {"x": x}, ["y"]), max_run_seconds=30.0)
    module.run({"x": x})  # well inside its deadline

    class LateClock:  # test double: session.py's clock reads 29.98 s later than the run's start, 20 ms left
        @staticmethod
        def monotonic() -> float:
            return time.monotonic() + 29.98

    monkeypatch.setattr(session, "time", LateClock)
    start = time.monotonic()
    with pytest.raises(ExecutionError, match=r"max_run_seconds \(onnxruntime stopped it\)"):
        module.run({"x": x})
    assert time.monotonic() - start < 10.0  # stopped, not run to the end of a slow machine's chain


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "-v"])
def test_a_run_failing_inside_onnxruntime_prints_no_line_of_its_own_unless_verbose(caplog, capfd, verbose):
    """onnxruntime logs ``[E:onnxruntime:...]`` to stderr when a kernel fails; the caller gets the error raised
    (one line, where the module names it), and onnxruntime's own lines only where its log is verbose (``-v``)."""
    reshape = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
        {"x": np.ones((1, 16), np.float32), "shape": np.array([4, 4], np.int64)},
        ["y"],
    )
    caplog.set_level(logging.INFO if verbose else logging.WARNING, logger="runtime_lite.onnxruntime")
    opened = session.Session(reshape.SerializeToString(), {}, ["x", "shape"], ["y"], session.SessionSettings())
    capfd.readouterr()
    with pytest.raises(Exception, match="Reshape"):
        opened.run([np.ones((1, 16), np.float32), np.array([3, 5], np.int64)])  # 16 values cannot be 3 x 5
    printed = capfd.readouterr().err
    assert ("[E:onnxruntime" in printed) == verbose, printed
