"""Quantize at build time: calibrate, choose the method and the float layers by measurement, insert Q/DQ.

``quantize_graph`` is the build's "quantize" stage (``aot.build(..., quantize=QuantizeConfig(...))``,
``aot-build --precision int8 --calibration DIR``); ``Quantization.measure`` is its "accuracy"
stage. docs/quantization.md tells the whole story.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import sys
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from aot.compiler.quantize.calibrate import make_table, progress_bar, run_float
from aot.compiler.quantize.config import METHODS, QuantizeConfig
from aot.compiler.quantize.engine import GraphRunner
from aot.compiler.quantize.insert import (
    DYNAMIC_OPS,
    NO_KERNEL,
    SYMMETRIC,
    Int8Scheme,
    QuantizationPlan,
    Rule,
    insert_qdq,
    is_embedding,
    plan_quantization,
    resolve_scheme,
)
from aot.compiler.quantize.methods import HISTOGRAM_METHODS
from aot.compiler.quantize.report import (
    DEFAULT_BUDGET,
    EVERY_SAMPLE,
    OutputAccuracy,
    Reading,
    accuracy_report,
    budget_text,
    judgement,
    output_readings,
    verdict,
    with_user_readings,
)
from aot.compiler.quantize.samples import constant_inputs, data_digest, load_samples
from aot.compiler.quantize.table import CalibrationTable
from aot.compiler.quantize.tuning import BUDGET_REASON, Judge, choose_method, fit_budget, restrict
from aot.errors import BuildError
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
    #: The same over every sample, calibration and held-back together: what the verdict reads.
    overall: list[OutputAccuracy] = field(default_factory=list)
    #: The layers (node names) kept float under the accuracy budget.
    kept_float: list[str] = field(default_factory=list)
    #: The budget the verdict is given against.
    budget: float = DEFAULT_BUDGET
    #: Runs the quantized graph as built (Q/DQ in float) for the report.
    runner: GraphRunner | None = None
    #: How a sequence output's task agreement reads it (report.SEQUENCE_READINGS).
    sequence: str = "auto"
    #: What the graph says about how its outputs read (report.output_readings): features and states, which
    #: relative L2 judges, and detectors' heads.
    readings: dict[str, Reading] = field(default_factory=dict)
    #: Every sample's outputs of the quantized graph where choosing measured them already (else the report runs it).
    quantized: list[list[np.ndarray]] | None = None

    def measure(self, log: TextIO | None = sys.stderr) -> None:
        """The accuracy stage: the quantized graph on every sample against the float outputs."""
        if self.runner is None or not self.samples:
            return
        quantized = self.quantized
        if quantized is None:
            tick = progress_bar(log, "accuracy", len(self.samples))
            tick(0)
            quantized = self.runner.run(self.samples, lambda done: tick(done, self.runner.describe()))
        self.accuracy = accuracy_report(self.output_names, self.float_outputs, quantized, self.calibrated,
                                        self.sequence, readings=self.readings)  # fmt: skip
        if 0 < self.calibrated < len(self.samples):  # the verdict's rows: every sample
            self.overall = accuracy_report(self.output_names, self.float_outputs, quantized, 0, self.sequence,
                                           split=EVERY_SAMPLE, readings=self.readings)  # fmt: skip

    def report_lines(self) -> list[str]:
        """The report's lines: one per output and split, then the verdict."""
        if not self.accuracy:
            return []
        judged = self.overall or self.accuracy
        return [a.line() for a in self.accuracy] + [judgement(judged), verdict(judged, self.budget)]


class NeedsCalibration(BuildError):
    """int8 asked for without data where some activations need calibrated ranges; ``advice`` says which
    ``int8_scheme`` needs none, as the target that has the option spells it."""

    def __init__(self, plan: QuantizationPlan):
        calibrated = {id(t) for t in plan.tensors}
        static = collections.Counter(q.node.op for q in plan.ops if id(q.node.inputs[0]) in calibrated)
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(static.items()))
        super().__init__(
            f"int8 needs calibration data (--calibration DIR) or a calibration table: {len(plan.tensors)} "
            f"activations quantize with calibrated ranges (inputs and results of {ops}; matmuls {plan.how})"
        )
        self.matmuls_only = set(static) <= DYNAMIC_OPS

    def advice(self, target: str | None) -> str:
        """What spares the data, for ``target`` (one with an ``int8_scheme`` option; None: no target has one)."""
        if target is None:
            return ""
        if self.matmuls_only:
            return f"; --backend-option {target}.int8_scheme=dynamic or weight-only needs none"
        return f"; --backend-option {target}.int8_scheme=weight-only (int8 weights, float activations) needs none"


def held_back_split(samples: int, holdout: float) -> int:
    """How many of ``samples`` calibrate (the first ones); a held-back share asked for gets at least one."""
    calibrated = samples - math.floor(samples * holdout) if samples else 0
    if holdout and calibrated == samples and samples > 1:
        calibrated -= 1
    return calibrated


def table_calibrated(table: CalibrationTable, samples: list[dict[str, np.ndarray]]) -> int:
    """How many of ``samples`` (the first ones) calibrated ``table``: its sample count where their digest is its
    data digest (a rebuild on the very data the table came from: the report and the verdict must not call the
    samples that made the ranges held back), else 0: the table came from other data, every sample is held back."""
    count = table.samples
    if 0 < count <= len(samples) and data_digest(samples[:count]) == table.data_digest:
        return count
    return 0


def nothing_quantized(plan: QuantizationPlan, log: TextIO | None) -> list[str]:
    """The notes of an int8 build where no op can compute in int8, and a warning on ``log``: int8 was asked for,
    and the bundle computes in float. The reasons named are those of the ops an int8 kernel exists for."""
    reasons = sorted({reason for counts in plan.floats.values() for reason in counts})
    telling = [r for r in reasons if not r.startswith(NO_KERNEL)] or reasons
    why = "; ".join(telling[:3]) + ("; ..." if len(telling) > 3 else "") if telling else NO_KERNEL
    warning = f"int8 quantized nothing ({why}): the bundle computes in float"
    if log is not None:
        print(f"warning: {warning}", file=log, flush=True)
    return [*plan.notes(), f"int8: {warning}"]


def quantize_graph(graph: Graph, config: QuantizeConfig, rules: dict[str, Rule],
                   log: TextIO | None = sys.stderr, scheme: Int8Scheme = SYMMETRIC) -> Quantization:  # fmt: skip
    """Calibrate (or read the table), choose, then rewrite ``graph`` with Q/DQ written as ``scheme`` says (the
    methods and the budget are judged in that scheme too); the graph keeps its output names.

    A plan with no range to calibrate (every quantized op dynamic or weight-only) needs no samples: without
    them its table is empty and no accuracy is measured."""
    scheme = resolve_scheme(scheme, graph)
    plan = plan_quantization(graph, rules, scheme)
    embeddings = sum(map(is_embedding, graph.nodes)) if scheme.int8_embeddings() else 0
    stored = [f"int8: {embeddings} embedding tables stored int8 (per tensor), dequantized after the lookup"]
    stored = stored if embeddings else []
    if not plan.ops and not embeddings:  # no calibration, method, budget or verdict about a float graph
        return Quantization(CalibrationTable("none", None, 0, data_digest([]), {}), nothing_quantized(plan, log))
    if not plan.tensors and config.calibration is None and config.table is None:
        table = CalibrationTable("none", None, 0, data_digest([]), {})
        insert_qdq(graph, plan, table, scheme)
        graph.metadata["calibration"] = table.digest
        return Quantization(table, plan.notes() + stored)
    if config.calibration is None and config.table is None:
        raise NeedsCalibration(plan)
    samples = [] if config.calibration is None else load_samples(config.calibration, graph.inputs, config.max_samples)
    calibrated = held_back_split(len(samples), config.holdout)
    names = [v.name for v in graph.outputs]
    readings = with_user_readings(graph, output_readings(graph), config.output_readings)
    floats: list[list[np.ndarray]] = []
    runner = None
    if config.table is not None:
        tables = {"table": CalibrationTable.load(config.table)}
        calibrated = table_calibrated(tables["table"], samples)
        if samples and (config.report or config.accuracy_budget is not None):
            _, floats, runner = run_float(graph, [], samples, 0, log, config.engine)
    else:
        observers, floats, runner = run_float(graph, plan.tensors, samples, calibrated, log, config.engine)
        digest = data_digest(samples[:calibrated])
        methods = HISTOGRAM_METHODS if config.method == "auto" else (config.method,)
        tables = {m: make_table(observers, m, config.percentile, calibrated, digest) for m in methods}
    lines: list[str] = constant_inputs(samples)
    judge = None
    if samples and floats:  # judged on every sample (report.py says why)
        split = EVERY_SAMPLE if 0 < calibrated < len(samples) else "calibration" if calibrated else "held-back"
        judge = Judge(
            graph, plan, names, samples, floats, split, config.engine, runner, scheme, config.sequence, readings
        )
        if calibrated == len(samples) and len(tables) > 1:
            why = "--holdout 0" if not config.holdout else "one sample: none to spare"
            lines.append(f"int8: no samples held back ({why}): methods judged on the samples they calibrated on")
            if len(samples) == 1:  # a file of N rows is one sample of batch N (docs/quantization.md)
                lines.append("int8: one calibration sample: a file holding a batch is one sample; several samples "
                             "(files, or a stack [S, ...] of the model's shape) let the build hold some back")  # fmt: skip
    if len(tables) > 1:
        table, chose = choose_method(judge, tables, log)
        lines.extend(chose)
    else:
        (table,) = tables.values()
    kept: list[str] = []
    quantized = {op.node.name for op in plan.ops}
    inherited = [name for name in table.kept_float if name in quantized]  # the table's order: costliest first
    reason = BUDGET_REASON
    if config.accuracy_budget is not None:
        if judge is None:
            raise BuildError("an accuracy budget needs samples to measure it on: --calibration DIR")
        if inherited:
            lines.append(f"int8: the table's build kept {len(inherited)} layers float; the accuracy budget "
                         f"{budget_text(config.accuracy_budget)} chooses them again on these samples")  # fmt: skip
        kept, fitted = fit_budget(judge, table, config.accuracy_budget, log)
        lines.extend(fitted)
    elif inherited and config.mixed_precision:  # the ranges alone would quantize the layers its budget kept float
        kept, reason = inherited, "kept float as the calibration table's build chose"
        lines.append(f"int8: {len(kept)} layers kept float as the table's build chose: {', '.join(kept)}")
    elif inherited:
        lines.append(f"int8: the table's build kept {len(inherited)} layers float ({', '.join(inherited)}); "
                     "mixed_precision=False (--accuracy-budget off) quantizes them")  # fmt: skip
    elif config.mixed_precision and judge is not None:  # the default budget, best effort
        kept, fitted = fit_budget(judge, table, DEFAULT_BUDGET, log, strict=False)
        lines.extend(fitted)
    measured = judge.outputs.get(judge.key(table, kept)) if judge is not None else None
    table = dataclasses.replace(table, kept_float=list(kept))  # a rebuild from the table keeps them float too
    final = restrict(plan, kept, reason=reason)
    insert_qdq(graph, final, table, scheme)
    graph.metadata["calibration"] = table.digest
    notes = [
        *final.notes(),
        *stored,
        *lines,
        f"int8: calibration table {table.digest[:12]} ({table.method}, {table.samples} samples)",
    ]
    result = Quantization(table, notes, samples if config.report else [], floats, calibrated, names, kept_float=kept)
    result.sequence, result.readings = config.sequence, readings
    if config.report:  # the final variant's outputs, measured already: the report reuses them
        result.quantized = measured
    result.budget = config.accuracy_budget if config.accuracy_budget is not None else DEFAULT_BUDGET
    if config.report and samples:  # written now: partitioning rewrites the graph after this stage
        result.runner = GraphRunner(graph, engine=config.engine, like=runner)
    return result


__all__ = [
    "METHODS",
    "CalibrationTable",
    "Int8Scheme",
    "NeedsCalibration",
    "OutputAccuracy",
    "QuantizeConfig",
    "Quantization",
    "accuracy_report",
    "quantize_graph",
]
