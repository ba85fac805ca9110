"""Export a PyTorch model to ONNX the way users do today: ``torch.onnx.export(..., dynamo=True)``.

torch 2.13's exporter re-runs its decompositions on fake tensors and, for some models
(the T5 encoder: ``reshape`` after ``transpose`` recorded as ``view``), refuses its own
program with "Cannot view a tensor with shape ...". Decomposing the exported program to
core ATen first (``run_decompositions()``) and handing that to the exporter gives the same
ONNX ops without the failing replay; ``export_onnx`` does that only when the plain call fails
that way, and says so in its return value.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch


def export_onnx(
    model: torch.nn.Module, example: dict[str, torch.Tensor], dynamic_shapes: dict[str, Any] | None, path: os.PathLike
) -> str:
    """Write ``model`` to ``path`` with symbolic dims from ``dynamic_shapes``; returns how it was exported."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(
                model, (), path, kwargs=example, dynamic_shapes=dynamic_shapes, dynamo=True, verbose=False
            )
            return "torch.onnx.export(dynamo=True)"
        except Exception as e:
            if "Cannot view a tensor" not in str(e):
                raise
        program = torch.export.export(model, (), example, dynamic_shapes=dynamic_shapes, strict=False)
        torch.onnx.export(program.run_decompositions(), (), path, kwargs=example, dynamo=True, verbose=False)
        return "torch.export + run_decompositions + torch.onnx.export"
