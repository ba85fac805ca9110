"""Calibration inputs at their edges, and rebuilding from a calibration table (camp 49).

- An empty sample (a batch of 0, an empty stack) was an internal error or counted as a sample.
- A range too small for an int8 step (a table's amax of 1e-45, data of 1e-40) leaked numpy warnings
  and quantized with a scale of 0.
- A table written by a build whose budget kept layers float rebuilt them in int8.
- A table rebuilt on its own data called the samples that made its ranges held back.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest
from onnx import helper

import aot
from aot.compiler.quantize import CalibrationTable, QuantizeConfig
from aot.compiler.quantize.calibrate import RangeObserver
from aot.compiler.quantize.report import compare, verdict
from aot.compiler.quantize.samples import load_samples
from aot.errors import BuildError
from aot.ir.graph import Graph
from aot.ir.types import TensorType
from tests.helpers import make_model, rand
from tests.test_calibration_choice import _build, _outlier_samples, _sequence_onnx, outliers  # noqa: F401


def _conv_gemm(batch: object = "N") -> onnx.ModelProto:
    """x (batch, 3, 8, 8) -> Conv(bias) -> Relu -> Flatten -> Gemm -> y (batch, 5)."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "w2", "b2"], ["y"], transB=1, name="dense"),
    ]
    weights = {"w": rand(4, 3, 3, 3, seed=2), "b": rand(4, seed=3), "w2": rand(5, 144, seed=4), "b2": rand(5, seed=5)}
    return make_model(nodes, {"x": rand(1, 3, 8, 8)}, ["y"], weights, input_shapes={"x": [batch, 3, 8, 8]})


def _samples(n: int, scale: float = 1.0) -> list[dict[str, np.ndarray]]:
    return [{"x": (rand(1, 3, 8, 8, seed=s) * scale).astype(np.float32)} for s in range(n)]


def _quantize(model, **kw) -> aot.BuildResult:
    return aot.build(model, targets=["onnxruntime"], quantize=QuantizeConfig(**kw), log=None)


# -- A: empty samples ----------------------------------------------------------------------------


def test_an_empty_calibration_sample_is_one_line_naming_it(tmp_path):
    """A batch of 0 fits a symbolic batch: it was a ZeroDivisionError in the report (no position to agree on); an
    empty stack an IndexError; each is now a line naming the file (or sample) and the zero-size dim."""
    model = _conv_gemm()
    empty = np.zeros((0, 3, 8, 8), np.float32)
    cases = {}
    listed = _samples(6) + [{"x": empty}]
    cases[r"^calibration sample 6: input 'x' has shape \[0, 3, 8, 8\], empty along dim 0 \(size 0\)"] = listed
    among = tmp_path / "among"  # an empty file among good ones was counted as a sample
    among.mkdir()
    for i, sample in enumerate(_samples(3)):
        np.save(among / f"{i}.npy", sample["x"])
    np.save(among / "3.npy", empty)
    cases[r"^calibration file .*3\.npy: input 'x' has shape \[0, 3, 8, 8\], empty along dim 0"] = among
    stack = tmp_path / "stack"
    stack.mkdir()
    np.save(stack / "a.npy", np.zeros((0, 1, 3, 8, 8), np.float32))
    cases[r"^calibration file .*a\.npy has shape \[0, 1, 3, 8, 8\]: a stack of no samples \(dim 0 is 0\)"] = stack
    inner = tmp_path / "inner"
    inner.mkdir()
    np.save(inner / "a.npy", np.zeros((2, 0, 3, 8, 8), np.float32))
    cases[r"^calibration file .*a\.npy \(sample 0 of its stack\): input 'x' has shape \[0, 3, 8, 8\]"] = inner
    for message, calibration in cases.items():
        with pytest.raises(BuildError, match=message) as info:
            _quantize(model, calibration=calibration)
        assert "\n" not in str(info.value)
    # an empty input beside one that holds data is a real input (a decoder's empty past at its first step)
    g = Graph()
    ids, past = g.add_input("ids", TensorType(("N", 4), "int64")), g.add_input("past", TensorType((1, "T"), "float32"))
    (sample,) = load_samples([{"ids": np.zeros((1, 4), np.int64), "past": np.zeros((1, 0), np.float32)}], [ids, past])
    assert sample["past"].shape == (1, 0)


def test_the_report_reads_an_empty_output_without_dividing_by_zero():
    row = compare("y", "held-back", [np.zeros((0, 5), np.float32)], [np.zeros((0, 5), np.float32)])
    assert row.top1_agreement is None and row.relative_l2 == 0.0 and row.max_abs == 0.0
    assert row.line() == (
        "accuracy y (held-back, 1 samples): relative L2 0.0000, max abs 0; judged by relative L2 alone: the task "
        "metric cannot read an empty output (shape [0, 5] in every sample): no position to agree on"
    )
    assert verdict([row]).startswith("int8 verdict: no output the task metric reads")
    # an empty sample beside others is read over the positions there are
    mixed = compare("y", "held-back", [np.eye(5)[:2], np.zeros((0, 5))], [np.eye(5)[:2], np.zeros((0, 5))])
    assert mixed.top1_agreement == 1.0 and mixed.positions == 2


# -- B: ranges too small for an int8 step ----------------------------------------------------------


def test_a_table_range_too_small_for_an_int8_step_is_one_line(tmp_path):
    """amax 1e-45 (a float32 subnormal) made the scale 0: numpy warned of a division by zero and an invalid cast,
    the build succeeded, and the classifier it was found on lost 25 points. A range of 0 (data 0 everywhere)
    stays what it was: scale 1, every value to 0."""
    model = _conv_gemm()
    record = json.loads(_quantize(model, calibration=_samples(8), report=False).quantization.table.to_json())
    bad = json.loads(json.dumps(record))
    bad["tensors"]["r"]["amax"] = 1e-45
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(BuildError, match=r"tensor 'r' has amax 1e-45, too small for an int8 step") as info:
            _quantize(model, table=tmp_path / "bad.json")
        assert "\n" not in str(info.value)
        zero = json.loads(json.dumps(record))
        zero["tensors"]["r"].update(min=0.0, max=0.0, amax=0.0)
        (tmp_path / "zero.json").write_text(json.dumps(zero))
        built = _quantize(model, table=tmp_path / "zero.json")
    assert built.quantization.table.tensors["r"].amax == 0.0


@pytest.mark.parametrize("target", ["onnxruntime", "npu"])
def test_calibration_on_data_too_small_to_step_warns_of_nothing_and_writes_a_zero_range(tmp_path, target):
    """Inputs of 1e-40: the histogram's BINS / top overflowed float32 (numpy's overflow warning), and the scale
    amax / 127 was subnormal. Such a range is now the zero range all-zero data gets, in the table it writes; a
    range just above the smallest step (4e-36) keeps its amax; both tables load again."""
    model = _conv_gemm(batch=1)  # the npu plans static shapes
    for scale, zero in ((1e-40, True), (4e-36, False)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            built = aot.build(model, targets=[target], quantize=QuantizeConfig(_samples(8, scale)), log=None)
        amax = built.quantization.table.tensors["x"].amax
        assert (amax == 0.0) if zero else (3.9e-36 < amax <= 4e-36), (scale, amax)
        built.quantization.table.save(tmp_path / "t.json")
        assert CalibrationTable.load(tmp_path / "t.json").tensors["x"].amax == amax
    observer = RangeObserver()
    observer.observe(np.full(10, 1e-40, np.float32))
    assert observer.range("percentile", 99.99).amax == 0.0 and observer.range("minmax", 0).max > 0


# -- C: the layers a table's build kept float ------------------------------------------------------


def test_a_rebuild_from_a_table_keeps_the_layers_its_build_kept_float(tmp_path):
    """The table held only ranges: a rebuild from it quantized every layer (PP-OCR's recognizer: 47 instead of 21,
    2.25 points of exact strings lost). It now records the layers and the rebuild keeps them float, unless a new
    budget is given samples to fit on."""
    rng = np.random.default_rng(7)
    path = str(tmp_path / "deep.onnx")
    onnx.save(_sequence_onnx(rng, 3), path)
    samples = _outlier_samples(rng, 80)
    budgeted = _build(path, samples, method="minmax", accuracy_budget=0.01)
    kept = budgeted.quantization.kept_float
    assert kept
    table = tmp_path / "t.json"
    budgeted.quantization.table.save(table)
    assert json.loads(table.read_text())["kept_float"] == kept
    again = aot.build(path, targets=["npu"], quantize=QuantizeConfig(table=table), log=None)
    assert again.quantization.kept_float == kept
    assert f"int8: {len(kept)} layers kept float as the table's build chose: {', '.join(kept)}" in again.notes
    assert f"int8: matmul x{len(kept)} stays float: kept float as the calibration table's build chose" in again.notes
    assert again.quantization.table.digest == budgeted.quantization.table.digest
    assert again.to_bytes() == budgeted.to_bytes()
    # a new budget with samples fits again; --accuracy-budget off quantizes them, and says so
    refit = aot.build(path, targets=["npu"], quantize=QuantizeConfig(samples, table=table, accuracy_budget=0.01),
                      log=None)  # fmt: skip
    assert refit.quantization.kept_float == kept
    assert f"int8: the table's build kept {len(kept)} layers float; the accuracy budget 1% chooses them again on " \
           "these samples" in refit.notes  # fmt: skip
    off = aot.build(path, targets=["npu"], quantize=QuantizeConfig(table=table, mixed_precision=False), log=None)
    assert off.quantization.kept_float == [] and any("(--accuracy-budget off) quantizes them" in n for n in off.notes)
    # a table written before the field (or by a build that kept none) keeps none
    old = json.loads(table.read_text())
    del old["kept_float"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    plain = aot.build(path, targets=["npu"], quantize=QuantizeConfig(table=tmp_path / "old.json"), log=None)
    assert plain.quantization.kept_float == [] and not any("table's build" in n for n in plain.notes)
    assert "kept_float" not in json.loads(plain.quantization.table.to_json())


# -- D: the samples a table came from ------------------------------------------------------------


def test_a_table_rebuilt_on_its_own_data_counts_its_samples_as_calibration(outliers, tmp_path):  # noqa: F811
    """The table names its data (digest and count): rebuilt with that data, its first samples made the ranges and
    are reported as calibration samples, not all as held back; other data is all held back, as before."""
    path, samples = outliers
    table = tmp_path / "t.json"
    _build(path, samples, method="minmax", report=False).quantization.table.save(table)
    assert CalibrationTable.load(table).samples == 60
    same = aot.build(path, targets=["npu"], quantize=QuantizeConfig(samples, table=table), log=None)
    assert [(a.split, a.samples) for a in same.quantization.accuracy] == [("calibration", 60), ("held-back", 20)]
    assert any(n.startswith("int8 verdict: ") and "on 80 calibration and held-back samples" in n for n in same.notes)
    other = aot.build(path, targets=["npu"], quantize=QuantizeConfig(samples[::-1], table=table), log=None)
    assert [(a.split, a.samples) for a in other.quantization.accuracy] == [("held-back", 80)]


def test_one_sample_of_a_batch_says_why_nothing_is_held_back_not_that_holdout_was_zero():
    """A single file of 16 rows is one sample (batch 16): nothing can be held back at the default --holdout, and the
    notes say that, not "--holdout 0", which was never given; the verdict counts "1 ... sample"."""
    result = _quantize(_conv_gemm(), calibration=[{"x": rand(16, 3, 8, 8, seed=9)}])
    assert "int8: no samples held back (one sample: none to spare): methods judged on the samples they calibrated " \
           "on" in result.notes  # fmt: skip
    assert any(n.startswith("int8: one calibration sample: a file holding a batch is one sample") for n in result.notes)
    (line,) = [n for n in result.notes if n.startswith("int8 verdict")]
    assert " on 1 calibration sample " in line and "--holdout 0" not in " ".join(result.notes), line
    zero = _quantize(_conv_gemm(), calibration=_samples(4), holdout=0.0)
    assert any("no samples held back (--holdout 0)" in n for n in zero.notes)
