"""The accuracy report: the quantized graph against the float graph, per output, in the task's own terms.

A bare error norm does not tell a good int8 build from a bad one: on a CTC text
recognizer the calibration with the smaller relative L2 lost four times the
exact-string accuracy. So each output is read the way its task reads it, where its
shape says what the task is, and the relative L2 stands beside:

- **(batch, classes)**, a classifier: top-1 agreement, the share of rows whose argmax
  int8 leaves unchanged;
- **(batch, time, classes)** or **(time, batch, classes)**, a sequence (CTC, a tagger):
  top-1 agreement per position, **exact-sequence agreement**, the share of samples whose
  every position agrees, and the **CTC reading**: the share of samples whose greedy CTC
  decoding (argmax per step, repeats merged, class 0 dropped as the blank) agrees, which
  is what a CTC recognizer's exact-string accuracy sees (a blank moved by one step or a
  repeat stretched changes positions, not the text);
- anything else (one value per row, integer outputs, feature maps of rank 4 or more, and
  features: an output a layer norm, a batch norm or a tanh makes, as an encoder's hidden
  states and pooled embedding are, holds no class scores whose argmax a task reads): one line
  saying the task metric cannot read it; relative L2 judges it.

The verdict, the method ``auto`` keeps and the layers the budget keeps float are judged on
every sample, calibration and held-back together: a budget of one point needs a hundred
samples to resolve, and 16 held-back ones cannot tell a loss of one line in six from
none, while the ranges of a few hundred tensors hardly fit the samples they were taken
from (the report's two splits show it where they do).

The **task agreement** of an output is its top-1 agreement for a classifier; for a
sequence, its CTC reading where the output reads as CTC (``sequence="auto"``: class 0,
the blank, is the float model's argmax at more positions than any other class, as it is
in a CTC recognizer's output; ``"ctc"`` always), else its exact-sequence agreement
(``"positions"``, or a tagger whose class 0 does not dominate). A build is scored by the mean task agreement of
the outputs that have one, ties broken by the mean top-1 agreement, then by the
relative L2 (``Score.key``); the verdict compares the loss (1 - task agreement) with
the accuracy budget. Calibration and held-back samples (never used for ranges) are
reported apart: a gap between them says the ranges fit the calibration data too closely.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Graph

#: The budget a verdict is given against when the build sets none: one point of agreement.
DEFAULT_BUDGET = 0.01


@dataclass(frozen=True)
class OutputAccuracy:
    output: str
    split: str  # "calibration" or "held-back"
    samples: int
    relative_l2: float
    max_abs: float
    #: Share of positions (rows of a classifier) whose argmax over the last axis agrees.
    top1_agreement: float | None
    #: For a sequence: share of samples whose every position agrees.
    exact_agreement: float | None = None
    #: Positions the top-1 agreement counted, over all samples of the split.
    positions: int = 0
    #: Why the task metric cannot read this output (None when it can).
    unreadable: str | None = None
    #: For a sequence: share of samples whose greedy CTC readings agree.
    ctc_agreement: float | None = None
    #: Whether the CTC reading is this output's task agreement (it reads as CTC), and why (or why not).
    ctc: bool = False
    ctc_why: str = ""
    #: NaN or infinite values in (the float model's, the int8 build's) results; (0, 0) where every value is finite.
    nonfinite: tuple[int, int] = (0, 0)

    @property
    def task_agreement(self) -> float | None:
        if self.ctc:
            return self.ctc_agreement
        return self.exact_agreement if self.exact_agreement is not None else self.top1_agreement

    def line(self) -> str:
        head = (
            f"accuracy {self.output} ({self.split}, {self.samples} samples): relative L2 {self.relative_l2:.4f}, "
            f"max abs {self.max_abs:.4g}"
        )
        if any(self.nonfinite):
            head += f" (NaN or infinite values: {self.nonfinite[0]} float, {self.nonfinite[1]} int8)"
        if self.unreadable is not None:
            return f"{head}; judged by relative L2 alone: the task metric cannot read {self.unreadable}"
        if self.exact_agreement is not None:
            line = (
                f"{head}, top-1 agreement {self.top1_agreement * 100:.1f}% of {self.positions} positions, "
                f"exact-sequence agreement {self.exact_agreement * 100:.1f}%"
            )
            if self.ctc_agreement is not None:
                role = "the task agreement" if self.ctc else "not the task agreement"
                line += (
                    f", CTC reading {self.ctc_agreement * 100:.1f}% (greedy CTC: argmax per step, repeats merged, "
                    f"class 0 dropped as the blank; {role}: {self.ctc_why})"
                )
            return line
        return f"{head}, top-1 agreement {self.top1_agreement * 100:.1f}%"


#: Ops whose output is features, never class scores: no task takes the argmax of a normalized hidden state.
FEATURE_OPS = frozenset({"layer_norm", "batch_norm", "instance_norm", "tanh"})
#: Ops that move values without changing what they are: an output is read through them to its maker.
_LAYOUT_OPS = frozenset({"reshape", "flatten", "transpose", "squeeze", "unsqueeze", "identity", "cast"})


def feature_outputs(graph: Graph) -> dict[str, str]:
    """The graph's outputs that hold features, not class scores, by name: why, in a few words."""
    features = {}
    for value in graph.outputs:
        maker = value.producer
        while maker is not None and maker.op in _LAYOUT_OPS and maker.inputs:
            maker = maker.inputs[0].producer
        if maker is not None and maker.op in FEATURE_OPS:
            features[value.name] = (
                f"the output of a {maker.op} (shape {list(value.type.shape)}): features, not class scores"
            )
    return features


def unreadable_reason(array: np.ndarray) -> str | None:
    """Why an output of this shape and dtype has no task agreement, or None when it has one."""
    shape = list(array.shape)
    if not np.issubdtype(array.dtype, np.floating):
        return f"a {array.dtype} output (shape {shape}): it holds decisions, not scores"
    if array.ndim < 2 or array.shape[-1] < 2:
        return f"a single value per row (shape {shape}): no classes to take the top-1 of"
    if array.ndim > 3:
        return (
            f"a rank-{array.ndim} output (shape {shape}): it reads (batch, classes) and sequences "
            "(batch, time, classes) or (time, batch, classes)"
        )
    return None


#: How a sequence output's task agreement reads it: ``auto`` (the CTC reading where the output reads as CTC),
#: ``ctc`` (always) or ``positions`` (exact-sequence agreement: every position must agree).
SEQUENCE_READINGS = ("auto", "ctc", "positions")


def _rows(classes: np.ndarray) -> np.ndarray:
    """A sample's argmax classes as (batch, time) rows: (time, batch) when its batch of one is axis 1."""
    return classes.T if classes.shape[0] != 1 and classes.shape[1] == 1 else classes


def ctc_read(classes: np.ndarray) -> list[tuple[int, ...]]:
    """Greedy CTC decoding of each row of argmax classes: repeats merged, class 0 (the blank) dropped."""
    read = []
    for row in _rows(classes):
        keep = np.ones(len(row), bool)
        keep[1:] = row[1:] != row[:-1]
        read.append(tuple(int(c) for c in row[keep & (row != 0)]))
    return read


def reads_as_ctc(float_classes: list[np.ndarray], reading: str) -> tuple[bool, str]:
    """Whether a sequence output's task agreement is its CTC reading, and why (or why not), in a few words."""
    if reading != "auto":
        return reading == "ctc", f"sequence reading {reading!r} asked for"
    counts = np.bincount(np.concatenate([c.ravel() for c in float_classes]))
    share = counts[0] / counts.sum()
    if int(np.argmax(counts)) == 0:
        return True, f"class 0 is the float argmax at {share * 100:.0f}% of positions, the most, as a CTC blank's"
    return False, f"class 0 is not the most frequent float argmax ({share * 100:.0f}% of positions): not CTC"


def compare(name: str, split: str, floats: list[np.ndarray], quantized: list[np.ndarray],
            sequence: str = "auto", feature: str | None = None) -> OutputAccuracy:  # fmt: skip
    """One output over one split; ``floats[i]`` and ``quantized[i]`` are sample i's arrays; ``sequence`` says how
    a sequence output's task agreement reads it (``SEQUENCE_READINGS``); ``feature``: why the output holds
    features (``feature_outputs``), or None."""
    f = np.concatenate([np.asarray(a, np.float64).ravel() for a in floats])
    q = np.concatenate([np.asarray(a, np.float64).ravel() for a in quantized])
    norm = np.linalg.norm(f)
    diff = q - f
    rel = float(np.linalg.norm(diff) / norm) if norm > 0 else float(np.linalg.norm(diff))
    max_abs = float(np.abs(diff).max(initial=0.0))
    nonfinite = (int(f.size - np.count_nonzero(np.isfinite(f))), int(q.size - np.count_nonzero(np.isfinite(q))))
    why = feature or unreadable_reason(np.asarray(floats[0]))
    if why is None and not f.size:  # every sample's output is empty (a batch of 0): no position to agree on
        why = f"an empty output (shape {list(np.shape(floats[0]))} in every sample): no position to agree on"
    if why is not None:
        return OutputAccuracy(name, split, len(floats), rel, max_abs, None, unreadable=why, nonfinite=nonfinite)
    float_classes = [np.argmax(a, -1) for a in floats]
    quantized_classes = [np.argmax(b, -1) for b in quantized]
    agree = [a == b for a, b in zip(float_classes, quantized_classes)]
    positions = sum(a.size for a in agree)
    top1 = float(sum(int(a.sum()) for a in agree) / positions)
    if np.asarray(floats[0]).ndim != 3:
        return OutputAccuracy(name, split, len(floats), rel, max_abs, top1, None, positions, nonfinite=nonfinite)
    exact = float(np.mean([a.all() for a in agree]))
    ctc = float(np.mean([ctc_read(a) == ctc_read(b) for a, b in zip(float_classes, quantized_classes)]))
    applies, why = reads_as_ctc(float_classes, sequence)
    return OutputAccuracy(
        name, split, len(floats), rel, max_abs, top1, exact, positions, None, ctc, applies, why, nonfinite
    )


def accuracy_report(names: list[str], floats: list[list[np.ndarray]], quantized: list[list[np.ndarray]],
                    calibrated: int, sequence: str = "auto", split: str | None = None,
                    features: dict[str, str] | None = None) -> list[OutputAccuracy]:  # fmt: skip
    """``floats[i][j]``: sample i's output j; the first ``calibrated`` samples were used for calibration.
    ``split``: one set of rows over every sample, labelled so, instead of one per split. ``features``: the
    outputs that hold features (``feature_outputs``)."""
    features = features or {}
    report = []
    parts = (
        [(split, slice(None))]
        if split
        else [("calibration", slice(0, calibrated)), ("held-back", slice(calibrated, None))]
    )
    for split, part in parts:
        f, q = floats[part], quantized[part]
        if not f:
            continue
        for j, name in enumerate(names):
            report.append(compare(name, split, [s[j] for s in f], [s[j] for s in q], sequence, features.get(name)))
    return report


@dataclass(frozen=True)
class Score:
    """One build's accuracy on one split, as one comparable value (``key``: larger is better)."""

    #: Mean task agreement over the outputs that have one (None: no output has).
    task: float | None
    top1: float | None
    relative_l2: float
    samples: int

    def key(self) -> tuple[float, float, float]:
        # outputs with a NaN rank last (a NaN in the key would leave builds unordered)
        error = self.relative_l2 if math.isfinite(self.relative_l2) else math.inf
        return (self.task if self.task is not None else 0.0, self.top1 if self.top1 is not None else 0.0,
                -error)  # fmt: skip

    @property
    def loss(self) -> float | None:
        """Points of task agreement lost (as a fraction), or None where no output has a task metric."""
        return None if self.task is None else 1.0 - self.task

    def text(self) -> str:
        rel = f"relative L2 {self.relative_l2:.4f}"
        return rel if self.task is None else f"agreement {self.task * 100:.1f}%, {rel}"


def score(accuracy: list[OutputAccuracy]) -> Score:
    """The score of one split's rows (every output of one split)."""
    tasks = [a.task_agreement for a in accuracy if a.task_agreement is not None]
    tops = [a.top1_agreement for a in accuracy if a.top1_agreement is not None]
    return Score(
        float(np.mean(tasks)) if tasks else None,
        float(np.mean(tops)) if tops else None,
        float(np.mean([a.relative_l2 for a in accuracy])),
        accuracy[0].samples if accuracy else 0,
    )


#: The split of rows measured over every sample, calibration and held-back alike (what the verdict reads).
EVERY_SAMPLE = "calibration and held-back"


def judged_split(accuracy: list[OutputAccuracy]) -> list[OutputAccuracy]:
    """The rows a verdict reads: those over every sample where given, else the held-back samples', else the
    calibration samples'."""
    for split in (EVERY_SAMPLE, "held-back", "calibration"):
        rows = [a for a in accuracy if a.split == split]
        if rows:
            return rows
    return []


def points(fraction: float) -> str:
    return f"{fraction * 100:.3g} point{'s' if round(fraction * 100, 3) != 1 else ''}"


def verdict(accuracy: list[OutputAccuracy], budget: float = DEFAULT_BUDGET) -> str:
    """One line: is the int8 build within ``budget`` (a fraction of task agreement) of the float model?"""
    rows = judged_split(accuracy)
    if not rows:
        return "int8 verdict: no samples to judge by"
    split = f"{rows[0].samples} {rows[0].split} samples"
    broken = next((a for a in rows if any(a.nonfinite)), None)
    if broken is not None:  # a NaN compares as nothing: no agreement or norm over it means anything
        float_bad, int8_bad = broken.nonfinite
        if float_bad == 0:
            return (
                f"int8 verdict: OVER the {points(budget)} budget: output {broken.output} of the int8 build holds "
                f"{int8_bad} NaN or infinite values on {split}, where the float model's holds none"
            )
        return (
            f"int8 verdict: cannot be judged: output {broken.output} of the float model itself holds {float_bad} NaN "
            f"or infinite values on {split} (the int8 build's: {int8_bad})"
        )
    result = score(rows)
    if result.loss is None:
        return (
            f"int8 verdict: no output the task metric reads; relative L2 {result.relative_l2:.4f} on {split} "
            f"(the {points(budget)} budget cannot be checked)"
        )
    word = "agreement" if len(rows) == 1 else "mean task agreement"
    within = result.loss <= budget + 1e-12
    coarsest = min((a.samples if a.exact_agreement is not None else a.positions) for a in rows if a.unreadable is None)
    unresolved = not within and result.loss <= 1.0 / coarsest + 1e-12  # one disagreement: the samples cannot tell
    state = "within" if within else "UNRESOLVED against" if unresolved else "OVER"
    line = (
        f"int8 verdict: {state} the {points(budget)} budget: {word} "
        f"{result.task * 100:.1f}% on {split} (loses {points(result.loss)})"
    )
    if 1.0 / coarsest > budget:
        line += f"; one disagreement in {coarsest} is {points(1.0 / coarsest)}: more samples resolve it"
    if not within and not unresolved:
        line += "; --accuracy-budget keeps the costliest layers float"
    return line


def budget_text(fraction: float) -> str:
    """0.01 -> '1%'."""
    return f"{fraction * 100:.3g}%"


def ceil_points(fraction: float) -> float:
    """A loss rounded up to the next tenth of a point, as a fraction (what a budget would have to allow)."""
    return math.ceil(fraction * 1000 - 1e-9) / 1000
