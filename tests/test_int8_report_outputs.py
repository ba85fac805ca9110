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
    Score,
    _carried_pair,
    compare,
    judgement,
    output_readings,
    score,
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
    # was 0.0%: anchors as time; then best class agreement on anchors above 0.05, blind to the scores' movement
    assert line.startswith("int8 verdict: within the 1 point budget: detection F1 at score 0.25 9")
    # read as a sequence, every method lost every sample and the budget kept every layer float
    assert len(result.quantization.kept_float) < 2


def test_a_detector_agreement_counts_detections_only():
    floats = np.zeros((1, 4 + 3, 5), np.float32)
    floats[0, :4] = 10.0
    floats[0, 4:, 0] = [0.9, 0.1, 0.2]  # a detection: class 0
    floats[0, 4:, 1] = [0.01, 0.02, 0.03]  # below the threshold: no detection, whatever int8 does below it
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
    assert row.task_agreement is None and "no anchor whose float best score is above 0.25" in row.line()


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


# -- a multi-label map: element-wise sigmoids over [N, T, C] (basic-pitch's note / onset / contour maps) -------


FRAMES, PITCHES, FEATURES = 12, 10, 16


def _multilabel_model(tmp_path, rng, layout: str):
    """x [1, T, F] -> a head ending in Sigmoid -> [1, T, C], each element its own sigmoid (several notes at once, or
    none). ``layout``: ``matmul`` (MatMul + Add, Sigmoid), ``conv`` (Conv1d over [1, F, T], Sigmoid, Transpose to
    [1, T, C], then a Reshape), ``concat`` (two slices of one sigmoid map concatenated along C)."""
    weights = [
        ("w", (rng.standard_normal((FEATURES, PITCHES)) * 0.8).astype(np.float32)),
        ("b", np.full(PITCHES, -1.5, np.float32)),
    ]
    if layout == "matmul":
        nodes = [
            helper.make_node("MatMul", ["x", "w"], ["mm"]),
            helper.make_node("Add", ["mm", "b"], ["logit"]),
            helper.make_node("Sigmoid", ["logit"], ["note"]),
        ]
    elif layout == "conv":
        weights = [
            ("wc", (rng.standard_normal((PITCHES, FEATURES, 3)) * 0.5).astype(np.float32)),
            ("bc", np.full(PITCHES, -1.5, np.float32)),
            ("shape", np.array([1, FRAMES, PITCHES], np.int64)),
        ]
        nodes = [
            helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),  # [1, F, T]
            helper.make_node("Conv", ["xt", "wc", "bc"], ["logit"], pads=[1, 1]),  # [1, C, T]
            helper.make_node("Sigmoid", ["logit"], ["prob"]),
            helper.make_node("Transpose", ["prob"], ["pt"], perm=[0, 2, 1]),  # [1, T, C]
            helper.make_node("Reshape", ["pt", "shape"], ["note"]),
        ]
    else:
        weights += [
            ("lo", np.array([0], np.int64)), ("mid", np.array([PITCHES // 2], np.int64)),
            ("hi", np.array([PITCHES], np.int64)), ("ax", np.array([2], np.int64)),
        ]  # fmt: skip
        nodes = [
            helper.make_node("MatMul", ["x", "w"], ["mm"]),
            helper.make_node("Add", ["mm", "b"], ["logit"]),
            helper.make_node("Sigmoid", ["logit"], ["prob"]),
            helper.make_node("Slice", ["prob", "lo", "mid", "ax"], ["low"]),
            helper.make_node("Slice", ["prob", "mid", "hi", "ax"], ["high"]),
            helper.make_node("Concat", ["high", "low"], ["note"], axis=2),
        ]
    path = _save(
        tmp_path, f"multilabel_{layout}", nodes, [helper.make_tensor_value_info("x", F, [1, FRAMES, FEATURES])],
        [helper.make_tensor_value_info("note", F, [1, FRAMES, PITCHES])], weights,
    )  # fmt: skip
    return path


@pytest.mark.parametrize("layout", ["matmul", "conv", "concat"])
def test_a_sigmoid_map_reads_as_multi_label_decisions_not_a_ctc_sequence(tmp_path, layout):
    """Read by shape, [1, T, C] of element-wise sigmoids was a CTC sequence (argmax over pitches per frame; "class 0
    ... as a CTC blank's"): basic-pitch's maps scored 0% agreement for every method."""
    rng = np.random.default_rng(4)
    path = _multilabel_model(tmp_path, rng, layout)
    (reading,) = output_readings(from_onnx(path)).values()
    assert reading.multilabel and reading.unreadable is None and reading.detector is None
    samples = [{"x": rng.standard_normal((1, FRAMES, FEATURES)).astype(np.float32)} for _ in range(40)]
    result = _build(path, samples)
    rows = [n for n in result.notes if n.startswith("accuracy note (")]
    assert rows and all(
        "read as multi-label decisions at 0.5 (element-wise sigmoids, several per row): F1 of int8's positives "
        "against float's" in r
        for r in rows
    )
    assert not any("CTC" in r or "top-1" in r for r in rows)
    (judged,) = [n for n in result.notes if n.startswith("int8 judged")]
    assert "note as multi-label decisions at 0.5 (F1 of int8's positives against float's)" in judged
    (every,) = result.quantization.overall
    assert every.positives_f1 is not None and every.positives[0] > 0
    (line,) = [n for n in result.notes if n.startswith("int8 verdict")]
    assert f"agreement {every.positives_f1 * 100:.1f}% on 40 calibration and held-back samples" in line
    assert every.positives_f1 > 0.9  # a small head in int8 keeps nearly every float positive


def test_a_single_sigmoid_per_row_stays_a_decision():
    rows = [np.array([[0.7]], np.float32), np.array([[0.2]], np.float32)]
    row = compare("p", "held-back", rows, [rows[0] * 0.5, rows[1]], reading=Reading(probability=True, multilabel=True))
    assert row.decision and row.positives_f1 is None and row.task_agreement == 0.5


def test_the_multi_label_metric_is_the_f1_of_positives_not_the_share_of_agreeing_elements():
    floats = np.full((1, 20, 10), 0.01, np.float32)
    floats[0, :4, 0] = 0.9  # 4 float positives of 200 elements
    quantized = floats.copy()
    quantized[0, 0, 0] = 0.4  # one missed
    quantized[0, 5, 3] = 0.6  # one extra
    multilabel = Reading(probability=True, multilabel=True)
    row = compare("note", "held-back", [floats], [quantized], reading=multilabel)
    # TP 3, float 4, int8 4: F1 = 2 * 3 / 8, where 198 of 200 elements (99%) agree
    assert row.task_agreement == pytest.approx(0.75) and row.top1_agreement == pytest.approx(0.99)
    assert row.positives == (4, 4) and row.elements == 200 and row.positions == 4
    assert (
        "F1 of int8's positives against float's 75.0% (the task agreement; 4 float and 4 int8 positives" in row.line()
    )
    # one missed positive of 4 costs 1/7 of the F1: two (25 points) are more than one disagreement resolves
    assert verdict([row]).startswith("int8 verdict: OVER the 1 point budget: agreement 75.0% on 1 held-back sample ")
    assert "one disagreement in 7 is 14.3 points: more samples resolve it" in verdict([row])
    assert (
        judgement([row]) == "int8 judged: note as multi-label decisions at 0.5 (F1 of int8's positives against float's)"
    )
    same = compare("note", "held-back", [floats], [floats.copy()], reading=multilabel)
    assert same.task_agreement == 1.0 and score([same]).key() > score([row]).key()
    # every int8 negative: nearly every element still agrees (98%), and the F1 says the task is lost
    silent = compare("note", "held-back", [floats], [np.zeros_like(floats)], reading=multilabel)
    assert silent.task_agreement == 0.0 and silent.top1_agreement == pytest.approx(0.98)


def test_a_multi_label_map_without_float_positives_falls_back_to_relative_l2():
    floats = np.full((1, 20, 10), 0.1, np.float32)
    quantized = floats * 1.02
    quantized[0, 0, 0] = 0.7  # an int8 positive where float has none: no F1 to take
    row = compare("note", "held-back", [floats], [quantized], reading=Reading(probability=True, multilabel=True))
    assert row.task_agreement is None and row.positives_f1 is None
    assert "judged by relative L2 alone: the task metric cannot read a multi-label map (element-wise sigmoids, " in (
        row.line()
    )
    assert "no float positive above 0.5 in these 1 samples (1 int8 positives of 200 elements)" in row.line()
    assert verdict([row]).startswith("int8 verdict: no output the task metric reads, judged by relative L2 against")


def test_the_per_layer_costs_read_the_outputs_as_the_build_does(monkeypatch):
    """The budget's sensitivity samples were judged without the readings, by shape: basic-pitch's maps as CTC, so
    every convolution alone in int8 "lost 100 points" and the budget kept 31 of its 32 float (now 24)."""
    from types import SimpleNamespace

    from aot.compiler.quantize import tuning

    seen = []

    def measure(self, table, keep_float=()):
        seen.append((len(self.samples), self.readings))
        return [], Score(1.0, 1.0, 0.0, len(self.samples))

    monkeypatch.setattr(tuning.Judge, "measure", measure)
    readings = {"note": Reading(probability=True, multilabel=True)}
    plan = SimpleNamespace(ops=[SimpleNamespace(node=SimpleNamespace(name="conv", op="conv2d", inputs=[]))])
    floats = [[np.zeros((1, 4, 3), np.float32)] for _ in range(4)]
    judge = tuning.Judge(None, plan, ["note"], [{}] * 4, floats, "held-back", readings=readings)
    (cost,) = tuning.layer_costs(judge, None, None)
    assert cost.name == "conv" and seen == [(tuning.SENSITIVITY_SAMPLES, readings)]


# -- regression heads and the user's word on an output ------------------------------------------------------


def _face_head(tmp_path):
    """MTCNN ONet's layout: one trunk, three heads: prob (a softmax over 2), reg [N, 4] and landmarks [N, 10]
    (Gemm, no activation): boxes and points, whose argmax no task reads."""
    rng = np.random.default_rng(5)
    weights = [
        ("w", (rng.standard_normal((24, 32)) * 0.3).astype(np.float32)),
        ("wp", (rng.standard_normal((32, 2)) * 0.5).astype(np.float32)),
        ("wr", (rng.standard_normal((32, 4)) * 0.5).astype(np.float32)),
        ("wl", (rng.standard_normal((32, 10)) * 0.5).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h0"]),
        helper.make_node("Relu", ["h0"], ["h"]),
        helper.make_node("MatMul", ["h", "wp"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=1),
        helper.make_node("MatMul", ["h", "wr"], ["reg"]),
        helper.make_node("MatMul", ["h", "wl"], ["landmarks"]),
    ]
    outputs = [helper.make_tensor_value_info(n, F, ["N", k]) for n, k in (("prob", 2), ("reg", 4), ("landmarks", 10))]
    return _save(tmp_path, "onet", nodes, [helper.make_tensor_value_info("x", F, ["N", 24])], outputs, weights)


def test_dense_outputs_beside_a_softmax_head_read_as_regressions(tmp_path):
    readings = output_readings(from_onnx(_face_head(tmp_path)))
    assert "prob" not in readings  # the softmax's scores read by their shape: top-1
    for name in ("reg", "landmarks"):
        assert readings[name].unreadable.startswith("a regression head (shape ['N', ")
        assert "beside 'prob', the scores of a softmax" in readings[name].unreadable


def test_without_a_scores_head_a_dense_output_still_reads_as_class_scores(tmp_path):
    """A plain classifier's logits (a Gemm, no softmax) stay a classifier: the rule needs a sibling of scores."""
    rng = np.random.default_rng(6)
    path = _save(
        tmp_path, "logits", [helper.make_node("MatMul", ["x", "w"], ["logits"])],
        [helper.make_tensor_value_info("x", F, ["N", 8])], [helper.make_tensor_value_info("logits", F, ["N", 5])],
        [("w", rng.standard_normal((8, 5)).astype(np.float32))],
    )  # fmt: skip
    assert output_readings(from_onnx(path)) == {}


def test_an_output_the_user_reads_as_values_is_judged_by_relative_l2(tmp_path):
    """A speech-quality model's three MOS values [N, 3] look like class scores; --output-reading says otherwise."""
    rng = np.random.default_rng(7)
    path = _save(
        tmp_path, "mos", [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["mos"])],
        [helper.make_tensor_value_info("x", F, ["N", 16])], [helper.make_tensor_value_info("mos", F, ["N", 3])],
        [("w", (rng.standard_normal((16, 3)) * 0.01).astype(np.float32)), ("b", np.array([3.1, 3.0, 2.9], np.float32))],
    )  # fmt: skip
    samples = [{"x": rng.standard_normal((1, 16)).astype(np.float32)} for _ in range(40)]
    result = _build(path, samples, output_readings={"mos": "values"}, accuracy_budget=None, mixed_precision=False)
    (judged,) = [n for n in result.notes if n.startswith("int8 judged")]
    assert "mos by relative L2 alone (values, as --output-reading mos=values says)" in judged
    (line,) = [n for n in result.notes if n.startswith("int8 verdict")]
    assert line.startswith("int8 verdict: no output the task metric reads")


def test_a_classifier_whose_values_hardly_moved_but_whose_argmax_did_is_told_how_to_read_it_as_values():
    """Three close values per row (MOS scores near 3): int8's small error swaps their order, the top-1 reading
    loses points a relative L2 of 0.3% says were never lost; the verdict names the way out."""
    rng = np.random.default_rng(8)
    f = [(3.0 + rng.standard_normal((64, 3)) * 0.01).astype(np.float32)]
    q = [f[0] + (rng.standard_normal((64, 3)) * 0.01).astype(np.float32)]
    row = compare("mos", "held-back", f, q)
    line = verdict([row])
    assert "OVER" in line and "--output-reading mos=values judges it by relative L2" in line
    far = compare("mos", "held-back", f, [q[0] * 1.5])  # values that moved: no such hint
    assert "--output-reading" not in verdict([far])


@pytest.mark.parametrize(
    "readings, message",
    [
        ({"nope": "values"}, "the model has no output 'nope' (its outputs: prob, reg, landmarks)"),
        ({"reg": "regression"}, "--output-reading reg=regression: the reading must be one of classes, values"),
    ],
)
def test_a_bad_output_reading_is_one_line_naming_it(tmp_path, readings, message):
    path = _face_head(tmp_path)
    samples = [{"x": np.ones((1, 24), np.float32)}] * 8
    with pytest.raises(aot.BuildError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _build(path, samples, output_readings=readings)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--output-reading", "reg=values"], "--output-reading applies to an int8 build: add --calibration DIR"),
        (["--calibration", "{cal}", "--output-reading", "reg"], "--output-reading must look like NAME=values"),
        (["--calibration", "{cal}", "--output-reading", "reg=values", "--output-reading", "reg=classes"],
         "output 'reg' was given a reading already"),
        (["--calibration", "{cal}", "--output-reading", "reg=values"], None),
    ],
)  # fmt: skip
def test_the_output_reading_option_on_the_command_line(tmp_path, extra, message):
    from click.testing import CliRunner

    from aot.cli import build as cli

    cal = tmp_path / "cal"
    cal.mkdir()
    for i in range(8):
        np.save(cal / f"{i}.npy", np.random.default_rng(i).standard_normal((1, 24)).astype(np.float32))
    args = [_face_head(tmp_path), "-o", str(tmp_path / "m.aotb"), "--target", "onnxruntime"]
    result = CliRunner().invoke(cli.main, args + [a.format(cal=cal) for a in extra])
    if message is None:
        assert result.exit_code == 0, result.output
        assert "reg by relative L2 alone (values, as --output-reading reg=values says)" in result.output
    else:
        assert result.exit_code != 0 and message in result.output and "Traceback" not in result.output


def _log_power(tmp_path):
    """A log-power front end's arithmetic: MatMul -> Relu -> MatMul -> square -> + 1e-6 -> Log. int8 rounds the small
    powers to zero, which the log turns into large errors (a log-mel model shipped at relative L2 0.49)."""
    rng = np.random.default_rng(11)
    weights = [("w1", (rng.standard_normal((32, 64)) * 0.2).astype(np.float32)),
               ("w2", (rng.standard_normal((64, 16)) * 0.2).astype(np.float32)), ("eps", np.array(1e-6, np.float32))]  # fmt: skip
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["p"]),
        helper.make_node("Mul", ["p", "p"], ["pw"]),
        helper.make_node("Add", ["pw", "eps"], ["pe"]),
        helper.make_node("Log", ["pe"], ["y"]),
    ]
    path = _save(tmp_path, "logpow", nodes, [helper.make_tensor_value_info("x", F, ["N", 32])],
                 [helper.make_tensor_value_info("y", F, ["N", 16])], weights)  # fmt: skip
    return path, [{"x": rng.standard_normal((1, 32)).astype(np.float32)} for _ in range(32)]


def test_without_a_task_metric_the_default_budget_holds_relative_l2_to_the_threshold(tmp_path):
    """Every layer in int8 is far past 0.05 here: the default budget keeps the costliest layers float and ends below
    int8 everywhere (saying so where no set short of the float model reaches 0.05); --accuracy-budget off keeps every
    layer int8, as before."""
    path, samples = _log_power(tmp_path)
    built = _build(path, samples, output_readings={"y": "values"})
    (line,) = [n for n in built.notes if "relative L2 held to 0.05: int8 everywhere" in n]
    everywhere = float(line.split("int8 everywhere ")[1].split()[0])
    assert everywhere > RELATIVE_L2_THRESHOLD and "the costliest: matmul 'p'" in line, line
    assert built.quantization.kept_float, built.notes
    (after,) = [n for n in built.notes if n.startswith("int8: with it float, relative L2 ")]
    assert float(after.split("relative L2 ")[1].split(";")[0]) < everywhere, after
    off = _build(path, samples, output_readings={"y": "values"}, mixed_precision=False)
    assert off.quantization.kept_float == [] and not any("held to 0.05" in n for n in off.notes)


@pytest.mark.parametrize("normalize", ["lp_normalization", "sqrt_of_sum", "clamped_norm"])
def test_an_output_divided_by_its_norm_reads_as_an_embedding(tmp_path, normalize):
    """A speaker or face embedding (F.normalize, LpNormalization) is read by its direction, not as class scores:
    resemblyzer's 256-d embedding, read as a classifier, "lost" 6.25 points at a relative L2 of 0.031."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["e"])]
    if normalize == "lp_normalization":
        nodes.append(helper.make_node("LpNormalization", ["e"], ["emb"], axis=1, p=2))
    else:
        nodes += [
            helper.make_node("Mul", ["e", "e"], ["sq"]),
            helper.make_node("ReduceSum", ["sq", "axis"], ["ss"], keepdims=1),
            helper.make_node("Sqrt", ["ss"], ["norm"]),
        ]
        if normalize == "clamped_norm":  # F.normalize: x / max(norm, eps)
            nodes.append(helper.make_node("Max", ["norm", "eps"], ["guarded"]))
        nodes.append(helper.make_node("Div", ["e", "guarded" if normalize == "clamped_norm" else "norm"], ["emb"]))
    weights = [("w", rng.standard_normal((8, 16)).astype(np.float32)), ("axis", np.array([1], np.int64)),
               ("eps", np.array(1e-12, np.float32))]  # fmt: skip
    path = _save(tmp_path, "emb", nodes, [helper.make_tensor_value_info("x", F, ["N", 8])],
                 [helper.make_tensor_value_info("emb", F, ["N", 16])], weights)  # fmt: skip
    (reading,) = output_readings(from_onnx(path)).values()
    assert reading.unreadable.startswith("an embedding (shape ['N', 16]): divided by its own norm")


def test_a_plain_division_is_not_an_embedding(tmp_path):
    rng = np.random.default_rng(8)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["e"]), helper.make_node("Div", ["e", "x0"], ["y"])]
    path = _save(tmp_path, "div", nodes, [helper.make_tensor_value_info("x", F, ["N", 8]),
                 helper.make_tensor_value_info("x0", F, ["N", 1])], [helper.make_tensor_value_info("y", F, ["N", 5])],
                 [("w", rng.standard_normal((8, 5)).astype(np.float32))])  # fmt: skip
    assert output_readings(from_onnx(path)) == {}
