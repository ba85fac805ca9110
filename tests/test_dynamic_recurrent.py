"""RNN, GRU and LSTM over a sequence length known only at run time (a recognizer's time axis).

Each layer is written with ``onnx.helper`` with a symbolic sequence ``T`` (and batch), built once,
and checked against onnxruntime on the same file at several lengths, in both directions, with and
without bias, initial states and peepholes; a torch-exported LSTM with dynamic axes too.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import aot
import runtime_lite
from tests.helpers import onnxruntime_outputs, rand

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
LENGTHS = (1, 5, 13)


def recurrent_model(kind: str, direction: str, extras: bool, hidden: int = 6, features: int = 4, **attrs):
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[kind]
    inits = {
        "W": rand(dirs, gates * hidden, features, seed=1),
        "R": rand(dirs, gates * hidden, hidden, seed=2),
    }
    names = ["x", "W", "R"]
    if extras:
        inits["B"] = rand(dirs, 2 * gates * hidden, seed=3)
        names += ["B", ""]
    graph_inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["T", "batch", features])]
    if extras:
        graph_inputs.append(helper.make_tensor_value_info("h0", onnx.TensorProto.FLOAT, [dirs, "batch", hidden]))
        names.append("h0")
        if kind == "LSTM":
            graph_inputs.append(helper.make_tensor_value_info("c0", onnx.TensorProto.FLOAT, [dirs, "batch", hidden]))
            inits["P"] = rand(dirs, 3 * hidden, seed=4)
            names += ["c0", "P"]
    outputs = ["y", "y_h"] + (["y_c"] if kind == "LSTM" else [])
    node = helper.make_node(kind, names, outputs, hidden_size=hidden, direction=direction, **attrs)
    graph = helper.make_graph(
        [node],
        "recurrent",
        graph_inputs,
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    opsets = [helper.make_opsetid("", 14)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def feeds_for(model: onnx.ModelProto, steps: int, batch: int) -> dict[str, np.ndarray]:
    feeds = {}
    for i, value in enumerate(model.graph.input):
        dims = [d.dim_value or {"T": steps, "batch": batch}[d.dim_param] for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rand(*dims, seed=steps * 10 + i)
    return feeds


def check(module: runtime_lite.Module, model: onnx.ModelProto, lengths=LENGTHS, batch: int = 2) -> None:
    for steps in lengths:
        feeds = feeds_for(model, steps, batch)
        expected = onnxruntime_outputs(model, feeds)
        actual = module.run(feeds)
        for a, e in zip(actual, expected):
            assert a.shape == e.shape, (steps, a.shape, e.shape)
            rel = np.linalg.norm(a - e) / np.linalg.norm(e)
            assert rel <= 1e-5, (steps, rel)


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("extras", [False, True], ids=["plain", "bias-states-peepholes"])
def test_a_recurrent_layer_over_a_run_time_length_matches_onnxruntime(kind, direction, extras):
    model = recurrent_model(kind, direction, extras)
    result = aot.build(model, log=None)
    assert result.op_counts.get("recurrent") == 1, result.op_counts
    module = runtime_lite.load(result.to_bytes())
    assert module.inputs[0].shape == ("T", "batch", 4)
    check(module, model)


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
def test_clip_activations_and_gru_reset_flavour_over_a_run_time_length(kind):
    model = recurrent_model(kind, "forward", True, clip=0.7)
    if kind == "GRU":
        model = recurrent_model(kind, "bidirectional", True, clip=0.7, linear_before_reset=1,
                                activations=["Sigmoid", "Relu", "Sigmoid", "Tanh"])  # fmt: skip
    module = runtime_lite.load(aot.build(model, log=None).to_bytes())
    check(module, model)


def test_a_fixed_length_still_unrolls_and_agrees_with_the_time_loop():
    """The clip applies to the gates' inputs, not the cell state (the unrolled form clipped both before)."""
    model = recurrent_model("LSTM", "bidirectional", True, clip=0.7)
    shapes = {"x": (5, 2, 4), "h0": (2, 2, 6), "c0": (2, 2, 6)}
    fixed = runtime_lite.load(aot.build(model, input_shapes=shapes, log=None).to_bytes())
    assert "recurrent" not in aot.build(model, input_shapes=shapes, log=None).op_counts
    looped = runtime_lite.load(aot.build(model, log=None).to_bytes())
    feeds = feeds_for(model, 5, 2)
    check(fixed, model, lengths=[5])
    for a, b in zip(fixed.run(feeds), looped.run(feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "kind, direction, attrs",
    [
        ("RNN", "bidirectional", {}),
        ("GRU", "bidirectional", {"clip": 0.7, "linear_before_reset": 1,
                                  "activations": ["Sigmoid", "Relu", "Sigmoid", "Tanh"]}),
        ("LSTM", "reverse", {"clip": 0.7}),
    ],
)  # fmt: skip
def test_the_onnxruntime_target_runs_a_run_time_length_on_onnxruntime(kind, direction, attrs):
    """The ``recurrent`` op is written into the recipe as ONNX's own layer (initial states and peepholes in
    their slots), so the region holds it and onnxruntime runs the time loop: no host op between regions."""
    model = recurrent_model(kind, direction, True, **attrs)
    result = aot.build(model, targets=["onnxruntime"], log=None)
    assert result.regions["host"] == 0 and len(result.header["modules"]) == 1, result.regions
    module = runtime_lite.load(result.to_bytes())
    assert [p["runs_on"] for p in module.placement.values()] == ["onnxruntime"]
    check(module, model)


def test_a_torch_exported_lstm_with_a_dynamic_time_axis(tmp_path):
    torch = pytest.importorskip("torch")

    class Recognizer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lstm = torch.nn.LSTM(8, 12, num_layers=2, bidirectional=True)
            self.head = torch.nn.Linear(24, 5)

        def forward(self, x):
            y, _ = self.lstm(x)
            return self.head(y)

    path = tmp_path / "recognizer.onnx"
    torch.onnx.export(Recognizer().eval(), (torch.zeros(7, 1, 8),), str(path), input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "T", 1: "batch"}}, dynamo=False,
                      opset_version=14)  # fmt: skip
    model = onnx.load(str(path))
    for targets in (["host"], ["onnxruntime"]):
        module = runtime_lite.load(aot.build(model, targets=targets, log=None).to_bytes())
        assert module.inputs[0].shape == ("T", "batch", 8)
        for steps, batch in ((1, 1), (9, 3), (31, 2)):
            x = rand(steps, batch, 8, seed=steps)
            (expected,) = onnxruntime_outputs(model, {"x": x})
            (actual,) = module.run({"x": x})
            assert np.linalg.norm(actual - expected) / np.linalg.norm(expected) <= 1e-5, (targets, steps)


def test_batch_first_layout_over_a_run_time_length():
    """``layout=1``: x [batch, seq, input], y [batch, seq, dirs, hidden], the states [batch, dirs, hidden].
    onnxruntime refuses layout=1, so the reference is its layout=0 run on the transposed input."""
    hidden, features = 5, 3
    inits = {"W": rand(2, 4 * hidden, features, seed=1), "R": rand(2, 4 * hidden, hidden, seed=2)}
    node = helper.make_node("LSTM", ["x", "W", "R"], ["y", "y_h", "y_c"], hidden_size=hidden,
                            direction="bidirectional", layout=1)  # fmt: skip
    graph = helper.make_graph(
        [node],
        "batch_first",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", "T", features])],
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("y", "y_h", "y_c")],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    module = runtime_lite.load(aot.build(model, log=None).to_bytes())
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    del reference.graph.node[0].attribute[-1]  # layout
    assert all(a.name != "layout" for a in reference.graph.node[0].attribute)
    reference.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["T", "batch", 3]))
    for steps in LENGTHS:
        x = rand(2, steps, features, seed=steps)
        y, y_h, y_c = onnxruntime_outputs(reference, {"x": x.transpose(1, 0, 2).copy()})
        expected = [y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), y_c.transpose(1, 0, 2)]
        for a, e in zip(module.run([x]), expected):
            assert a.shape == e.shape and np.linalg.norm(a - e) / np.linalg.norm(e) <= 1e-5, steps
