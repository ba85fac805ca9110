"""Quantize at build time: calibrate on the host plan, insert Q/DQ where int8 targets compute in int8.

``quantize_graph`` is the build's "quantize" stage (``aot.build(..., quantize=QuantizeConfig(...))``,
``aot-build --precision int8 --calibration DIR``); docs/quantization.md tells the whole story.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from aot.compiler.quantize.calibrate import make_table, run_float
from aot.compiler.quantize.config import METHODS, QuantizeConfig
from aot.compiler.quantize.insert import SYMMETRIC, Int8Scheme, Rule, insert_qdq, plan_quantization
from aot.compiler.quantize.report import OutputAccuracy, accuracy_report
from aot.compiler.quantize.samples import data_digest, load_samples
from aot.compiler.quantize.table import CalibrationTable
from aot.ir.graph import Graph


@dataclass
class Quantization:
    """What the quantize stage did: the table, the samples and their float outputs (for the report)."""

    table: CalibrationTable
    notes: list[str]
    samples: list[dict[str, np.ndarray]] = field(default_factory=list)
    float_outputs: list[list[np.ndarray]] = field(default_factory=list)
    #: How many of ``samples`` (the first ones) calibrated the ranges; the rest are held back.
    calibrated: int = 0
    output_names: list[str] = field(default_factory=list)
    accuracy: list[OutputAccuracy] = field(default_factory=list)


def quantize_graph(graph: Graph, config: QuantizeConfig, rules: dict[str, Rule],
                   log: TextIO | None = sys.stderr, scheme: Int8Scheme = SYMMETRIC) -> Quantization:  # fmt: skip
    """Calibrate (or read the table), then rewrite ``graph`` with Q/DQ written as ``scheme`` says; the graph keeps
    its output names."""
    plan = plan_quantization(graph, rules)
    samples = load_samples(config.calibration, graph.inputs, config.max_samples) if config.calibration else []
    calibrated = len(samples) - math.floor(len(samples) * config.holdout) if samples else 0
    if config.holdout and samples and calibrated == len(samples) and len(samples) > 1:
        calibrated -= 1  # a held-back share asked for gets at least one sample
    names = [v.name for v in graph.outputs]
    floats: list[list[np.ndarray]] = []
    if config.table is not None:
        table = CalibrationTable.load(config.table)
        calibrated = 0  # the table came from other data: every sample is held back
        if samples and config.report:
            _, floats = run_float(graph, [], samples, 0, log)
    else:
        observers, floats = run_float(graph, plan.tensors, samples, calibrated, log)
        table = make_table(observers, config.method, config.percentile, calibrated, data_digest(samples[:calibrated]))
    insert_qdq(graph, plan, table, scheme)
    graph.metadata["calibration"] = table.digest
    notes = plan.notes()
    notes.append(f"int8: calibration table {table.digest[:12]} ({table.method}, {table.samples} samples)")
    return Quantization(table, notes, samples if config.report else [], floats, calibrated, names)


__all__ = [
    "METHODS",
    "CalibrationTable",
    "Int8Scheme",
    "OutputAccuracy",
    "QuantizeConfig",
    "Quantization",
    "accuracy_report",
    "quantize_graph",
]
