"""Calibration that finds the best answer by itself (issue 38): the methods, ``auto``, the task-shaped
report and its verdict, the accuracy budget, the engine calibration runs on, and bad input.

The outlier graphs below rebuild the issue's trap in miniature: a sequence model whose
inputs are small except for one rare, huge feature. minmax stretches the step over the
outlier and rounds the small features away (many top-1 flips, but the one huge row it
keeps exact dominates the norm, so its relative L2 is the smaller); a clipping method
costs that row its scale (a larger relative L2) and keeps every argmax. A report that
ranks by relative L2 prefers minmax; by agreement, the clipping method.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import aot
from aot.cli.build import parse_budget
from aot.compiler.backends.npu.patterns import int8_reason
from aot.compiler.quantize import QuantizeConfig
from aot.compiler.quantize.calibrate import RangeObserver
from aot.compiler.quantize.engine import GraphRunner, follow_batch
from aot.compiler.quantize.insert import insert_qdq, plan_quantization
from aot.compiler.quantize.methods import entropy_amax, mse_amax
from aot.compiler.quantize.report import compare, score, unreadable_reason, verdict
from aot.compiler.quantize.tuning import restrict
from aot.errors import BuildError
from aot.frontend.onnx import from_onnx
from aot.ir.graph import Graph
from aot.passes import optimize
from tests.test_quantization import _config, _digits_onnx, _train_digits, digits  # noqa: F401

STEPS, FEATURES, CLASSES = 64, 32, 12


# -- the methods, on histograms with a known answer ---------------------------------------------


def _observed(x: np.ndarray) -> RangeObserver:
    observer = RangeObserver()
    observer.observe(x)
    return observer


def _quantization_mse(x: np.ndarray, amax: float) -> float:
    step = amax / 127
    return float(np.mean((np.clip(np.rint(x / step), -127, 127) * step - x) ** 2))


@pytest.mark.parametrize("kind", ["gaussian_with_outlier", "relu_laplace", "student_t"])
def test_mse_finds_the_bound_of_least_quantization_error(kind):
    rng = np.random.default_rng(1)
    x = {
        "gaussian_with_outlier": np.r_[rng.standard_normal(100_000), 40.0],
        "relu_laplace": np.maximum(rng.laplace(size=100_000), 0),
        "student_t": rng.standard_t(3, 100_000),
    }[kind].astype(np.float32)
    observer = _observed(x)
    amax = mse_amax(observer.hist, observer.top)
    # the best bound by brute force over a fine grid, on the values themselves
    best = min(_quantization_mse(x, a) for a in np.linspace(observer.top / 200, observer.top, 400))
    assert _quantization_mse(x, amax) <= best * 1.01
    assert _quantization_mse(x, amax) < _quantization_mse(x, observer.top)


def test_entropy_clips_a_heavy_tail_and_keeps_a_uniform_range():
    rng = np.random.default_rng(2)
    tailed = _observed(np.abs(rng.standard_t(2, 200_000)).astype(np.float32))
    assert entropy_amax(tailed.hist, tailed.top) < 0.5 * tailed.top
    uniform = _observed(rng.uniform(-1, 1, 200_000).astype(np.float32))
    assert entropy_amax(uniform.hist, uniform.top) > 0.9 * uniform.top


def test_every_method_chooses_from_the_one_histogram():
    rng = np.random.default_rng(3)
    observer = _observed(np.r_[rng.standard_normal(50_000), 30.0].astype(np.float32))
    ranges = {m: observer.range(m, 99.99) for m in ("minmax", "percentile", "entropy", "mse")}
    assert ranges["minmax"].amax == 30.0
    assert all(0 < r.amax < 30.0 for m, r in ranges.items() if m != "minmax")
    assert len({r.min for r in ranges.values()}) == 1 and len({r.max for r in ranges.values()}) == 1


# -- the report: task-shaped agreement, ranking, verdict ------------------------------------------


def test_a_sequence_output_gets_per_position_and_exact_sequence_agreement():
    rng = np.random.default_rng(4)
    floats = [rng.standard_normal((1, 5, 7)).astype(np.float32) for _ in range(4)]
    quantized = [f.copy() for f in floats]
    quantized[1][0, 2] = -quantized[1][0, 2]  # one position of sample 1 changes its argmax
    row = compare("chars", "held-back", floats, quantized)
    assert row.positions == 20 and row.top1_agreement == pytest.approx(19 / 20)
    assert row.exact_agreement == pytest.approx(3 / 4) and row.task_agreement == row.exact_agreement
    assert "top-1 agreement 95.0% of 20 positions, exact-sequence agreement 75.0%" in row.line()
    # (time, batch, classes), as CTC recognizers export it: the same positions, the same verdict
    swapped = compare("chars", "held-back", [f.transpose(1, 0, 2) for f in floats],
                      [q.transpose(1, 0, 2) for q in quantized])  # fmt: skip
    assert (swapped.top1_agreement, swapped.exact_agreement) == (row.top1_agreement, row.exact_agreement)


def _ctc_scores(path: list[int], classes: int = 6) -> np.ndarray:
    """(1, T, classes) scores whose argmax follows ``path``."""
    scores = np.zeros((1, len(path), classes), np.float32)
    scores[0, np.arange(len(path)), path] = 1.0
    return scores


def test_a_ctc_output_is_judged_by_its_greedy_reading_not_its_positions():
    floats = [_ctc_scores([0, 3, 3, 0, 4, 0, 0, 5]), _ctc_scores([0, 0, 2, 0, 2, 0, 1, 0])]
    # sample 0: the blank moves one step and a repeat stretches, the text "3 4 5" stays; sample 1: "2 2 1" -> "2 1"
    quantized = [_ctc_scores([0, 3, 0, 0, 4, 4, 0, 5]), _ctc_scores([0, 0, 2, 2, 2, 0, 1, 0])]
    row = compare("chars", "held-back", floats, quantized)
    assert row.exact_agreement == 0.0 and row.ctc_agreement == pytest.approx(0.5)
    assert row.ctc and row.task_agreement == row.ctc_agreement  # class 0 is the most frequent argmax
    assert "CTC reading 50.0% (greedy CTC: argmax per step, repeats merged, class 0 dropped as the blank; the " \
        "task agreement: class 0 is the float argmax at 56% of positions" in row.line()  # fmt: skip
    asked = compare("chars", "held-back", floats, quantized, sequence="positions")
    assert not asked.ctc and asked.task_agreement == 0.0 and "not the task agreement" in asked.line()
    # time-major (T, batch, C): the same reading
    swapped = compare("chars", "held-back", [f.transpose(1, 0, 2) for f in floats],
                      [q.transpose(1, 0, 2) for q in quantized])  # fmt: skip
    assert swapped.ctc_agreement == row.ctc_agreement
    # a tagger: class 0 is not the most frequent argmax, so every position must agree
    tags = [_ctc_scores([1, 2, 2, 0, 3, 3]), _ctc_scores([4, 4, 1, 1, 0, 2])]
    tagger = compare("tags", "held-back", tags, [_ctc_scores([1, 2, 0, 2, 3, 3]), tags[1]])
    assert not tagger.ctc and tagger.task_agreement == tagger.exact_agreement == pytest.approx(0.5)


def test_a_sequence_reading_that_is_not_one_is_a_one_line_error():
    with pytest.raises(BuildError, match="sequence reading 'beam' is not one of auto, ctc, positions"):
        QuantizeConfig([], sequence="beam")


@pytest.mark.parametrize(
    "array, says",
    [
        (np.zeros((1, 1), np.float32), "a single value per row"),
        (np.zeros((4,), np.float32), "a single value per row"),
        (np.zeros((1, 5), np.int64), "a int64 output"),
        (np.zeros((1, 3, 8, 8), np.float32), "a rank-4 output"),
    ],
)
def test_an_output_the_task_metric_cannot_read_says_so_in_one_line(array, says):
    assert says in unreadable_reason(array)
    row = compare("out", "held-back", [array], [array])
    assert row.top1_agreement is None and row.task_agreement is None
    line = row.line()
    assert "\n" not in line and "judged by relative L2 alone: the task metric cannot read" in line and says in line
    assert "no output the task metric reads" in verdict([row])


def test_the_report_ranks_by_agreement_where_relative_l2_ranks_the_other_way():
    rng = np.random.default_rng(5)
    floats = [rng.standard_normal((1, 10)).astype(np.float32) for _ in range(50)]
    floats[0] *= 100  # one confident sample dominates the norm
    # A: exact on the big sample, the top two classes of every other sample swapped (small values)
    flipped = []
    for f in floats:
        q = f.copy()
        if abs(f).max() < 50:
            top2 = np.argsort(f[0])[-2:]
            q[0, top2] = q[0, top2[::-1]]
        flipped.append(q)
    # B: every argmax kept, the big sample scaled down by 10% (a clipped range)
    clipped = [f * (0.9 if abs(f).max() > 50 else 1.0) for f in floats]
    a, b = compare("logits", "held-back", floats, flipped), compare("logits", "held-back", floats, clipped)
    assert a.relative_l2 < b.relative_l2  # the norm prefers A ...
    assert b.top1_agreement == 1.0 and a.top1_agreement < 0.1  # ... the task does not
    assert score([b]).key() > score([a]).key()
    assert verdict([b]).startswith("int8 verdict: within the 1 point budget")
    assert verdict([a]).startswith("int8 verdict: OVER the 1 point budget") and "--accuracy-budget" in verdict([a])


def test_nan_or_infinite_outputs_are_named_and_never_judged_within_the_budget():
    """A NaN compares as nothing, so neither an argmax nor a norm over one means anything: the report counts
    them, the verdict says OVER where only the int8 build has them and cannot-be-judged where the float model
    has them too, and a build that has them ranks below one that has none."""
    rng = np.random.default_rng(6)
    floats = [rng.standard_normal((1, 10)).astype(np.float32) for _ in range(20)]
    broken = [f.copy() for f in floats]
    broken[3][0, 2] = np.nan
    row = compare("logits", "held-back", floats, broken)
    assert row.nonfinite == (0, 1) and "(NaN or infinite values: 0 float, 1 int8)" in row.line()
    assert verdict([row]).startswith("int8 verdict: OVER the 1 point budget: output logits of the int8 build holds 1")
    clean = compare("logits", "held-back", floats, [f * 0.5 for f in floats])
    assert score([clean]).key() > score([row]).key()
    floats[0][0, 0] = np.inf
    both = compare("logits", "held-back", floats, broken)
    assert both.nonfinite == (1, 1)
    assert verdict([both]).startswith("int8 verdict: cannot be judged: output logits of the float model itself")
    assert "\n" not in verdict([row]) + verdict([both])


# -- the outlier sequence model: auto and the budget, end to end ---------------------------------


def _sequence_onnx(rng, layers: int) -> onnx.ModelProto:
    """features (1, T, F) -> [MatMul -> Relu] x (layers - 1) -> MatMul -> (1, T, C) scores.

    Hidden layers are near the identity, so feature 0 (a rare indicator) reaches the last
    layer, which turns it into a score of 60 for class 0: a rare, huge, confident output.
    """
    nodes, init, x = [], [], "features"
    for i in range(layers):
        if i < layers - 1:
            w = np.eye(FEATURES) + 0.1 * rng.standard_normal((FEATURES, FEATURES)) / np.sqrt(FEATURES)
            w[0], w[:, 0] = 0.0, 0.0
            w[0, 0] = 1.0  # the indicator passes through unmixed
        else:  # feature c votes 0.15 for class c; feature 0 votes 60 for class 0, and nothing else does
            w = 0.05 * rng.standard_normal((FEATURES, CLASSES)) / np.sqrt(FEATURES)
            w[:CLASSES, :CLASSES] += 0.15 * np.eye(CLASSES)
            w[0], w[:, 0] = 0.0, 0.0
            w[0, 0] = 60.0
        init.append(numpy_helper.from_array(w.astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}" if i < layers - 1 else "scores"]))
        if i < layers - 1:
            nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"]))
            x = f"r{i}"
    graph = helper.make_graph(
        nodes, "sequence", [helper.make_tensor_value_info("features", onnx.TensorProto.FLOAT, [1, STEPS, FEATURES])],
        [helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, [1, STEPS, CLASSES])], init,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _outlier_samples(rng, n: int) -> list[dict[str, np.ndarray]]:
    """Each position votes for one class c > 0 (its feature c is 1, the rest small noise): a margin of
    about 0.15 between the top two scores. Feature 0 is 1 at one position of every 16th sample, whose
    score of 60 is under 0.01% of the calibration outputs: a percentile clips it, minmax spans it.
    """
    samples = []
    for i in range(n):
        x = np.abs(rng.standard_normal((1, STEPS, FEATURES)) * 0.1)
        x[0, np.arange(STEPS), rng.integers(1, CLASSES, size=STEPS)] = 1.0
        x[..., 0] = 0.0
        if i % 16 == 3:
            t = rng.integers(STEPS)
            x[0, t, 1:CLASSES] = 0.0  # the outlier position votes for class 0 alone
            x[0, t, 0] = 1.0
        samples.append({"features": x.astype(np.float32)})
    return samples


@pytest.fixture(scope="module")
def outliers(tmp_path_factory):
    rng = np.random.default_rng(6)
    path = tmp_path_factory.mktemp("outliers") / "sequence.onnx"
    onnx.save(_sequence_onnx(rng, 1), path)
    return str(path), _outlier_samples(rng, 80)


def _build(path, samples, **kw):
    return aot.build(path, targets=["npu"], quantize=QuantizeConfig(samples, holdout=0.25, **kw), log=None)


def test_auto_keeps_the_method_the_task_prefers_and_says_each_score(outliers):
    path, samples = outliers
    chosen = _build(path, samples)
    minmax = _build(path, samples, method="minmax")
    method = chosen.quantization.table.method
    assert method != "minmax"
    (line,) = [n for n in chosen.notes if n.startswith("int8: calibration method auto chose")]
    assert line.startswith(f"int8: calibration method auto chose {method} on 80 calibration and held-back samples (")
    for m in ("minmax", "percentile", "entropy", "mse"):
        assert f"{m} agreement " in line
    held = {r.split: r for r in minmax.quantization.accuracy}["held-back"]
    best = {r.split: r for r in chosen.quantization.accuracy}["held-back"]
    # the trap: minmax has the smaller relative L2, and loses the task
    assert held.relative_l2 < best.relative_l2
    assert best.exact_agreement > held.exact_agreement and best.top1_agreement > held.top1_agreement
    print(f"outliers: minmax top-1 {held.top1_agreement:.3f} exact {held.exact_agreement:.3f} rel L2 "
          f"{held.relative_l2:.4f}; auto={method} top-1 {best.top1_agreement:.3f} exact {best.exact_agreement:.3f} "
          f"rel L2 {best.relative_l2:.4f}")  # fmt: skip
    assert any(n.startswith("int8 verdict: OVER the 1 point budget") for n in minmax.notes)


def test_a_budget_keeps_the_costliest_layer_float_and_names_it(tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "deep.onnx"
    onnx.save(_sequence_onnx(rng, 3), path)
    samples = _outlier_samples(rng, 80)
    plain = _build(str(path), samples, method="minmax", mixed_precision=False)
    budgeted = _build(str(path), samples, method="minmax", accuracy_budget=0.01)
    assert not plain.quantization.kept_float
    kept = budgeted.quantization.kept_float
    assert 1 <= len(kept) < 3
    lines = [n for n in budgeted.notes if n.startswith("int8: accuracy budget 1%")]
    assert len(lines) == 1 and f"{len(kept)} of 3 layers kept float, the costliest: matmul {kept[0]!r}" in lines[0]
    assert any(n.startswith(f"int8: with {'it' if len(kept) == 1 else 'them'} float it loses") for n in budgeted.notes)
    assert f"int8: matmul x{len(kept)} stays float: kept float under the accuracy budget" in budgeted.notes
    verdict_line = [n for n in budgeted.notes if n.startswith("int8 verdict")][0]
    assert verdict_line.startswith("int8 verdict: within the 1 point budget")
    # the layer stays float in the bundle: one int8 composite fewer on the npu
    composites = [c.name for r in budgeted.partitioned.regions for c in r.composites]
    assert composites.count("npu.int8_dense") == 3 - len(kept)


def test_a_budget_that_cannot_be_met_says_what_it_would_take(outliers):
    path, samples = outliers  # one layer: keeping it float is the float model
    with pytest.raises(BuildError, match=r"accuracy budget 0% cannot be met in int8: quantized it loses .* keeping "
                       r"its one int8 layer float \(the float model\) meets it") as e:  # fmt: skip
        _build(path, samples, method="minmax", accuracy_budget=0.0)
    assert "\n" not in str(e.value)


# -- the engine: onnxruntime, batched, and the host plan agree -----------------------------------


def test_onnxruntime_batches_and_computes_what_the_host_plan_computes(outliers):
    path, samples = outliers
    graph = from_onnx(onnx.load(path))
    ort = GraphRunner(graph, engine="onnxruntime")
    host = GraphRunner(graph, engine="host")
    a, b = ort.run(samples[:20]), host.run(samples[:20])
    assert ort.describe().startswith("onnxruntime, batches of") and host.describe() == "host plan"
    for x, y in zip(a, b):
        assert x[0].shape == (1, STEPS, CLASSES)
        np.testing.assert_allclose(x[0], y[0], rtol=1e-4, atol=1e-4)


def test_a_quantized_graph_on_onnxruntime_computes_the_host_plans_q_dq(digits):  # noqa: F811
    """Q/DQ run as written on onnxruntime (no fusion into its integer kernels): within one 8-bit step of the host."""
    built = aot.build(digits["path"], targets=["npu"], quantize=_config(digits, report=False), log=None)
    graph = from_onnx(onnx.load(digits["path"]))
    optimize(graph)
    insert_qdq(graph, restrict(plan_quantization(graph, {"npu": int8_reason}), []), built.quantization.table)
    step = built.quantization.table.tensors["logits"].amax / 127
    on_ort = GraphRunner(graph, engine="onnxruntime").run(digits["calibration"][:20])
    on_host = GraphRunner(graph, engine="host").run(digits["calibration"][:20])
    for x, y in zip(on_ort, on_host):
        assert np.abs(x[0] - y[0]).max() <= step * 1.001


def test_a_time_major_output_stacks_along_its_batch_axis(tmp_path):
    """(time, batch, classes): two samples stack along axis 1, and each sample gets its own slice back."""
    rng = np.random.default_rng(8)
    w = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Transpose", ["m"], ["y"], perm=[1, 0, 2])],
        "time_major", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, STEPS, FEATURES])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [STEPS, 1, CLASSES])],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    ir = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    samples = [{"x": rng.standard_normal((1, STEPS, FEATURES)).astype(np.float32)} for _ in range(5)]
    runner = GraphRunner(ir, engine="onnxruntime")
    outputs = runner.run(samples)
    assert "batches of" in runner.describe()
    for sample, (y,) in zip(samples, outputs):
        np.testing.assert_allclose(y, (sample["x"] @ w).transpose(1, 0, 2), rtol=1e-4, atol=1e-4)


def _reshape_then_matmul(target: list[int], rng: np.random.Generator) -> tuple[Graph, np.ndarray]:
    """x (1, 1, 8, 8) reshaped to the constant ``target``, then times a (64, 10) weight."""
    w = rng.standard_normal((64, 10)).astype(np.float32)
    out = [1, 10] if len(target) == 2 else [10]
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["flat"]), helper.make_node("MatMul", ["flat", "w"], ["y"])],
        "pinned", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(target, np.int64), "shape")],
    )  # fmt: skip
    return from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])), w


def test_a_reshape_to_a_constant_batch_of_one_follows_a_stacked_batch():
    """A graph built for batch 1 reshapes to the constant (1, 64): the calibration graph keeps the input's batch
    there, so samples run stacked, and each gets its own result back."""
    rng = np.random.default_rng(9)
    ir, w = _reshape_then_matmul([1, 64], rng)
    samples = [{"x": rng.standard_normal((1, 1, 8, 8)).astype(np.float32)} for _ in range(4)]
    runner = GraphRunner(ir, engine="onnxruntime")
    outputs = runner.run(samples)
    assert runner.describe().startswith("onnxruntime, batches of")
    for sample, (y,) in zip(samples, outputs):
        np.testing.assert_allclose(y, sample["x"].reshape(1, 64) @ w, rtol=1e-4, atol=1e-4)


def test_a_batch_pinned_by_a_reshape_runs_one_sample_at_a_time():
    """A reshape to the constant (64,) drops the batch axis: two stacked samples are refused, each runs alone."""
    rng = np.random.default_rng(9)
    ir, w = _reshape_then_matmul([64], rng)
    samples = [{"x": rng.standard_normal((1, 1, 8, 8)).astype(np.float32)} for _ in range(4)]
    runner = GraphRunner(ir, engine="onnxruntime")
    outputs = runner.run(samples)
    assert runner.describe() == "onnxruntime, one sample at a time"
    for sample, (y,) in zip(samples, outputs):
        np.testing.assert_allclose(y, sample["x"].reshape(64) @ w, rtol=1e-4, atol=1e-4)


def test_follow_batch_leaves_reshapes_whose_input_does_not_start_with_the_batch():
    """(8, 1, 8) -> (1, 64): the input's first dim is not 1, so the target keeps its 1 (nothing to follow)."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "other",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [8, 1, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64])],
        [numpy_helper.from_array(np.array([1, 64], np.int64), "shape")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert follow_batch(model) == 0
    assert numpy_helper.to_array(model.graph.initializer[0]).tolist() == [1, 64]


class FailingSessionStandIn:
    """A test double for an onnxruntime session whose run fails (an op kernel that errors at run time)."""

    def run(self, names, feeds):
        raise RuntimeError("kernel failed at run time")


def test_a_session_that_fails_at_run_time_hands_over_to_the_host_plan(outliers, caplog):
    path, samples = outliers
    graph = from_onnx(onnx.load(path))
    runner = GraphRunner(graph, engine="auto")
    runner._session = FailingSessionStandIn()
    outputs = runner.run(samples[:3])
    expected = GraphRunner(graph, engine="host").run(samples[:3])
    assert runner.engine == "host plan" and "onnxruntime failed: kernel failed at run time" in runner.why
    assert runner.describe().startswith("host plan (onnxruntime failed")
    for x, y in zip(outputs, expected):
        np.testing.assert_array_equal(x[0], y[0])


def test_calibrating_on_the_host_plan_gives_the_ranges_onnxruntime_gives(digits):  # noqa: F811
    on_ort = aot.build(digits["path"], targets=["npu"], quantize=_config(digits, method="minmax", report=False),
                       log=None).quantization.table  # fmt: skip
    on_host = aot.build(digits["path"], targets=["npu"],
                        quantize=_config(digits, method="minmax", report=False, engine="host"),
                        log=None).quantization.table  # fmt: skip
    assert on_ort.tensors.keys() == on_host.tensors.keys()
    for name, r in on_ort.tensors.items():
        assert r.amax == pytest.approx(on_host.tensors[name].amax, rel=1e-4)


def test_digits_accuracy_per_method(digits):  # noqa: F811
    """Every method within one point of float on digits' 397 test images; auto among them."""
    import runtime_lite

    results = {}
    for method in ("auto", "minmax", "percentile", "entropy", "mse"):
        built = aot.build(digits["path"], targets=["npu"], quantize=_config(digits, method=method, report=False),
                          log=None)  # fmt: skip
        module = runtime_lite.load(built.to_bytes())
        test, labels = digits["test"], digits["labels"]
        predictions = [int(np.argmax(module.run({"images": test[i : i + 1]})[0])) for i in range(len(labels))]
        results[method] = float(np.mean(np.array(predictions) == labels))
    each = ", ".join(f"{m} {a:.4f}" for m, a in results.items())
    print(f"digits test accuracy: float {digits['float']:.4f}, {each}")
    assert all(a >= digits["float"] - 0.01 for a in results.values())


# -- bad input: one line each --------------------------------------------------------------------


def test_bad_calibration_input_is_one_line_each(digits, tmp_path):  # noqa: F811
    cases = {
        "calibration data holds no samples": dict(calibration=[]),
        "calibration sample 0 names 'pixels', not an input of the model": dict(
            calibration=[{"pixels": np.zeros((1, 1, 8, 8), np.float32)}]
        ),
        r"input 'images' is float32\[1,1,8,8\], got shape \[1, 1, 9, 9\]": dict(
            calibration=[{"images": np.zeros((1, 1, 9, 9), np.float32)}]
        ),
        "input 'images' is float32, got int32": dict(calibration=[{"images": np.zeros((1, 1, 8, 8), np.int32)}]),
        # a NaN or an infinity would make a range NaN, and the bundle compute nothing (one did, and the report said
        # "within the 1 point budget"); a float64 past float32's range is infinite once cast
        r"calibration sample 1: input 'images' holds 1 NaN or infinite value of 64 \(as float32\); calibration data "
        "must be finite": dict(
            calibration=[
                {"images": np.zeros((1, 1, 8, 8), np.float32)},
                {"images": np.where(np.arange(64).reshape(1, 1, 8, 8) == 27, np.nan, 0).astype(np.float32)},
            ]
        ),
        r"calibration sample 0: input 'images' holds 64 NaN or infinite values of 64": dict(
            calibration=[{"images": np.full((1, 1, 8, 8), 1e39)}]
        ),
        "calibration method 'kl' is not one of auto, minmax, percentile, entropy, mse": dict(
            calibration=digits["calibration"], method="kl"
        ),
        r"accuracy_budget 5.0: a budget lies in \[0%, 100%\)": dict(
            calibration=digits["calibration"], accuracy_budget=5.0
        ),
    }
    for message, kw in cases.items():
        with pytest.raises(BuildError, match=message) as e:
            aot.build(digits["path"], targets=["npu"], quantize=QuantizeConfig(**kw), log=None)
        assert "\n" not in str(e.value)
    folder = tmp_path / "calib"
    folder.mkdir()
    stack = np.stack([digits["calibration"][i]["images"] for i in range(3)])
    stack[2, 0, 0, 4, 4] = np.inf
    np.save(folder / "stack.npy", stack)
    with pytest.raises(BuildError, match=r"^calibration file .*stack\.npy \(sample 2 of its stack\): input 'images' "
                                         r"holds 1 NaN or infinite value of 64"):  # fmt: skip
        aot.build(digits["path"], targets=["npu"], quantize=QuantizeConfig(calibration=folder), log=None)
    table = tmp_path / "t.json"
    aot.build(
        digits["path"], targets=["npu"], quantize=_config(digits, report=False), log=None
    ).quantization.table.save(table)
    with pytest.raises(BuildError, match="an accuracy budget needs samples to measure it on"):
        aot.build(digits["path"], targets=["npu"], quantize=QuantizeConfig(table=table, accuracy_budget=0.01), log=None)


def test_a_budget_on_an_output_the_task_metric_cannot_read_is_one_line(tmp_path):
    """A feature map (rank 4) has no task agreement: a budget asked for is an error naming the output and why;
    the default budget is not applied, and the build says so."""
    rng = np.random.default_rng(8)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 1, 1)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["features"], name="conv")], "features",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("features", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], [w],
    )  # fmt: skip
    path = tmp_path / "features.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    samples = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(8)]
    with pytest.raises(BuildError, match=r"--accuracy-budget needs an output the task metric reads; features: a "
                       r"rank-4 output \(shape \[1, 4, 8, 8\]\)") as e:  # fmt: skip
        _build(str(path), samples, accuracy_budget=0.01)
    assert "\n" not in str(e.value)
    built = _build(str(path), samples)
    assert any(n.startswith("int8: the default accuracy budget (1%) is not applied: no output the task metric reads; "
                            "relative L2 held to 0.05") for n in built.notes)  # fmt: skip
    assert any(n.startswith("int8 verdict: no output the task metric reads") for n in built.notes)


def test_the_accuracy_budget_flag_reads_percent_or_fraction():
    assert parse_budget("1%") == pytest.approx(0.01) and parse_budget("0.005") == pytest.approx(0.005)
    assert parse_budget(None) is None
    for bad in ("1", "one", "150%", "-1%"):
        with pytest.raises(BuildError, match="--accuracy-budget"):
            parse_budget(bad)


def test_the_api_takes_the_budget_as_the_cli_does_and_refuses_other_types_in_one_line():
    """The docs show ``1%`` or ``0.01`` beside QuantizeConfig: a string there was a bare TypeError from ``<=``."""
    assert QuantizeConfig(accuracy_budget="1%").accuracy_budget == pytest.approx(0.01)
    assert QuantizeConfig(accuracy_budget="0.005").accuracy_budget == pytest.approx(0.005)
    assert QuantizeConfig(accuracy_budget=0).accuracy_budget == 0.0
    refusals = {
        r"accuracy_budget must be a fraction \(0.01\) or a percentage \('1%'\), got list": dict(accuracy_budget=[1]),
        "accuracy_budget 'lots': write a percentage": dict(accuracy_budget="lots"),
        r"accuracy_budget nan: a budget lies in \[0%, 100%\)": dict(accuracy_budget=float("nan")),
        "calibration percentile must be a number, got str '99'": dict(percentile="99"),
        "calibration holdout must be a number, got bool True": dict(holdout=True),
        "max_samples must be positive, got 2.5": dict(max_samples=2.5),
    }
    for message, kw in refusals.items():
        with pytest.raises(BuildError, match=message) as e:
            QuantizeConfig(**kw)
        assert "\n" not in str(e.value)


def test_aot_build_says_which_method_won_and_the_verdict(digits, tmp_path):  # noqa: F811
    calibration = tmp_path / "calibration"
    calibration.mkdir()
    np.save(calibration / "images.npy", np.concatenate([s["images"] for s in digits["calibration"][:40]])[:, None])
    command = [sys.executable, "-m", "aot.cli.build", digits["path"], "-o", str(tmp_path / "d.aotb"), "--target",
               "npu", "--precision", "int8", "--calibration", str(calibration), "--accuracy-budget", "50%"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "int8: calibration method auto chose " in result.stdout
    assert "int8: accuracy budget 50% met with every layer in int8" in result.stdout
    assert "int8 verdict: within the 50 points budget" in result.stdout
    assert "calibrate [" in result.stderr and "(onnxruntime, " in result.stderr
    bad = subprocess.run([*command[:-1], "two"], capture_output=True, text=True)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith("Error: --accuracy-budget 'two'")
    assert "Traceback" not in bad.stderr
    no_data = subprocess.run([*command[:-4], "--accuracy-budget", "1%"], capture_output=True, text=True)
    assert no_data.returncode != 0 and "Traceback" not in no_data.stderr
    # without the flag one point applies as best it can; "off" measures no budget at all
    default = subprocess.run(command[:-2], capture_output=True, text=True)
    assert default.returncode == 0 and "int8: default accuracy budget 1%" in default.stdout, default.stderr
    off = subprocess.run([*command[:-1], "off"], capture_output=True, text=True)
    assert off.returncode == 0 and "accuracy budget" not in off.stdout, off.stderr
    assert "int8 verdict: " in off.stdout


def test_with_nothing_held_back_auto_judges_on_the_calibration_samples_and_says_so(outliers):
    path, samples = outliers
    built = aot.build(path, targets=["npu"], quantize=QuantizeConfig(samples[:40], holdout=0.0), log=None)
    notes = built.notes
    assert "int8: no samples held back (--holdout 0): methods judged on the samples they calibrated on" in notes
    assert any(
        n.startswith("int8: calibration method auto chose ") and " on 40 calibration samples (" in n for n in notes
    )
    assert [a.split for a in built.quantization.accuracy] == ["calibration"]
    assert any(n.startswith("int8 verdict: ") and "on 40 calibration samples" in n for n in notes)


@pytest.mark.parametrize("engine", ["onnxruntime", "host"])
def test_a_calibration_sample_the_float_model_fails_on_is_named_not_an_internal_error(tmp_path, engine):
    """A token id past the vocabulary makes the model's Gather fail: the build names the sample (found alone
    after its batch failed on onnxruntime) and says what calibration samples must be, in one line."""
    rng = np.random.default_rng(9)
    table = numpy_helper.from_array(rng.standard_normal((50, 8)).astype(np.float32), "table")
    w = numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"]), helper.make_node("ReduceMean", ["e"], ["m"], axes=[1]),
         helper.make_node("MatMul", ["m", "w"], ["logits"])], "tokens",
        [helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, [1, 4])],
        [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1, 5])], [table, w],
    )  # fmt: skip
    path = tmp_path / "tokens.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    samples = [{"ids": rng.integers(0, 50, (1, 4))} for _ in range(8)]
    aot.build(path, targets=["onnxruntime"], quantize=QuantizeConfig(samples, engine=engine, report=False), log=None)
    samples[5]["ids"][0, 2] = 99
    with pytest.raises(BuildError, match=r"^calibration sample 5: the float model fails on it \(") as info:
        aot.build(path, targets=["onnxruntime"], quantize=QuantizeConfig(samples, engine=engine), log=None)
    assert "\n" not in str(info.value) and "token ids inside its vocabulary" in str(info.value)


def test_calibration_data_that_is_one_value_everywhere_is_named_in_the_notes(digits):  # noqa: F811
    """All-zero placeholders calibrate ranges that fit no real image, and the report measured on them looks
    perfect (a CNN built so ran 0.47 relative L2 from its float model on real data): the build says so."""
    zeros = [{"images": np.zeros((1, 1, 8, 8), np.float32)} for _ in range(8)]
    built = aot.build(digits["path"], targets=["npu"], quantize=QuantizeConfig(zeros, report=False), log=None)
    assert any(n.startswith("int8: calibration input 'images' is 0 everywhere in all 8 samples: ") for n in built.notes)
    real = aot.build(digits["path"], targets=["npu"], quantize=_config(digits, report=False), log=None)
    assert not any("everywhere" in n for n in real.notes)


def test_a_table_with_samples_measures_the_budget_on_every_sample(outliers, tmp_path):
    path, samples = outliers
    table = tmp_path / "t.json"
    _build(path, samples, method="minmax", report=False).quantization.table.save(table)
    # the table came from these samples: its 60 calibrated, the other 20 are held back (test_calibration_inputs.py)
    message = r"accuracy budget 1% cannot be met in int8: .* on 80 calibration and held-back samples"
    with pytest.raises(BuildError, match=message):
        aot.build(path, targets=["npu"], quantize=QuantizeConfig(samples, table=table, accuracy_budget=0.01), log=None)
