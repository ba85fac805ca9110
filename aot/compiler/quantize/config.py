"""How a build quantizes: the calibration data, the range method, the held-back share and the accuracy budget."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aot.compiler.quantize.methods import HISTOGRAM_METHODS
from aot.compiler.quantize.report import OUTPUT_READINGS, SEQUENCE_READINGS
from aot.errors import BuildError

#: ``auto`` tries every histogram method on the held-back samples and keeps the best.
METHODS = ("auto", *HISTOGRAM_METHODS)
ENGINES = ("auto", "onnxruntime", "host")


def budget_fraction(value: Any, where: str = "accuracy_budget") -> float | None:
    """An accuracy budget as a fraction of task agreement: ``"1%"``, ``"0.01"`` or ``0.01`` -> 0.01.

    The CLI's ``--accuracy-budget`` and ``QuantizeConfig(accuracy_budget=...)`` take the same spellings (the
    docs show them side by side); anything else is one BuildError line naming ``where``."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            raise BuildError(f"{where} {value!r}: write a percentage (1%) or a fraction (0.01)") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise BuildError(f"{where} must be a fraction (0.01) or a percentage ('1%'), got {type(value).__name__}")
    if not 0.0 <= number < 1.0:  # NaN fails this too
        raise BuildError(
            f"{where} {value!r}: a budget lies in [0%, 100%) of task agreement: e.g. 1% or 0.01 (one point)"
        )
    return number


def _require_number(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BuildError(f"calibration {name} must be a number, got {type(value).__name__} {value!r}")


@dataclass
class QuantizeConfig:
    """``aot.build(..., quantize=QuantizeConfig(calibration="calib/"))``.

    ``calibration``: a directory of .npy files (one sample each, or a stack of samples
    along a new leading axis, for a model with one input; for several inputs one
    subdirectory per sample holding ``<input name>.npy``), or an iterable of
    ``{input name: array}`` dicts. ``table``: a calibration table written by an
    earlier build (``--calibration-table``); with it no calibration runs, the layers
    that build kept float stay float (unless ``accuracy_budget`` fits them again on
    samples), and ``calibration`` (optional then) feeds the accuracy report and a budget.
    ``method``: ``"auto"`` (each of the others, judged on the held-back samples by
    the task agreement of report.py; the best is kept), ``"minmax"``, ``"percentile"``
    (of |x|, ``percentile`` per cent), ``"entropy"`` (least KL divergence, TensorRT's
    default) or ``"mse"`` (least quantization error). ``holdout``: the share of the
    samples kept out of calibration and used only to measure accuracy. ``max_samples``
    caps how many samples are read. ``accuracy_budget``: the task agreement (a
    fraction: 0.01 is one point, or a percentage string such as ``"1%"``) the build may lose; past it the layers whose
    quantization costs most stay float, the fewest that meet it, and a budget no
    layer set meets is an error. Without it one point is the budget, applied as
    best it can be (``mixed_precision``, on by default: where no set of layers
    meets it every layer stays int8, and the report says what it would take);
    ``mixed_precision=False`` keeps every layer the targets take in int8. ``engine``: what runs calibration
    and the accuracy measurements: onnxruntime where installed (``"auto"``), or the
    host plan. ``sequence``: how a (batch, time, classes) output's task agreement reads
    it: ``"auto"`` (its greedy CTC reading where class 0, the blank, is the float
    model's most frequent argmax), ``"ctc"`` or ``"positions"`` (every position must
    agree, as a tagger's). ``output_readings``: ``{output name: "values" | "classes"}``, the user's word where
    the graph does not tell how an output reads: ``values`` (relative L2 alone: a regression, a quality score, an
    embedding) or ``classes`` (top-1 agreement).
    """

    calibration: str | os.PathLike[str] | Iterable[Mapping[str, Any]] | None = None
    method: str = "auto"
    percentile: float = 99.99
    #: A quarter held back: 16 of 64 samples judge the methods and the layers kept float (6 could not tell
    #: a method that loses every sixth line from a good one).
    holdout: float = 0.25
    table: str | os.PathLike[str] | None = None
    max_samples: int | None = None
    #: Run the accuracy report at the end of the build (float vs quantized on every sample).
    report: bool = True
    accuracy_budget: float | None = None
    mixed_precision: bool = True
    engine: str = "auto"
    sequence: str = "auto"
    output_readings: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise BuildError(f"calibration method {self.method!r} is not one of {', '.join(METHODS)}")
        _require_number(self.percentile, "percentile")
        if not 0.0 < self.percentile <= 100.0:
            raise BuildError(f"calibration percentile must lie in (0, 100], got {self.percentile}")
        _require_number(self.holdout, "holdout")
        if not 0.0 <= self.holdout < 1.0:
            raise BuildError(f"calibration holdout must lie in [0, 1), got {self.holdout}")
        self.accuracy_budget = budget_fraction(self.accuracy_budget)
        if self.engine not in ENGINES:
            raise BuildError(f"calibration engine {self.engine!r} is not one of {', '.join(ENGINES)}")
        if self.sequence not in SEQUENCE_READINGS:
            raise BuildError(f"sequence reading {self.sequence!r} is not one of {', '.join(SEQUENCE_READINGS)}")
        if not isinstance(self.output_readings, Mapping):
            raise BuildError(f"output_readings must map output names to readings, got {self.output_readings!r}")
        for name, kind in self.output_readings.items():
            if not isinstance(name, str) or kind not in OUTPUT_READINGS:
                raise BuildError(f"--output-reading {name}={kind}: the reading must be one of "
                                 f"{', '.join(OUTPUT_READINGS)}")  # fmt: skip
        self.output_readings = dict(self.output_readings)
        if self.max_samples is not None and (type(self.max_samples) is not int or self.max_samples < 1):
            raise BuildError(f"max_samples must be positive, got {self.max_samples}")
