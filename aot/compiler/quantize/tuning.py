"""Choosing by measurement: the calibration method (``auto``) and the layers kept float (``accuracy_budget``).

Both judge a quantized *variant* of the float graph (a copy with Q/DQ inserted for a
given table and set of float layers) by the task agreement of report.py on the
held-back samples, against the float outputs the calibration pass already computed:

- ``choose_method``: one variant per method, each from the same histograms; the best
  ``Score.key`` wins (task agreement, then top-1, then relative L2).
- ``fit_budget``: when the chosen build loses more than the budget, each quantized layer
  is kept float alone to measure what its quantization costs (per-layer sensitivity,
  as accuracy-aware tuning does); the costliest are kept float, the fewest that meet
  the budget (a bisection over the ranking, re-measured as a whole). Where no output has a
  task metric, the default budget holds the relative L2 to ``RELATIVE_L2_THRESHOLD`` the
  same way (the verdict's measure there): a log-mel front end at 0.49 was shipped in int8.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from aot.compiler.quantize.calibrate import clone, progress_bar
from aot.compiler.quantize.engine import GraphRunner
from aot.compiler.quantize.insert import SYMMETRIC, Int8Scheme, QuantizationPlan, QuantizedOp, insert_qdq
from aot.compiler.quantize.report import (
    RELATIVE_L2_THRESHOLD,
    OutputAccuracy,
    Reading,
    Score,
    budget_text,
    ceil_points,
    compare,
    points,
    score,
)
from aot.compiler.quantize.samples import Sample
from aot.compiler.quantize.table import CalibrationTable
from aot.errors import BuildError
from aot.ir.graph import Graph, Value

#: Why a layer the budget kept float stays float (the notes' words).
BUDGET_REASON = "kept float under the accuracy budget"


def layers(plan: QuantizationPlan) -> list[list[str]]:
    """The plan's quantized ops as layers, each a list of op names: the ops that read one weight tensor (an
    unrolled LSTM's steps, 160 matmuls over one W; a weight-tied block) are one layer, kept float or quantized
    together, as one weight is stored once in one precision; any other op is a layer of its own. Measured op by
    op, resemblyzer's 3-layer LSTM had 484 "layers" (7 weights), one variant each: an int8 build of hours."""
    groups: dict[object, list[str]] = {}
    for op in plan.ops:
        weight = op.node.inputs[1] if len(op.node.inputs) > 1 else None
        key = id(weight) if weight is not None and weight.is_constant else ("op", op.node.name)
        groups.setdefault(key, []).append(op.node.name)
    return list(groups.values())


def with_shared_weights(plan: QuantizationPlan, keep_float: Iterable[str]) -> set[str]:
    """``keep_float`` and every op that reads a weight one of them reads (``layers``)."""
    keep = set(keep_float)
    if keep:
        for layer in layers(plan):
            if keep.intersection(layer):
                keep.update(layer)
    return keep


def restrict(plan: QuantizationPlan, keep_float: Iterable[str], mapping: dict[int, Value] | None = None,
             reason: str = BUDGET_REASON) -> QuantizationPlan:  # fmt: skip
    """``plan`` without the ops named in ``keep_float`` and those sharing their weights (``with_shared_weights``),
    mapped onto a clone's values when ``mapping`` is given; the notes say ``reason`` for them."""
    keep_float = with_shared_weights(plan, keep_float)

    def v(value: Value) -> Value:
        return mapping[id(value)] if mapping is not None else value

    ops, tensors = [], {}
    for op in plan.ops:
        if op.node.name in keep_float:
            continue
        node = v(op.node.outputs[0]).producer
        activation = v(op.activation.outputs[0]).producer if op.activation is not None else None
        ops.append(QuantizedOp(node, v(op.output), activation))
        tensors.setdefault(id(node.inputs[0]), node.inputs[0])
        tensors.setdefault(id(ops[-1].output), ops[-1].output)
    floats = {k: c.copy() for k, c in plan.floats.items()}
    for op in plan.ops:
        if op.node.name in keep_float:
            floats.setdefault(op.node.op, collections.Counter())[reason] += 1
    return QuantizationPlan(ops, list(tensors.values()), floats)


@dataclass
class Judge:
    """Measures quantized variants of ``graph`` on ``samples`` against their float outputs ``floats``."""

    graph: Graph
    plan: QuantizationPlan
    names: list[str]
    samples: list[Sample]
    floats: list[list[np.ndarray]]
    split: str
    engine: str = "auto"
    like: GraphRunner | None = None  # a runner whose batching the variants reuse
    scheme: Int8Scheme = SYMMETRIC  # how the build writes its Q/DQ: the variants judged must be written the same
    sequence: str = "auto"  # how a sequence output's task agreement reads it (report.SEQUENCE_READINGS)
    readings: dict[str, Reading] = field(default_factory=dict)  # how outputs read (report.output_readings)

    def variant(self, table: CalibrationTable, keep_float: Iterable[str] = ()) -> Graph:
        copy, mapping = clone(self.graph)
        insert_qdq(copy, restrict(self.plan, keep_float, mapping), table, self.scheme)
        return copy

    def __post_init__(self) -> None:
        #: The outputs of variants measured, by ``key``, while a caller keeps them (``keep``).
        self.outputs: dict[tuple[str, frozenset[str]], list[list[np.ndarray]]] = {}

    @staticmethod
    def key(table: CalibrationTable, keep_float: Iterable[str] = ()) -> tuple[str, frozenset[str]]:
        return table.digest, frozenset(keep_float)

    def measure(self, table: CalibrationTable, keep_float: Iterable[str] = ()) -> tuple[list[OutputAccuracy], Score]:
        keep_float = list(keep_float)
        runner = GraphRunner(self.variant(table, keep_float), engine=self.engine, like=self.like)
        quantized = runner.run(self.samples)
        self.outputs[self.key(table, keep_float)] = quantized
        rows = [
            compare(
                name,
                self.split,
                [s[j] for s in self.floats],
                [s[j] for s in quantized],
                self.sequence,
                self.readings.get(name),
            )
            for j, name in enumerate(self.names)
        ]
        return rows, score(rows)

    def keep(self, *keys: tuple[str, frozenset[str]]) -> None:
        """Forget the outputs of every variant but ``keys`` (a variant's outputs are as large as the model's)."""
        self.outputs = {k: v for k, v in self.outputs.items() if k in keys}


def choose_method(judge: Judge, tables: dict[str, CalibrationTable], stream: TextIO | None
                  ) -> tuple[CalibrationTable, list[str]]:  # fmt: skip
    """The table whose variant scores best, and the lines that say each method's score and which won."""
    tick = progress_bar(stream, "methods", len(tables))
    tick(0)
    scores: dict[str, Score] = {}
    for i, (method, table) in enumerate(tables.items()):
        scores[method] = judge.measure(table)[1]
        tick(i + 1)
    best = max(scores, key=lambda m: scores[m].key())  # the first of equals: the order of METHODS
    judge.keep(judge.key(tables[best]))
    each = "; ".join(f"{m} {s.text()}" for m, s in scores.items())
    line = f"int8: calibration method auto chose {best} on {len(judge.samples)} {judge.split} samples ({each})"
    return tables[best], [line]


@dataclass(frozen=True)
class LayerCost:
    name: str
    op: str
    #: The score with this layer alone in int8 (every other layer float), on the sensitivity samples.
    alone: Score
    #: How many ops read this layer's weight (``layers``): named by the first, kept float together.
    ops: int = 1

    def label(self) -> str:
        return f"{self.op} {self.name!r}" + (
            f" (and the {self.ops - 1} ops sharing its weight)" if self.ops > 1 else ""
        )


#: How many of the judged samples measure each layer's sensitivity (one variant per layer: they must be few; the
#: relative L2 and per-position top-1 of a few samples rank layers well, the chosen set is judged on them all).
#: They are the first samples the task metric reads (``sensitivity_samples``).
SENSITIVITY_SAMPLES = 2


def sensitivity_samples(judge: Judge) -> list[int]:
    """The indices of the ``SENSITIVITY_SAMPLES`` samples that measure the layers' costs: the first ones on which
    the task metric reads the float model's outputs, then the first others. A detector's head reads only samples
    where float detects something, a multi-label map only those with a positive: most images hold no object, and
    on two that held none NudeNet's every layer "lost" None points (an internal error, and a ranking of ties)."""
    readable, other = [], []
    for i, outputs in enumerate(judge.floats):
        rows = [
            compare(name, judge.split, [outputs[j]], [outputs[j]], judge.sequence, judge.readings.get(name))
            for j, name in enumerate(judge.names)
        ]
        (readable if score(rows).task is not None else other).append(i)
        if len(readable) >= SENSITIVITY_SAMPLES:
            break
    return (readable + other)[:SENSITIVITY_SAMPLES]  # none readable: the first ones, ranked by relative L2


#: How many kept layers the report names with their cost (the rest by name only).
NAMED_LAYERS = 5


def layer_costs(judge: Judge, table: CalibrationTable, stream: TextIO | None) -> list[LayerCost]:
    """Each quantized layer's cost, costliest first: the score with it alone in int8 (per-layer sensitivity).

    Alone in int8 rather than alone in float: the damage of one layer is then measured against the
    float model (exact zero where it does none), not as a small difference between two damaged builds.
    """
    # the outputs read as the build reads them (readings): by shape, a multi-label map read as CTC
    chosen = sensitivity_samples(judge)
    few = Judge(judge.graph, judge.plan, judge.names, [judge.samples[i] for i in chosen],
                [judge.floats[i] for i in chosen], judge.split, judge.engine, judge.like, judge.scheme,
                judge.sequence, judge.readings)  # fmt: skip
    groups = layers(judge.plan)
    names = [group[0] for group in groups]  # a layer by its first op (restrict takes the rest with it)
    ops = {op.node.name: op.node.op for op in judge.plan.ops}
    tick = progress_bar(stream, "layers", len(names))
    tick(0)
    costs = []
    for i, name in enumerate(names):
        others = names[:i] + names[i + 1 :]
        costs.append(LayerCost(name, ops[name], few.measure(table, others)[1], len(groups[i])))
        tick(i + 1)
    # the layer whose int8 alone scores worst first; where the task metric reads none of the samples (every
    # loss None) the key ranks by relative L2, which is always defined
    return sorted(costs, key=lambda c: c.alone.key())


def _task_loss(score: Score) -> float:
    return score.loss if score.loss is not None else math.inf


def _alone(score: Score) -> str:
    """What one layer alone in int8 costs, for the report: its loss, or its relative L2 alone where the task metric
    could not read the sensitivity samples."""
    if score.loss is None:
        return f"{score.l2_text()}; the task metric reads neither sensitivity sample"
    return f"loses {points(score.loss)}, {score.l2_text()}"


def _relative_l2(score: Score) -> float:
    return score.relative_l2


def _fewest_kept(judge: Judge, table: CalibrationTable, order: list[str], limit: float, measured: dict[int, Score],
                 tick: Callable[[int], None], loss: Callable[[Score], float] = _task_loss) -> int:  # fmt: skip
    """The smallest k whose k costliest layers (``order``) kept float lose at most ``limit`` (by ``loss``), by
    bisection; len(order) where none does. ``measured`` (k -> score) holds what earlier searches measured, and
    gains what this one does."""
    lo, hi = 1, len(order)
    steps = max(1, (len(order) - 1).bit_length())
    while lo < hi:
        mid = (lo + hi) // 2
        if mid not in measured:
            measured[mid] = judge.measure(table, order[:mid])[1]
        if loss(measured[mid]) <= limit + 1e-12:
            hi = mid
        else:
            lo = mid + 1
        judge.keep(judge.key(table), judge.key(table, order[:hi]))
        tick(min(len(measured) - 1, steps))
    if lo not in measured:
        measured[lo] = judge.measure(table, order[:lo])[1]
    return lo


def _named_layers(costs: list[LayerCost], k: int, alone: Callable[[Score], str]) -> str:
    """The k costliest layers for the report: the first ``NAMED_LAYERS`` with what each costs alone in int8
    (``alone`` of its score), the rest by name."""
    named = ", ".join(f"{c.label()} (alone in int8: {alone(c.alone)})" for c in costs[: min(k, NAMED_LAYERS)])
    if k > NAMED_LAYERS:
        named += f", and {k - NAMED_LAYERS} more ({', '.join(c.name for c in costs[NAMED_LAYERS:k])})"
    return named


def fit_budget(judge: Judge, table: CalibrationTable, budget: float, stream: TextIO | None, strict: bool = True
               ) -> tuple[list[str], list[str]]:  # fmt: skip
    """The fewest layers to keep float so the loss stays within ``budget``, and the report's lines about it.

    ``strict`` (a budget the user asked for): a budget no layer set meets is a BuildError saying what it
    would take. Not strict (the default budget), best effort: the budget itself first; where no layer set
    meets it and it is finer than one sample of the set, one sample (0 disagreements in 64 is out of reach
    where a sample sits on a tie); where no set meets that either, the build keeps the set of least loss
    measured, and says so. The budget comes first because one sample is often more than the budget
    (1.04 points in 96): allowed at once, that disagreement cost PP-OCRv4's recognizer 1.75 points on
    400 other lines on the NPU, where holding to zero, which a layer set met, cost 0.75.
    """
    rows, base = judge.measure(table)
    on = f"{len(judge.samples)} {judge.split} samples"
    asked = "accuracy budget" if strict else "default accuracy budget"
    resolution = 1.0 / len(judge.samples)
    if base.loss is None:
        why = "; ".join(f"{a.output}: {a.unreadable}" for a in rows)
        if not strict:
            return _fit_relative_l2(judge, table, base, f"the {asked} ({budget_text(budget)})", on, stream)
        raise BuildError(f"--accuracy-budget needs an output the task metric reads; {why}")
    if base.loss <= budget + 1e-12:
        return [], [f"int8: {asked} {budget_text(budget)} met with every layer in int8 "
                    f"(loses {points(base.loss)} on {on})"]  # fmt: skip
    start = time.perf_counter()
    costs = layer_costs(judge, table, stream)
    order = [c.name for c in costs]
    measured: dict[int, Score] = {0: base}
    tick = progress_bar(stream, "budget", max(1, (len(order) - 1).bit_length()))
    tick(0)
    limit = budget
    k = _fewest_kept(judge, table, order, limit, measured, tick)
    if not strict and resolution > budget and (k == len(order) or measured[k].loss > limit + 1e-12):
        limit = resolution  # no layer set met the budget, finer than one sample: one sample, as the set resolves it
        k = 0 if base.loss <= limit + 1e-12 else _fewest_kept(judge, table, order, limit, measured, tick)
        if k == 0:
            return [], [f"int8: {asked} {budget_text(budget)} (as {len(judge.samples)} samples resolve it: "
                        f"{points(limit)}) met with every layer in int8 (loses {points(base.loss)} on {on}; no "
                        f"layer set measured short of the float model lost less)"]  # fmt: skip
    if k == len(order) or measured[k].loss > limit + 1e-12:
        best = min(measured[j].loss for j in measured if j < len(order))
        every = "its one int8 layer" if len(order) == 1 else f"all {len(order)} int8 layers"
        allow = f"allow --accuracy-budget {budget_text(ceil_points(best))}, or " if best < 1 else ""
        message = (
            f"{asked} {budget_text(budget)} cannot be met in int8: quantized it loses {points(base.loss)} on "
            f"{on}, and only keeping {every} float (the float model) meets it; the least loss "
            f"with any layer in int8 was {points(best)}: {allow}build in float"
        )
        if strict:
            raise BuildError(message)
        k = min((j for j in measured if j < len(order)), key=lambda j: (measured[j].loss, j))
        if k == 0:
            return [], [f"int8: {message}; every layer kept in int8"]
        message += f"; the {k} costliest layers kept float, the least loss measured"
        return order[:k], [f"int8: {message}: {', '.join(order[:k])}"]
    named = _named_layers(costs, k, _alone)
    lines = [
        f"int8: {asked} {budget_text(budget)}"
        + (f" (as {len(judge.samples)} samples resolve it: {points(limit)})" if limit > budget else "")
        + f": int8 everywhere loses {points(base.loss)} on {on}; "
        f"{k} of {len(order)} layers kept float, the costliest: {named}",
        f"int8: with {'it' if k == 1 else 'them'} float it loses {points(measured[k].loss)} ({measured[k].text()}); "
        f"measured {len(order)} layers' costs on {min(len(judge.samples), SENSITIVITY_SAMPLES)} samples and "
        f"{len(measured)} layer sets in {time.perf_counter() - start:.1f} s",
    ]
    return order[:k], lines


def _fit_relative_l2(judge: Judge, table: CalibrationTable, base: Score, asked: str, on: str, stream: TextIO | None
                     ) -> tuple[list[str], list[str]]:  # fmt: skip
    """The default budget where no output has a task metric: the fewest layers kept float (the costliest by relative
    L2) that bring the relative L2 within ``RELATIVE_L2_THRESHOLD``, which the verdict then reads; every layer in
    int8 where none does short of the float model (the verdict says OVER)."""
    head = (
        f"int8: {asked} is not applied: no output the task metric reads; relative L2 held to {RELATIVE_L2_THRESHOLD:g}"
    )
    if base.relative_l2 <= RELATIVE_L2_THRESHOLD:
        return [], [f"{head}: met with every layer in int8 ({base.relative_l2:.4f} on {on})"]
    start = time.perf_counter()
    costs = layer_costs(judge, table, stream)  # the worst relative L2 alone in int8 first (Score.key)
    order = [c.name for c in costs]
    measured: dict[int, Score] = {0: base}
    tick = progress_bar(stream, "budget", max(1, (len(order) - 1).bit_length()))
    tick(0)
    k = _fewest_kept(judge, table, order, RELATIVE_L2_THRESHOLD, measured, tick, _relative_l2)
    met = k < len(order) and measured[k].relative_l2 <= RELATIVE_L2_THRESHOLD + 1e-12
    if not met:
        k = min((j for j in measured if j < len(order)), key=lambda j: (measured[j].relative_l2, j))
        if k == 0:
            return [], [f"{head}: int8 everywhere {base.relative_l2:.4f} on {on}, and no layer set measured short "
                        "of the float model is within it; every layer kept in int8 (build in float where it "
                        "matters)"]  # fmt: skip
    named = _named_layers(costs, k, lambda a: a.l2_text())
    kept = f"{k} of {len(order)} layers kept float" if met else (
        f"no layer set short of the float model is within it, the least measured keeps {k} of {len(order)} layers "
        "float"
    )  # fmt: skip
    return order[:k], [
        f"{head}: int8 everywhere {base.relative_l2:.4f} on {on}; {kept}, the costliest: {named}",
        f"int8: with {'it' if k == 1 else 'them'} float, relative L2 {measured[k].relative_l2:.4f}; measured "
        f"{len(order)} layers' costs on {min(len(judge.samples), SENSITIVITY_SAMPLES)} samples and {len(measured)} "
        f"layer sets in {time.perf_counter() - start:.1f} s",
    ]
