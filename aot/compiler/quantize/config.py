"""How a build quantizes: the calibration data, the range method and the held-back share."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aot.errors import BuildError

METHODS = ("minmax", "percentile")


@dataclass
class QuantizeConfig:
    """``aot.build(..., quantize=QuantizeConfig(calibration="calib/"))``.

    ``calibration``: a directory of .npy files (one sample each, or a stack of samples
    along a new leading axis, for a model with one input; for several inputs one
    subdirectory per sample holding ``<input name>.npy``), or an iterable of
    ``{input name: array}`` dicts. ``table``: a calibration table written by an
    earlier build (``--calibration-table``); with it no calibration runs, and
    ``calibration`` (optional then) only feeds the accuracy report.
    ``method``: ``"minmax"`` or ``"percentile"`` (of |x|, ``percentile`` per cent).
    ``holdout``: the share of the samples kept out of calibration and used only to
    measure accuracy. ``max_samples`` caps how many samples are read.
    """

    calibration: str | os.PathLike[str] | Iterable[Mapping[str, Any]] | None = None
    method: str = "percentile"
    percentile: float = 99.99
    holdout: float = 0.1
    table: str | os.PathLike[str] | None = None
    max_samples: int | None = None
    #: Run the accuracy report at the end of the build (float vs quantized on every sample).
    report: bool = True

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise BuildError(f"calibration method {self.method!r} is not one of {', '.join(METHODS)}")
        if not 0.0 < self.percentile <= 100.0:
            raise BuildError(f"calibration percentile must lie in (0, 100], got {self.percentile}")
        if not 0.0 <= self.holdout < 1.0:
            raise BuildError(f"calibration holdout must lie in [0, 1), got {self.holdout}")
        if self.calibration is None and self.table is None:
            raise BuildError("int8 needs calibration data (--calibration DIR) or a calibration table")
        if self.max_samples is not None and self.max_samples < 1:
            raise BuildError(f"max_samples must be positive, got {self.max_samples}")
