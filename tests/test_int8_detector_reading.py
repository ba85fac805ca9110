"""A detector's head is judged by its detections at a working threshold, and its budget never dies on images
without objects (docs/quantization.md, "The accuracy report").

NudeNet's YOLOv8n: the default int8 build kept the best class of every anchor above 0.05 ("loses 0 points")
while its confidences halved, and 5 of the 6 detections float made at nudenet's 0.2 on 80 new images were lost.
With ``--calibration-method mse`` the budget measured its layers on the first two samples, which held no
detection: every layer's loss was None, and the report's ``points(None)`` was an internal compiler error.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aot
from aot.compiler.quantize import QuantizeConfig, tuning
from aot.compiler.quantize.report import (
    DETECTION_THRESHOLD,
    Reading,
    Score,
    compare,
    judgement,
    points,
    score,
    verdict,
)

F = TensorProto.FLOAT
CLASSES, SIDE = 3, 8
HEAD = Reading(detector=(1, (4, 5, 6)))


def _head(best: list[float], classes: list[int], anchors: int = 6, box: float = 100.0) -> np.ndarray:
    """[1, 4 + 3, anchors]: boxes of ``box`` pixels, and per anchor ``best`` for its class, 0.01 for the others."""
    out = np.full((1, 4 + CLASSES, anchors), 0.01, np.float32)
    out[0, :4] = box
    for a, (s, c) in enumerate(zip(best, classes)):
        out[0, 4 + c, a] = s
    return out


# -- the reading: detections at a working threshold -------------------------------------------------------------


def test_halved_confidences_lose_the_detections_they_drop():
    """The old reading: every best class kept, "100%". What a user reads: the detections above 0.25 are gone."""
    floats = _head([0.6, 0.45, 0.4, 0.3, 0.1, 0.02], [0, 1, 2, 0, 1, 2])
    halved = floats.copy()
    halved[0, 4:] *= 0.5  # the same best class everywhere, half the confidence
    row = compare("output0", "held-back", [floats], [halved], reading=HEAD)
    assert row.detections.floats == 4 and row.detections.int8 == 1 and row.detections.matched == 1
    assert row.task_agreement == pytest.approx(2 * 1 / (4 + 1))
    assert row.detections.confidence == pytest.approx(0.5)
    assert row.detections.score_l2 == pytest.approx(0.5, abs=1e-6)
    # the whole output's relative L2 hides the scores: boxes of 100 pixels swamp them
    assert row.relative_l2 < 0.01 and row.judged_l2 == pytest.approx(0.5, abs=1e-6)
    line = row.line()
    assert f"detection F1 40.0% at best score {DETECTION_THRESHOLD:g}" in line
    assert "4 float and 1 int8 detections of 6 anchors, 1 in both with the same class" in line
    assert "0.50x float's" in line
    assert row.resolution() == 2 * 4 - 1  # one missed detection of 4: F1 6/7
    text = verdict([row])
    assert text.startswith("int8 verdict: OVER the 1 point budget: detection F1 at score 0.25 40.0% on 1 held-back")
    assert "4 float and 1 int8 detections of 6 anchors" in text and "confidence 0.50x float's" in text
    assert "F1 of int8's detections against float's" in judgement([row])


def test_a_detection_gained_or_relabelled_costs_too_and_boxes_are_compared_on_the_matched():
    floats = _head([0.6, 0.45, 0.1, 0.02, 0.02, 0.02], [0, 1, 2, 0, 1, 2])
    quantized = floats.copy()
    quantized[0, 4 + 2, 2] = 0.3  # a score that rises above the threshold: a detection float did not make
    quantized[0, 4 + 1, 1], quantized[0, 4 + 2, 1] = 0.1, 0.5  # anchor 1 now detects class 2
    quantized[0, :4, 0] = 110.0  # the matched detection's box moved 10%
    row = compare("output0", "held-back", [floats], [quantized], reading=HEAD)
    d = row.detections
    assert (d.floats, d.int8, d.matched) == (2, 3, 1)
    assert row.task_agreement == pytest.approx(2 / 5)
    assert row.box_l2 == pytest.approx(0.1) and d.matched_box_l2 == pytest.approx(0.1)


def test_scores_below_the_threshold_do_not_count_and_no_detection_is_unreadable():
    floats = _head([0.6, 0.2, 0.1, 0.02, 0.02, 0.02], [0, 1, 2, 0, 1, 2])
    quantized = floats.copy()
    quantized[0, 4:, 1] = [0.22, 0.0, 0.0]  # below the threshold both: its class may change, no detection moves
    row = compare("output0", "held-back", [floats], [quantized], reading=HEAD)
    assert row.task_agreement == 1.0 and row.positions == 1
    quiet = _head([0.2] * 6, [0, 1, 2, 0, 1, 2])
    row = compare("output0", "held-back", [quiet], [quiet * 1.5], reading=HEAD)
    assert row.task_agreement is None and row.detections is not None
    assert f"no anchor whose float best score is above {DETECTION_THRESHOLD:g} in these 1 samples" in row.line()
    assert "(6 int8 detections of 6 anchors" in row.line()
    assert score([row]).loss is None and score([row]).relative_l2 == row.relative_l2


def test_a_build_that_halves_confidences_no_longer_wins_the_method_choice():
    """percentile "won" NudeNet's choice with 100% best class kept and the least relative L2 (boxes): it halved
    the confidences. A build whose boxes move more and whose scores hold now ranks first."""
    rng = np.random.default_rng(0)
    floats = _head(list(rng.uniform(0.3, 0.9, 40)), list(rng.integers(0, CLASSES, 40)), anchors=40, box=300.0)
    halved = floats.copy()
    halved[0, 4:] *= 0.5
    faithful = floats.copy()
    faithful[0, :4] *= 1 + 0.03 * rng.standard_normal((4, 40))
    faithful[0, 4:] *= 0.98
    halved_score = score([compare("output0", "held-back", [floats], [halved], reading=HEAD)])
    faithful_score = score([compare("output0", "held-back", [floats], [faithful], reading=HEAD)])
    assert faithful_score.key() > halved_score.key()
    assert faithful_score.loss == 0.0 and halved_score.loss > 0.1
    assert "box/score relative L2" in halved_score.text()


# -- the budget: sensitivity samples the reading can read ---------------------------------------------------------


def test_the_sensitivity_samples_are_those_with_detections():
    nothing = [_head([0.01] * 6, [0] * 6)]
    some = [_head([0.6] + [0.01] * 5, [1] + [0] * 5)]
    judge = tuning.Judge(None, None, ["output0"], [{}] * 5, [nothing, nothing, some, nothing, some], "held-back",
                         readings={"output0": HEAD})  # fmt: skip
    assert tuning.sensitivity_samples(judge) == [2, 4]
    judge.floats = [nothing, nothing, some, nothing]
    assert tuning.sensitivity_samples(judge) == [2, 0]  # one readable: it, then the first
    judge.floats = [nothing] * 3
    assert tuning.sensitivity_samples(judge) == [0, 1]  # none: the first, ranked by relative L2


def test_a_layer_cost_the_task_metric_cannot_read_says_its_relative_l2():
    unread = tuning.LayerCost("conv1", "conv2d", Score(None, None, 0.25, 2))
    named = tuning._named_layers([unread], 1, tuning._alone)
    assert "relative L2 0.2500; the task metric reads neither sensitivity sample" in named and "None" not in named
    assert tuning._task_loss(unread.alone) == float("inf")
    assert "None" not in points(None)


def _detector_model(path) -> str:
    """images [1, 3, 8, 8] -> conv1 (channel 2's weights zero) -> relu -> class scores sigmoid(4 r - 6) of its three
    channels, and boxes from conv2 of it -> Concat(boxes, scores) [1, 7, 64], a YOLO head's layout. An outlier in
    input channel 2 (which no output reads) ruins conv1's input range under minmax: conv1 in int8 loses the
    detections, conv2 (boxes only) loses none; keeping conv1 float meets the budget."""
    w1 = np.zeros((CLASSES, 3, 1, 1), np.float32)
    w1[0, 0], w1[1, 1], w1[2, :2] = 1.0, 1.0, 0.7
    w2 = (np.random.default_rng(1).standard_normal((4, CLASSES, 1, 1)) * 10).astype(np.float32)
    weights = [
        ("w1", w1), ("w2", w2), ("four", np.array(4.0, np.float32)), ("six", np.array(6.0, np.float32)),
        ("box_shape", np.array([1, 4, SIDE * SIDE], np.int64)),
        ("cls_shape", np.array([1, CLASSES, SIDE * SIDE], np.int64)),
    ]  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["images", "w1"], ["c1"], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
        helper.make_node("Reshape", ["c2", "box_shape"], ["boxes"]),
        helper.make_node("Mul", ["r1", "four"], ["m"]),
        helper.make_node("Sub", ["m", "six"], ["logits"]),
        helper.make_node("Reshape", ["logits", "cls_shape"], ["cls_raw"]),
        helper.make_node("Sigmoid", ["cls_raw"], ["scores"]),
        helper.make_node("Concat", ["boxes", "scores"], ["output0"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_yolo", [helper.make_tensor_value_info("images", F, [1, 3, SIDE, SIDE])],
        [helper.make_tensor_value_info("output0", F, [1, 4 + CLASSES, SIDE * SIDE])],
        [numpy_helper.from_array(w, n) for n, w in weights],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_an_int8_detector_whose_first_samples_detect_nothing_builds_and_keeps_the_costly_layer_float(tmp_path):
    """Before: ``internal compiler error: TypeError: unsupported operand type(s) for *: 'NoneType' and 'int'``
    (the two sensitivity samples, blank images, held no detection)."""
    rng = np.random.default_rng(0)
    samples = [{"images": np.zeros((1, 3, SIDE, SIDE), np.float32)} for _ in range(2)]  # no object: no detection
    for _ in range(22):
        x = (rng.standard_normal((1, 3, SIDE, SIDE)) * 2).astype(np.float32)
        x[0, 2] = 0.0
        samples.append({"images": x})
    samples[2]["images"][0, 2, 0, 0] = 1000.0  # calibrated on: conv1's input range is 1000 under minmax
    config = QuantizeConfig(samples, method="minmax", holdout=0.25)
    result = aot.build(_detector_model(tmp_path / "tiny_yolo.onnx"), targets=["onnxruntime"], quantize=config,
                       log=None)  # fmt: skip
    notes = "\n".join(result.notes)
    assert "None" not in notes
    assert result.quantization.kept_float == ["conv1"]
    assert "1 of 2 layers kept float, the costliest: conv2d 'conv1' (alone in int8: loses " in notes
    (line,) = [n for n in result.notes if n.startswith("int8 verdict")]
    assert line.startswith("int8 verdict: within the 1 point budget: detection F1 at score 0.25 100.0% on 24 ")
