"""The int8 accuracy report reads each output by how the graph makes it, not by its shape alone.

A YOLO head's [batch, 4 + classes, anchors] (a concat of box regressions and sigmoid class scores) is a detector,
not a (batch, time, classes) sequence; a recurrent state (an LSTM's Y_h, or an output fed back as an input of the
same shape, state -> stateN) holds no class scores and must not drive the verdict; a single sigmoid probability
per row reads as a binary decision; where no output has a task metric the verdict holds relative L2 to a stated
threshold (docs/quantization.md, "The accuracy report")."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
from aot.compiler.quantize import QuantizeConfig
from aot.compiler.quantize.report import (
    RELATIVE_L2_THRESHOLD,
    Reading,
    _carried_pair,
    compare,
    judgement,
    output_readings,
    verdict,
)
from aot.frontend.onnx import from_onnx

F = TensorProto.FLOAT


def _save(tmp_path, name, nodes, inputs, outputs, weights):
    graph = helper.make_graph(nodes, name, inputs, outputs, [numpy_helper.from_array(w, n) for n, w in weights])
    path = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def _build(path, samples, **kw):
    return aot.build(path, targets=["onnxruntime"], quantize=QuantizeConfig(samples, holdout=0.25, **kw), log=None)


# -- a YOLO-style head: Concat(boxes, Sigmoid(scores)) -> [1, 4 + C, A] --------------------------------------


CLASSES, SIDE = 6, 8


@pytest.fixture(scope="module")
def yolo(tmp_path_factory):
    rng = np.random.default_rng(0)
    tmp = tmp_path_factory.mktemp("yolo")
    weights = [
        ("w1", (rng.standard_normal((16, 3, 3, 3)) * 0.3).astype(np.float32)),
        ("w2", (rng.standard_normal((4 + CLASSES, 16, 1, 1)) * 0.5).astype(np.float32)),
        ("b2", np.r_[np.zeros(4), np.full(CLASSES, -1.5)].astype(np.float32)),
        ("split", np.array([4, CLASSES], np.int64)),
        ("flat", np.array([1, 4 + CLASSES, SIDE * SIDE], np.int64)),
        ("stride", np.array(8.0, np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["images", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
        helper.make_node("Reshape", ["c2", "flat"], ["raw"]),
        helper.make_node("Split", ["raw", "split"], ["box_raw", "cls_raw"], axis=1),
        helper.make_node("Mul", ["box_raw", "stride"], ["boxes"]),
        helper.make_node("Sigmoid", ["cls_raw"], ["scores"]),
        helper.make_node("Concat", ["boxes", "scores"], ["output0"], axis=1),
    ]
    path = _save(
        tmp, "yolo", nodes, [helper.make_tensor_value_info("images", F, [1, 3, SIDE, SIDE])],
        [helper.make_tensor_value_info("output0", F, [1, 4 + CLASSES, SIDE * SIDE])], weights,
    )  # fmt: skip
    samples = [{"images": rng.standard_normal((1, 3, SIDE, SIDE)).astype(np.float32)} for _ in range(40)]
    return path, samples


def test_a_yolo_head_reads_as_a_detector_not_a_sequence(yolo):
    path, samples = yolo
    graph = from_onnx(path)
    (reading,) = output_readings(graph).values()
    assert reading.detector == (1, tuple(range(4, 4 + CLASSES))) and reading.unreadable is None
    result = _build(path, samples)
    rows = [n for n in result.notes if n.startswith("accuracy output0")]
    assert rows and all("read as a detector's head (4 box and 6 class score channels along axis 1" in r for r in rows)
    assert not any("positions" in r or "CTC" in r for r in rows)
    (judged,) = [n for n in result.notes if n.startswith("int8 judged")]
    assert "output0 as a detector's head" in judged
    (line,) = [n for n in result.notes if n.startswith("int8 verdict")]
    assert line.startswith("int8 verdict: within the 1 point budget: agreement 9")  # was 0.0%: anchors as time
    # read as a sequence, every method lost every sample and the budget kept every layer float
    assert len(result.quantization.kept_float) < 2


def test_a_detector_agreement_counts_confident_anchors_only():
    floats = np.zeros((1, 4 + 3, 5), np.float32)
    floats[0, :4] = 10.0
    floats[0, 4:, 0] = [0.9, 0.1, 0.2]  # confident: class 0
    floats[0, 4:, 1] = [0.01, 0.02, 0.03]  # below 0.05: not counted, whatever int8 does
    quantized = floats.copy()
    quantized[0, 4:, 1] = [0.04, 0.0, 0.0]
    quantized[0, :4, 0] = 11.0
    row = compare("out", "held-back", [floats], [quantized], reading=Reading(detector=(1, (4, 5, 6))))
    assert row.task_agreement == 1.0 and row.positions == 1 and row.box_l2 == pytest.approx(0.1)
    quantized[0, 4:, 0] = [0.1, 0.9, 0.2]
    row = compare("out", "held-back", [floats], [quantized], reading=Reading(detector=(1, (4, 5, 6))))
    assert row.task_agreement == 0.0
    quiet = np.zeros_like(floats)
    row = compare("out", "held-back", [quiet], [quiet], reading=Reading(detector=(1, (4, 5, 6))))
    assert row.task_agreement is None and "no anchor whose float best score is above 0.05" in row.line()


# -- recurrent state: an LSTM's Y_h, a state fed back by name ---------------------------------------------


def _lstm_model(tmp_path, rng, state_io: bool, steps: int | str = 3):
    """x [T=3, 1, 4] -> LSTM(hidden 8) -> Y_h [1, 1, 8] (an output) and a classifier on it -> logits [1, 5];
    ``state_io``: initial_h is an input 'h0' and Y_h is output 'hn' (a carried state)."""
    hidden, classes = 8, 5
    weights = [
        ("W", (rng.standard_normal((1, 4 * hidden, 4)) * 0.5).astype(np.float32)),
        ("R", (rng.standard_normal((1, 4 * hidden, hidden)) * 0.5).astype(np.float32)),
        ("wc", (rng.standard_normal((hidden, classes)) * 2).astype(np.float32)),
        ("flat", np.array([1, hidden], np.int64)),
    ]
    h_out = "hn" if state_io else "Y_h"
    inputs = [helper.make_tensor_value_info("x", F, [steps, 1, 4])]
    lstm_in = ["x", "W", "R", "", ""]
    if state_io:
        inputs.append(helper.make_tensor_value_info("h0", F, [1, 1, hidden]))
        lstm_in.append("h0")
    nodes = [
        helper.make_node("LSTM", lstm_in, ["Y", h_out], hidden_size=hidden),
        helper.make_node("Reshape", [h_out, "flat"], ["h"]),
        helper.make_node("MatMul", ["h", "wc"], ["logits"]),
    ]
    outputs = [
        helper.make_tensor_value_info("logits", F, [1, classes]),
        helper.make_tensor_value_info(h_out, F, [1, 1, hidden]),
    ]
    return _save(tmp_path, f"lstm_{int(state_io)}_{steps}", nodes, inputs, outputs, weights), h_out


def test_the_state_of_a_recurrent_op_over_a_run_time_length_is_a_state(tmp_path):
    """A sequence length known only at run time imports as one ``recurrent`` op (not unrolled cells)."""
    path, h_out = _lstm_model(tmp_path, np.random.default_rng(3), False, steps="T")
    graph = from_onnx(path)
    assert any(n.op == "recurrent" for n in graph.nodes)
    readings = output_readings(graph)
    assert readings[h_out].state and "the state of an LSTM layer" in readings[h_out].unreadable


@pytest.mark.parametrize("state_io", [False, True])
def test_an_lstm_state_output_is_judged_by_relative_l2_and_left_out_of_the_verdict(tmp_path, state_io):
    rng = np.random.default_rng(1)
    path, h_out = _lstm_model(tmp_path, rng, state_io)
    readings = output_readings(from_onnx(path))
    assert readings[h_out].state and "carried state" in readings[h_out].unreadable
    assert "logits" not in readings
    samples = []
    for _ in range(40):
        sample = {"x": rng.standard_normal((3, 1, 4)).astype(np.float32)}
        if state_io:
            sample["h0"] = (rng.standard_normal((1, 1, 8)) * 0.5).astype(np.float32)
        samples.append(sample)
    result = _build(path, samples)
    state_rows = [n for n in result.notes if n.startswith(f"accuracy {h_out} (")]
    assert state_rows and all("judged by relative L2 alone, left out of the verdict" in r for r in state_rows)
    assert not any("positions" in r for r in state_rows)
    (judged,) = [n for n in result.notes if n.startswith("int8 judged")]
    assert "logits as a classifier" in judged and f"{h_out} by relative L2 alone, left out of the verdict" in judged
    (line,) = [n for n in result.notes if n.startswith("int8 verdict")]
    assert "on 40 calibration and held-back samples" in line and " agreement " in line  # logits' top-1 alone


def test_a_state_fed_back_by_name_is_a_state_and_a_single_probability_a_decision(tmp_path):
    """silero's layout: input 'state' [2, 1, 16] and output 'stateN' of the same shape (not an LSTM op here: a
    matmul and an add), beside a speech probability [1, 1] (a sigmoid's): the verdict reads the probability."""
    rng = np.random.default_rng(2)
    weights = [
        ("wx", (rng.standard_normal((32, 16)) * 0.3).astype(np.float32)),
        ("ws", (rng.standard_normal((16, 16)) * 0.3).astype(np.float32)),
        ("wp", (rng.standard_normal((16, 1)) * 0.5).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("MatMul", ["input", "wx"], ["ax"]),  # [1, 16]
        helper.make_node("MatMul", ["state", "ws"], ["as"]),  # [2, 1, 16]
        helper.make_node("Add", ["as", "ax"], ["stateN"]),
        helper.make_node("MatMul", ["ax", "wp"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["output"]),
    ]
    path = _save(
        tmp_path, "vad", nodes,
        [helper.make_tensor_value_info("input", F, [1, 32]), helper.make_tensor_value_info("state", F, [2, 1, 16])],
        [helper.make_tensor_value_info("output", F, [1, 1]), helper.make_tensor_value_info("stateN", F, [2, 1, 16])],
        weights,
    )  # fmt: skip
    readings = output_readings(from_onnx(path))
    assert readings["stateN"].state and "fed back as input 'state'" in readings["stateN"].unreadable
    assert readings["output"].probability
    samples = [
        {"input": rng.standard_normal((1, 32)).astype(np.float32), "state": rng.standard_normal((2, 1, 16)).astype(np.float32)}
        for _ in range(40)
    ]  # fmt: skip
    result = _build(path, samples)
    assert any("accuracy output (" in n and "read as a binary decision" in n for n in result.notes)
    (judged,) = [n for n in result.notes if n.startswith("int8 judged")]
    assert "output as a binary decision" in judged and "stateN by relative L2 alone, left out" in judged
    (line,) = [n for n in result.notes if n.startswith("int8 verdict")]
    assert line.startswith("int8 verdict: within") and " agreement " in line


@pytest.mark.parametrize(
    "output, input, pairs",
    [
        ("stateN", "state", True),
        ("hn", "h0", True),
        ("cn", "c0", True),
        ("h_out", "h_in", True),
        ("out_state", "in_state", True),
        ("outState", "inState", True),
        ("h_next", "h_new", True),
        ("state1", "state0", True),
        ("output", "input", False),  # "put" is no shared word
        ("y", "x", False),
        ("logits", "images", False),
        ("present.0.key", "past_key_values.0.key", False),
    ],
)
def test_which_names_pair_as_a_carried_state(output, input, pairs):
    assert _carried_pair(output, input) is pairs


# -- the verdict without a task metric ----------------------------------------------------------------------


def test_without_a_task_metric_the_verdict_holds_relative_l2_to_a_stated_threshold():
    f = [np.ones((1, 3, 4, 4), np.float32)]
    near = compare("map", "held-back", f, [f[0] * 1.01])
    far = compare("map", "held-back", f, [f[0] * 1.5])
    state = compare("hn", "held-back", f, [f[0] * 3], reading=Reading("a carried state", state=True))
    assert verdict([near]).startswith("int8 verdict: no output the task metric reads")
    assert f"against {RELATIVE_L2_THRESHOLD:g}: within, relative L2 0.0100 (map)" in verdict([near])
    assert ": OVER, relative L2 0.5000 (map)" in verdict([far])
    # a state's error is not the verdict's while another output is there
    assert ": within, relative L2 0.0100 (map)" in verdict([near, state])
    assert judgement([near, state]) == (
        "int8 judged: map by relative L2 alone (a rank-4 output); hn by relative L2 alone, left out of the verdict "
        "(a carried state)"
    )
