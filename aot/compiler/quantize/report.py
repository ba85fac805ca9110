"""The accuracy report: the quantized bundle against the float graph, per output, on every sample.

Calibration samples and held-back samples (never used for ranges) are reported
apart: a gap between the two says the ranges fit the calibration data too
closely. For each output: relative L2 error (||q - f|| / ||f|| over all samples),
the largest absolute difference, and, for a classifier's scores (rank 2, more
than one class), how often the top-1 class agrees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OutputAccuracy:
    output: str
    split: str  # "calibration" or "held-back"
    samples: int
    relative_l2: float
    max_abs: float
    top1_agreement: float | None

    def line(self) -> str:
        top1 = f", top-1 agreement {self.top1_agreement * 100:.1f}%" if self.top1_agreement is not None else ""
        return (
            f"accuracy {self.output} ({self.split}, {self.samples} samples): relative L2 {self.relative_l2:.4f}, "
            f"max abs {self.max_abs:.4g}{top1}"
        )


def _is_classifier(array: np.ndarray) -> bool:
    return array.ndim == 2 and array.shape[-1] > 1 and np.issubdtype(array.dtype, np.floating)


def compare(name: str, split: str, floats: list[np.ndarray], quantized: list[np.ndarray]) -> OutputAccuracy:
    f = np.concatenate([np.asarray(a, np.float64).ravel() for a in floats])
    q = np.concatenate([np.asarray(a, np.float64).ravel() for a in quantized])
    norm = np.linalg.norm(f)
    diff = q - f
    rel = float(np.linalg.norm(diff) / norm) if norm > 0 else float(np.linalg.norm(diff))
    top1 = None
    if _is_classifier(floats[0]):
        agree = [np.mean(np.argmax(a, -1) == np.argmax(b, -1)) for a, b in zip(floats, quantized)]
        top1 = float(np.mean(agree))
    return OutputAccuracy(name, split, len(floats), rel, float(np.abs(diff).max(initial=0.0)), top1)


def accuracy_report(
    names: list[str], floats: list[list[np.ndarray]], quantized: list[list[np.ndarray]], calibrated: int
) -> list[OutputAccuracy]:
    """``floats[i][j]``: sample i's output j; the first ``calibrated`` samples were used for calibration."""
    report = []
    for split, part in (("calibration", slice(0, calibrated)), ("held-back", slice(calibrated, None))):
        f, q = floats[part], quantized[part]
        if not f:
            continue
        for j, name in enumerate(names):
            report.append(compare(name, split, [s[j] for s in f], [s[j] for s in q]))
    return report
