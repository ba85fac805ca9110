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

Before the shape, how the graph makes an output decides (``output_readings``): a concat of
regressions and sigmoid scores along a channel axis (a YOLO head) reads as a detector: its
detections at ``DETECTION_THRESHOLD`` (an anchor whose best class score is above it, with that
class), judged by the F1 of int8's detections against float's, so a detection lost because its
score fell below the threshold costs what a detector's user sees it cost; the score channels'
relative L2, the int8/float confidence ratio and the boxes' relative L2 on the matched
detections stand beside;
a recurrent state (an LSTM's or GRU's, or an output fed back as an input of the same shape)
is judged by relative L2 alone and left out of the score while another output is there; a
single sigmoid probability per row reads as a binary decision at 0.5; element-wise sigmoids
(through layout ops, slices and concats of them) with more than one value per row are a
multi-label map (basic-pitch's note / onset / contour maps [batch, frames, pitches]), read as
per-element decisions at 0.5 and judged by the F1 of int8's positives against float's (the
negatives dominate such a map: any build agrees on nearly every element), by relative L2
where float has no positive in the samples. Where no output has a task metric, the verdict
holds relative L2 to ``RELATIVE_L2_THRESHOLD``.

The verdict, the method ``auto`` keeps and the layers the budget keeps float are judged on
every sample, calibration and held-back together: a budget of one point needs a hundred
samples to resolve, and 16 held-back ones cannot tell a loss of one line in six from
none, while the ranges of a few hundred tensors hardly fit the samples they were taken
from (the report's two splits show it where they do).

The **task agreement** of an output is its top-1 agreement for a classifier; for a
multi-label map, the F1 of its positives; for a detector's head, the F1 of its detections; for a
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
import os
from dataclasses import dataclass

import numpy as np

from aot.errors import BuildError
from aot.ir.graph import Graph, Node, Value

#: The budget a verdict is given against when the build sets none: one point of agreement.
DEFAULT_BUDGET = 0.01


@dataclass(frozen=True)
class Detections:
    """A detector's head over one split, at ``DETECTION_THRESHOLD`` (``_detector_agreement``)."""

    #: Anchors over every sample of the split.
    anchors: int
    #: Anchors whose best class score is above the threshold: float's, int8's, and both's with the same class.
    floats: int
    int8: int
    matched: int
    #: Mean over float's detections of int8's score of float's class over float's (0.5: confidences halved).
    confidence: float
    #: The score channels' relative L2 and the box channels', over every anchor, each against its own norm.
    score_l2: float
    box_l2: float
    #: The box channels' relative L2 on the matched detections (None where none matched).
    matched_box_l2: float | None

    @property
    def f1(self) -> float | None:
        """2 x matched / (float's + int8's), None where float detects nothing (no detection to match)."""
        return 2.0 * self.matched / (self.floats + self.int8) if self.floats else None


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
    #: A recurrent or carried state (``Reading.state``): left out of the score while another output is there.
    state: bool = False
    #: For a detector's head: its layout in a few words; its task agreement is then the F1 of int8's detections
    #: against float's at ``DETECTION_THRESHOLD`` (``positives_f1``, ``positions`` the float detections), and
    #: ``detections`` says the rest.
    detector: str | None = None
    #: For a detector's head: the relative L2 of its other (box) channels on the detections both find alike.
    box_l2: float | None = None
    #: For a detector's head: what its detections and channels did (also where float found no detection).
    detections: Detections | None = None
    #: For a single probability per row: the top-1 agreement is then the decision's (above 0.5 or not).
    decision: bool = False
    #: For a multi-label map (element-wise sigmoids, more than one per row): the F1 of int8's positives (above 0.5)
    #: against float's, the task agreement; the top-1 agreement is then the share of elements whose decision agrees,
    #: ``positions`` the float positives (the F1's resolution), ``positives`` (float's, int8's) and ``elements``.
    positives_f1: float | None = None
    positives: tuple[int, int] = (0, 0)
    elements: int = 0

    @property
    def judged_l2(self) -> float:
        """The relative L2 a score ranks by (``Score.relative_l2``): the output's; for a detector's head read as
        one, the worse of its box channels' and its score channels', each against its own norm (box values up to
        the image's size swamp scores in [0, 1]: 0.04 over NudeNet's whole head where its scores moved 0.43)."""
        if self.detections is not None and self.unreadable is None:
            return max(self.detections.box_l2, self.detections.score_l2)
        return self.relative_l2

    @property
    def task_agreement(self) -> float | None:
        if self.positives_f1 is not None:
            return self.positives_f1
        if self.ctc:
            return self.ctc_agreement
        return self.exact_agreement if self.exact_agreement is not None else self.top1_agreement

    @property
    def classifier(self) -> bool:
        """Read as plain class scores (top-1 agreement): none of the other readings applies."""
        return self.unreadable is None and self.detector is None and not self.decision and \
            self.positives_f1 is None and self.exact_agreement is None  # fmt: skip

    def resolution(self) -> int:
        """N where one disagreement costs 1/N of the task agreement: the samples of a sequence (one string), the
        positions otherwise; for a multi-label map, 2P - 1 of P float positives (one missed: F1 2(P-1)/(2P-1))."""
        if self.positives_f1 is not None:
            return max(1, 2 * self.positions - 1)
        return self.samples if self.exact_agreement is not None else self.positions

    def judged_as(self) -> str:
        """How this output was judged, and why, in a few words (the report's ``judgement`` line)."""
        if self.unreadable is not None:
            why = self.unreadable.split(" (shape")[0]
            left = ", left out of the verdict" if self.state else ""
            return f"{self.output} by relative L2 alone{left} ({why})"
        if self.detector is not None:
            return (
                f"{self.output} as a detector's head (F1 of int8's detections against float's, an anchor detecting "
                f"its best class where that class scores above {DETECTION_THRESHOLD:g})"
            )
        if self.decision:
            return f"{self.output} as a binary decision (a sigmoid's probability above {DECISION:g} or not)"
        if self.positives_f1 is not None:
            return f"{self.output} as multi-label decisions at {DECISION:g} (F1 of int8's positives against float's)"
        if self.exact_agreement is not None:
            reading = "CTC reading" if self.ctc else "exact-sequence agreement"
            return f"{self.output} as a sequence ({reading})"
        return f"{self.output} as a classifier (top-1 agreement)"

    def line(self) -> str:
        head = (
            f"accuracy {self.output} ({self.split}, {self.samples} samples): relative L2 {self.relative_l2:.4f}, "
            f"max abs {self.max_abs:.4g}"
        )
        if any(self.nonfinite):
            head += f" (NaN or infinite values: {self.nonfinite[0]} float, {self.nonfinite[1]} int8)"
        if self.unreadable is not None:
            left = ", left out of the verdict while another output is there" if self.state else ""
            return f"{head}; judged by relative L2 alone{left}: the task metric cannot read {self.unreadable}"
        if self.detector is not None:
            d = self.detections
            boxes = (
                f"box relative L2 {self.box_l2:.4f} on the {d.matched} matched"
                if self.box_l2 is not None
                else "no matched detection to compare boxes on"
            )
            return (
                f"{head}; read as a detector's head ({self.detector}): detection F1 {self.positives_f1 * 100:.1f}% "
                f"at best score {DETECTION_THRESHOLD:g} (the task agreement; {d.floats} float and {d.int8} int8 "
                f"detections of {d.anchors} anchors, {d.matched} in both with the same class), int8's score of "
                f"float's class {d.confidence:.2f}x float's on float's detections, score channels' relative L2 "
                f"{d.score_l2:.4f}, box channels' {d.box_l2:.4f}, {boxes}"
            )
        if self.decision:
            return (
                f"{head}; read as a binary decision (a sigmoid's probability, one per row): decision agreement "
                f"{self.top1_agreement * 100:.1f}% of {self.positions} rows at {DECISION:g} (the task agreement)"
            )
        if self.positives_f1 is not None:
            return (
                f"{head}; read as multi-label decisions at {DECISION:g} (element-wise sigmoids, several per row): F1 "
                f"of int8's positives against float's {self.positives_f1 * 100:.1f}% (the task agreement; "
                f"{self.positives[0]} float and {self.positives[1]} int8 positives of {self.elements} elements), "
                f"decision agreement {self.top1_agreement * 100:.3f}% of elements (negatives dominate it)"
            )
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
#: Ops whose output is a score in [0, 1] per channel: a detector head's class scores.
_SCORE_OPS = frozenset({"sigmoid", "softmax", "hard_sigmoid"})
#: A detector's head is judged by its detections at this score: an anchor detects its best class where that
#: class's score is above it, as YOLO post-processing keeps boxes (Ultralytics' default confidence for predictions
#: is 0.25; NudeNet keeps 0.2 and up). A working threshold, not a low one: the best class of anchors near 0.05
#: holds on NudeNet's int8 builds while their confidences halve, and lost detections are what a user sees
#: (6 at 0.2 in float on 80 images, 1 in int8, with the best class of every anchor above 0.05 kept).
DETECTION_THRESHOLD = 0.25
#: What the verdict holds the relative L2 to where no output has a task metric: about int8's own error on a
#: CNN (1 to 6%: docs/quantization.md, "Measured"), which no task agreement can replace.
RELATIVE_L2_THRESHOLD = 0.05
#: Where a single probability per row decides (a binary classifier's, a voice activity detector's).
DECISION = 0.5
#: The words that tell a carried state's output name from its input's (state/stateN, h0/hn, h_in/h_out).
_STATE_MARKS = frozenset(
    {"", "n", "in", "out", "new", "next", "prev", "previous", "old", "last", "init", "initial", "final", "cur",
     "current", "updated", "t"}
)  # fmt: skip
_SEPARATORS = "_.-:/ "


@dataclass(frozen=True)
class Reading:
    """What the graph says about how one output reads (``output_readings``)."""

    #: Why the task metric cannot read it (features, a recurrent or carried state), or None.
    unreadable: str | None = None
    #: A recurrent or carried state: judged by relative L2 alone, and left out of the score (and so the verdict)
    #: while another output is there: its error shows in the next step's outputs, what the task reads.
    state: bool = False
    #: A detector's head: (the axis of its channels, the indices of its class scores along it).
    detector: tuple[int, tuple[int, ...]] | None = None
    #: A probability (a sigmoid's, or a mean of them): a single one per row reads as a binary decision at 0.5.
    probability: bool = False
    #: Element-wise sigmoids (through layout ops, slices and concats of them): more than one per row read as
    #: multi-label decisions at 0.5, judged by the F1 of int8's positives against float's.
    multilabel: bool = False


def _maker(value: Value, through: frozenset[str] = _LAYOUT_OPS) -> Node | None:
    maker = value.producer
    while maker is not None and maker.op in through and maker.inputs:
        maker = maker.inputs[0].producer
    return maker


def _is_gate(value: Value) -> bool:
    """A sigmoid gate, or one minus it (a GRU's 1 - z)."""
    maker = value.producer
    if maker is None:
        return False
    if maker.op in ("sigmoid", "hard_sigmoid"):
        return True
    return maker.op == "subtract" and maker.inputs[0].is_constant and _is_gate(maker.inputs[1])


def _gated(value: Value) -> bool:
    """A product with a sigmoid gate (a recurrent cell's term), or a difference holding one."""
    maker = value.producer
    if maker is None:
        return False
    if maker.op == "multiply":
        return any(_is_gate(v) for v in maker.inputs)
    return maker.op == "subtract" and any(_gated(v) for v in maker.inputs)


def _recurrent_state(value: Value) -> str | None:
    """Which recurrent state ``value`` is, through layout ops and a concat of states (directions, layers), or
    None: a ``recurrent`` op's state outputs, or the state of an unrolled LSTM or GRU cell (h = o * tanh(c);
    c = f * c + i * g; a GRU's h = (1 - z) * n + z * h), every term a product with a sigmoid gate."""
    while value.producer is not None and value.producer.op in _LAYOUT_OPS and value.producer.inputs:
        value = value.producer.inputs[0]
    maker = value.producer
    if maker is None:
        return None
    if maker.op == "recurrent":
        if value is maker.outputs[0]:
            return None  # the sequence of hidden states: rank 4, and read as such
        return f"the state of an {maker.attrs.get('kind', 'recurrent').upper()} layer"
    if maker.op == "concat":
        parts = [_recurrent_state(v) for v in maker.inputs if not v.is_constant]
        if not parts or not all(parts):
            return None
        kinds = list(dict.fromkeys(parts))
        return kinds[0] if len(kinds) == 1 else " and ".join(kinds)
    inputs = [v for v in maker.inputs if not v.is_constant]
    if maker.op == "multiply" and len(inputs) == 2:
        ops = {v.producer.op if v.producer is not None else None for v in inputs}
        if "tanh" in ops and any(_is_gate(v) for v in inputs):
            return "an LSTM cell's hidden state (a sigmoid gate times a tanh)"
    if maker.op == "add" and len(inputs) == 2 and all(_gated(v) for v in inputs):
        return "a recurrent cell's state (a sum of sigmoid-gated terms, as an LSTM's cell or a GRU's hidden state)"
    return None


def _carried_pair(output: str, input: str) -> bool:
    """Whether ``output`` names the next value of ``input`` (state/stateN, h0/hn, h_in/h_out, in_state/out_state):
    the two names differ only in a mark (``_STATE_MARKS``, or digits) at their start or end."""
    a, b = output.lower(), input.lower()
    if a == b:
        return False
    p = len(os.path.commonprefix([a, b]))
    # the shared start ends where a word does (h_new / h_next share "h_", not "h_ne")
    while 0 < p < min(len(a), len(b)) and a[p - 1] not in _SEPARATORS:
        p -= 1
    if p == 0:
        p = len(os.path.commonprefix([a, b]))
    s = len(os.path.commonprefix([a[p:][::-1], b[p:][::-1]]))
    rest_a, rest_b = a[p : len(a) - s], b[p : len(b) - s]
    core = a[:p] + a[len(a) - s :]
    if not any(c.isalpha() for c in core):
        return False
    for name, rest in ((output, rest_a), (input, rest_b)):
        if rest.strip(_SEPARATORS) not in _STATE_MARKS and not rest.strip(_SEPARATORS).isdigit():
            return False
        end = p + len(rest)  # where the shared end begins: a mark before it must stand apart (not in/out+put)
        if s and rest and name[end] not in _SEPARATORS and not name[end].isupper() and rest[-1] not in _SEPARATORS:
            return False
    return True


def _sigmoid_map(value: Value) -> bool:
    """Whether every element of ``value`` is its own sigmoid's: a sigmoid's output through layout ops, slices and
    splits, or a concat of such (not a mean or any op that mixes elements)."""
    maker = value.producer
    if maker is None or not maker.inputs:
        return False
    if maker.op in ("sigmoid", "hard_sigmoid"):
        return True
    if maker.op in _LAYOUT_OPS or maker.op in ("slice", "split"):
        return _sigmoid_map(maker.inputs[0])
    if maker.op == "concat":
        parts = [v for v in maker.inputs if not v.is_constant]
        return bool(parts) and all(_sigmoid_map(v) for v in parts)
    return False


def _detector_head(value: Value) -> tuple[int, tuple[int, ...]] | None:
    """(channel axis, class score indices) where ``value`` is a concat, along a channel axis, of regressions and
    scores (a sigmoid's or softmax's), as a YOLO head's (boxes, sigmoid(class scores)) -> [batch, 4 + C, anchors];
    through transposes, identities and casts. None otherwise."""
    transposes = []
    maker = value.producer
    while maker is not None and maker.op in ("transpose", "identity", "cast") and maker.inputs:
        if maker.op == "transpose":
            transposes.append(list(maker.attrs["perm"]))
        maker = maker.inputs[0].producer
    if maker is None or maker.op != "concat" or len(maker.inputs) < 2:
        return None
    rank = maker.outputs[0].type.rank
    axis = maker.attrs["axis"] % rank
    scores, at, kinds = [], 0, set()
    for part in maker.inputs:
        size = part.type.shape[axis]
        if not isinstance(size, int):
            return None
        made = _maker(part, _LAYOUT_OPS | {"slice", "split"})
        score = made is not None and made.op in _SCORE_OPS and not part.is_constant
        kinds.add(score)
        if score:
            scores.extend(range(at, at + size))
        at += size
    if kinds != {True, False} or rank < 2 or (rank > 2 and axis == 0):
        return None
    for perm in reversed(transposes):  # the concat's axis where the output has it
        axis = perm.index(axis)
    return axis, tuple(scores)


def output_readings(graph: Graph) -> dict[str, Reading]:
    """How each of the graph's outputs reads, by name, where its maker or its layout says more than its shape:
    features (a layer norm's, a batch norm's, a tanh's), an embedding (divided by its norm), a recurrent state (an LSTM's or GRU's, or an output fed
    back: named as an input of the same shape is, plus a mark), a detector's head. Outputs not named read by shape."""
    readings = {}
    for value in graph.outputs:
        shape = list(value.type.shape)
        state = _recurrent_state(value)
        if state is None:
            fed = next(
                (i for i in graph.inputs if list(i.type.shape) == shape and _carried_pair(value.name, i.name)), None
            )
            if fed is not None:
                state = f"fed back as input {fed.name!r} (the same shape, the name of its next value)"
        if state is not None:
            why = f"a carried state (shape {shape}): {state}, not class scores; its error shows in the next step"
            readings[value.name] = Reading(why, state=True)
            continue
        maker = _maker(value)
        if maker is not None and maker.op in FEATURE_OPS:
            readings[value.name] = Reading(f"the output of a {maker.op} (shape {shape}): features, not class scores")
            continue
        head = _detector_head(value)
        if head is not None:
            readings[value.name] = Reading(detector=head)
            continue
        if _normalized(value):
            readings[value.name] = Reading(
                f"an embedding (shape {shape}): divided by its own norm, read by its direction (relative L2 of unit "
                "vectors: sqrt(2 - 2 cos)), not as class scores"
            )
            continue
        if _sigmoid_map(value):  # one probability per row a decision, several a multi-label map (``compare``)
            readings[value.name] = Reading(probability=True, multilabel=True)
            continue
        made = _maker(value, _LAYOUT_OPS | {"reduce_mean"})  # a mean of probabilities is one
        if made is not None and made.op in ("sigmoid", "hard_sigmoid"):
            readings[value.name] = Reading(probability=True)
    _regression_heads(graph, readings)
    return readings


#: Ops a norm passes through on its way to the divide: the guard against 0 (F.normalize's clamp, LpNormalization's
#: where), a broadcast, an epsilon added.
_NORM_GUARDS = frozenset({"maximum", "clip", "where", "expand", "add"}) | _LAYOUT_OPS


def _normalized(value: Value) -> bool:
    """Whether ``value`` is a tensor divided by its own L2 or L1 norm (F.normalize, LpNormalization, x / sqrt(sum
    x^2)): an embedding, compared by cosine or distance. resemblyzer's speaker embedding read as 256 classes "lost"
    6.25 points where its relative L2 was 0.031."""
    maker = _maker(value)
    if maker is None or maker.op != "divide" or len(maker.inputs) != 2:
        return False
    norm = maker.inputs[1].producer
    while norm is not None and norm.op in _NORM_GUARDS:
        moving = [v for v in norm.inputs if v is not None and not v.is_constant]
        norm = moving[-1].producer if moving else None  # where(zero, 1, norm): the norm is the last
    if norm is not None and norm.op == "sqrt":
        norm = norm.inputs[0].producer
    return norm is not None and norm.op == "reduce_sum"


#: Ops whose output is scores a task thresholds or takes the argmax of (not logits: those come from a dense op).
_SCORE_MAKERS = _SCORE_OPS | {"log_softmax"}


def _regression_heads(graph: Graph, readings: dict[str, Reading]) -> None:
    """Outputs beside a head of scores (a softmax's or a sigmoid's) that a dense op makes with no activation of
    their own read as regressions: a face detector's (prob, boxes, landmarks), an SSD's (scores, boxes). Had they
    been class scores, the model would have given them the activation it gave their sibling; their argmax is
    noise (ONet's five landmarks read as classes lost 2 points that their cosine of 0.9999 says int8 never lost)."""
    makers = [(v, _maker(v)) for v in graph.outputs]
    scores = [(v.name, m.op) for v, m in makers if m is not None and m.op in _SCORE_MAKERS]
    if not scores:
        return
    sibling, op = scores[0]
    for value, maker in makers:
        if value.name in readings or maker is None or maker.op in _SCORE_MAKERS:
            continue
        readings[value.name] = Reading(
            f"a regression head (shape {list(value.type.shape)}): beside {sibling!r}, the scores of a {op}, it holds "
            "values, not class scores"
        )


#: How ``--output-reading NAME=KIND`` (``QuantizeConfig.output_readings``) says an output reads.
OUTPUT_READINGS = ("classes", "values")


def with_user_readings(graph: Graph, readings: dict[str, Reading], given: dict[str, str]) -> dict[str, Reading]:
    """``readings`` with the user's word on some outputs: ``values`` (judged by relative L2 alone: regressions,
    scores, embeddings the graph cannot tell from class scores, as a speech-quality model's three MOS values) or
    ``classes`` (top-1 agreement, whatever the graph suggested). BuildError naming an output the graph lacks."""
    shapes = {v.name: list(v.type.shape) for v in graph.outputs}
    readings = dict(readings)
    for name, kind in given.items():
        if name not in shapes:
            raise BuildError(f"--output-reading {name}={kind}: the model has no output {name!r} "
                             f"(its outputs: {', '.join(shapes)})")  # fmt: skip
        if kind == "values":
            readings[name] = Reading(
                f"values, as --output-reading {name}=values says (shape {shapes[name]}), not class scores"
            )
        else:
            readings.pop(name, None)
    return readings


def feature_outputs(graph: Graph) -> dict[str, str]:
    """The graph's outputs the task metric cannot read by their maker (features, states), by name: why."""
    return {name: r.unreadable for name, r in output_readings(graph).items() if r.unreadable is not None}


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


def _relative(diff: float, norm: float) -> float:
    return math.sqrt(diff / norm) if norm > 0 else math.sqrt(diff)


def _detector_agreement(floats: list[np.ndarray], quantized: list[np.ndarray], axis: int, scores: tuple[int, ...]
                        ) -> tuple[Detections, int]:  # fmt: skip
    """A detector's head at ``DETECTION_THRESHOLD`` over the samples, and its channels. An anchor detects its best
    class where that class scores above the threshold (float's and int8's each); a detection is kept where both
    detect at an anchor with the same class: a score that falls below the threshold loses it, one that rises
    above adds one, and either costs the F1."""
    anchors = floats_found = int8_found = matched = 0
    ratios: list[np.ndarray] = []
    sums = dict.fromkeys(("score_diff", "score_norm", "box_diff", "box_norm", "match_diff", "match_norm"), 0.0)
    channels = 0
    idx = np.asarray(scores)
    for f, q in zip(floats, quantized):
        f = np.moveaxis(np.asarray(f, np.float64), axis, -1)
        q = np.moveaxis(np.asarray(q, np.float64), axis, -1)
        channels = f.shape[-1]
        f, q = f.reshape(-1, channels), q.reshape(-1, channels)
        boxes = np.setdiff1d(np.arange(channels), idx)
        fs, qs = f[:, idx], q[:, idx]
        f_best, q_best = fs.max(1, initial=-np.inf), qs.max(1, initial=-np.inf)
        f_class, q_class = fs.argmax(1), qs.argmax(1)
        f_found, q_found = f_best > DETECTION_THRESHOLD, q_best > DETECTION_THRESHOLD
        both = f_found & q_found & (f_class == q_class)
        anchors += len(f)
        floats_found += int(f_found.sum())
        int8_found += int(q_found.sum())
        matched += int(both.sum())
        if f_found.any():
            kept = qs[f_found, f_class[f_found]]
            ratios.append(kept / f_best[f_found])
        sums["score_diff"] += float(np.square(qs - fs).sum())
        sums["score_norm"] += float(np.square(fs).sum())
        sums["box_diff"] += float(np.square(q[:, boxes] - f[:, boxes]).sum())
        sums["box_norm"] += float(np.square(f[:, boxes]).sum())
        sums["match_diff"] += float(np.square(q[both][:, boxes] - f[both][:, boxes]).sum())
        sums["match_norm"] += float(np.square(f[both][:, boxes]).sum())
    confidence = float(np.mean(np.concatenate(ratios))) if ratios else 1.0
    detections = Detections(
        anchors, floats_found, int8_found, matched, confidence,
        _relative(sums["score_diff"], sums["score_norm"]), _relative(sums["box_diff"], sums["box_norm"]),
        _relative(sums["match_diff"], sums["match_norm"]) if matched else None,
    )  # fmt: skip
    return detections, channels


def compare(name: str, split: str, floats: list[np.ndarray], quantized: list[np.ndarray],
            sequence: str = "auto", reading: Reading | str | None = None) -> OutputAccuracy:  # fmt: skip
    """One output over one split; ``floats[i]`` and ``quantized[i]`` are sample i's arrays; ``sequence`` says how
    a sequence output's task agreement reads it (``SEQUENCE_READINGS``); ``reading``: what the graph says about
    the output (``output_readings``; a string: why it holds features), or None."""
    if isinstance(reading, str):
        reading = Reading(reading)
    reading = reading or Reading()
    f = np.concatenate([np.asarray(a, np.float64).ravel() for a in floats])
    q = np.concatenate([np.asarray(a, np.float64).ravel() for a in quantized])
    norm = np.linalg.norm(f)
    diff = q - f
    rel = float(np.linalg.norm(diff) / norm) if norm > 0 else float(np.linalg.norm(diff))
    max_abs = float(np.abs(diff).max(initial=0.0))
    nonfinite = (int(f.size - np.count_nonzero(np.isfinite(f))), int(q.size - np.count_nonzero(np.isfinite(q))))
    why = reading.unreadable or unreadable_reason(np.asarray(floats[0]))
    if why is None and not f.size:  # every sample's output is empty (a batch of 0): no position to agree on
        why = f"an empty output (shape {list(np.shape(floats[0]))} in every sample): no position to agree on"
    if reading.detector is not None and reading.unreadable is None and f.size:
        axis, scores = reading.detector
        found, channels = _detector_agreement(floats, quantized, axis, scores)
        shape = list(np.shape(floats[0]))
        layout = f"{channels - len(scores)} box and {len(scores)} class score channels along axis {axis} of {shape}"
        if found.f1 is None:
            why = (
                f"a detector's head ({layout}) with no anchor whose float best score is above "
                f"{DETECTION_THRESHOLD:g} in these {len(floats)} samples ({found.int8} int8 detections of "
                f"{found.anchors} anchors; score channels' relative L2 {found.score_l2:.4f}): no detection to match"
            )
            return OutputAccuracy(name, split, len(floats), rel, max_abs, None, unreadable=why, nonfinite=nonfinite,
                                  detections=found)  # fmt: skip
        return OutputAccuracy(name, split, len(floats), rel, max_abs, None, None, found.floats, nonfinite=nonfinite,
                              detector=layout, box_l2=found.matched_box_l2, detections=found,
                              positives_f1=found.f1, positives=(found.floats, found.int8),
                              elements=found.anchors)  # fmt: skip
    single = np.asarray(floats[0]).ndim < 2 or np.asarray(floats[0]).shape[-1] == 1
    if reading.probability and reading.unreadable is None and single and f.size:
        agree = float(np.mean((f > DECISION) == (q > DECISION)))
        return OutputAccuracy(name, split, len(floats), rel, max_abs, agree, None, f.size, nonfinite=nonfinite,
                              decision=True)  # fmt: skip
    if reading.multilabel and reading.unreadable is None and not single and f.size:
        f1, agree, positives = multilabel_f1(f, q)
        shape = list(np.shape(floats[0]))
        if f1 is None:
            why = (
                f"a multi-label map (element-wise sigmoids, shape {shape}) with no float positive above {DECISION:g} "
                f"in these {len(floats)} samples ({positives[1]} int8 positives of {f.size} elements): no positive "
                "set to match"
            )
            return OutputAccuracy(name, split, len(floats), rel, max_abs, None, unreadable=why, nonfinite=nonfinite)
        return OutputAccuracy(name, split, len(floats), rel, max_abs, agree, None, positives[0], nonfinite=nonfinite,
                              positives_f1=f1, positives=positives, elements=f.size)  # fmt: skip
    if why is not None:
        return OutputAccuracy(name, split, len(floats), rel, max_abs, None, unreadable=why, nonfinite=nonfinite,
                              state=reading.state)  # fmt: skip
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


def multilabel_f1(floats: np.ndarray, quantized: np.ndarray) -> tuple[float | None, float, tuple[int, int]]:
    """Multi-label decisions at ``DECISION``: (F1 of int8's positives against float's, or None where float has none;
    the share of elements whose decision agrees; (float positives, int8 positives)). The F1 and not the share:
    negatives dominate a multi-label map (a few notes of 88 sound at once), and would make any build look perfect."""
    f = np.asarray(floats).ravel() > DECISION
    q = np.asarray(quantized).ravel() > DECISION
    agree = float(np.mean(f == q)) if f.size else 1.0
    positives = (int(f.sum()), int(q.sum()))
    if not positives[0]:
        return None, agree, positives
    both = int(np.count_nonzero(f & q))
    return 2.0 * both / (positives[0] + positives[1]), agree, positives


def accuracy_report(names: list[str], floats: list[list[np.ndarray]], quantized: list[list[np.ndarray]],
                    calibrated: int, sequence: str = "auto", split: str | None = None,
                    readings: dict[str, Reading] | None = None) -> list[OutputAccuracy]:  # fmt: skip
    """``floats[i][j]``: sample i's output j; the first ``calibrated`` samples were used for calibration.
    ``split``: one set of rows over every sample, labelled so, instead of one per split. ``readings``: what the
    graph says about how outputs read (``output_readings``)."""
    readings = readings or {}
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
            report.append(compare(name, split, [s[j] for s in f], [s[j] for s in q], sequence, readings.get(name)))
    return report


@dataclass(frozen=True)
class Score:
    """One build's accuracy on one split, as one comparable value (``key``: larger is better)."""

    #: Mean task agreement over the outputs that have one (None: no output has).
    task: float | None
    top1: float | None
    #: The mean of the outputs' ``OutputAccuracy.judged_l2``: a detector's head's is its channel groups' worse.
    relative_l2: float
    samples: int
    #: What ``relative_l2`` measures, in words (``l2_text``).
    l2_label: str = "relative L2"

    def l2_text(self) -> str:
        return f"{self.l2_label} {self.relative_l2:.4f}"

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
        rel = self.l2_text()
        return rel if self.task is None else f"agreement {self.task * 100:.1f}%, {rel}"


def score(accuracy: list[OutputAccuracy]) -> Score:
    """The score of one split's rows (every output of one split); a carried state counts only where every output
    is one (its error shows in the next step's outputs, which the task reads)."""
    accuracy = [a for a in accuracy if not a.state] or accuracy
    tasks = [a.task_agreement for a in accuracy if a.task_agreement is not None]
    tops = [a.top1_agreement for a in accuracy if a.top1_agreement is not None]
    channels = any(a.detections is not None and a.unreadable is None for a in accuracy)
    return Score(
        float(np.mean(tasks)) if tasks else None,
        float(np.mean(tops)) if tops else None,
        float(np.mean([a.judged_l2 for a in accuracy])),
        accuracy[0].samples if accuracy else 0,
        "box/score relative L2" if channels else "relative L2",
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


def points(fraction: float | None) -> str:
    if fraction is None:  # no loss to count (Score.loss where the task metric read nothing): never "None * 100"
        return "an unknown number of points (the task metric could not read these samples)"
    return f"{fraction * 100:.3g} point{'s' if round(fraction * 100, 3) != 1 else ''}"


def verdict(accuracy: list[OutputAccuracy], budget: float = DEFAULT_BUDGET) -> str:
    """One line: is the int8 build within ``budget`` (a fraction of task agreement) of the float model?"""
    rows = judged_split(accuracy)
    if not rows:
        return "int8 verdict: no samples to judge by"
    split = f"{rows[0].samples} {rows[0].split} sample{'s' if rows[0].samples != 1 else ''}"
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
        judged = [a.output for a in rows if not a.state] or [a.output for a in rows]
        within = result.relative_l2 <= RELATIVE_L2_THRESHOLD
        return (
            f"int8 verdict: no output the task metric reads, judged by relative L2 against "
            f"{RELATIVE_L2_THRESHOLD:g}: {'within' if within else 'OVER'}, relative L2 {result.relative_l2:.4f} "
            f"({', '.join(judged)}) on {split} (the {points(budget)} budget reads task agreement and cannot be checked)"
        )
    tasks = [a for a in rows if a.task_agreement is not None]
    word = "agreement" if len(tasks) == 1 else "mean task agreement"
    detail = ""
    if len(tasks) == 1 and tasks[0].detections is not None:  # what a detector's F1 counted, and of how many
        d = tasks[0].detections
        word = f"detection F1 at score {DETECTION_THRESHOLD:g}"
        detail = (
            f"{d.floats} float and {d.int8} int8 detections of {d.anchors} anchors, {d.matched} alike; int8 "
            f"confidence {d.confidence:.2f}x float's; "
        )
    within = result.loss <= budget + 1e-12
    coarsest = min(a.resolution() for a in rows if a.unreadable is None)
    unresolved = not within and result.loss <= 1.0 / coarsest + 1e-12  # one disagreement: the samples cannot tell
    state = "within" if within else "UNRESOLVED against" if unresolved else "OVER"
    line = (
        f"int8 verdict: {state} the {points(budget)} budget: {word} "
        f"{result.task * 100:.1f}% on {split} ({detail}loses {points(result.loss)})"
    )
    if 1.0 / coarsest > budget:
        line += f"; one disagreement in {coarsest} is {points(1.0 / coarsest)}: more samples resolve it"
    if not within and not unresolved:
        line += "; --accuracy-budget keeps the costliest layers float"
        line += _values_hint(rows, budget)
    return line


def _values_hint(rows: list[OutputAccuracy], budget: float) -> str:
    """Where an output read as class scores lost the budget by its argmax while its values hardly moved, it may hold
    values, not class scores (a regression's, a score's): the way to say so."""
    moved = [
        a for a in rows
        if a.classifier and a.relative_l2 <= RELATIVE_L2_THRESHOLD
        and a.task_agreement is not None and 1.0 - a.task_agreement > budget
    ]  # fmt: skip
    if not moved:
        return ""
    names = ", ".join(f"{a.output} (relative L2 {a.relative_l2:.4f})" for a in moved)
    flags = " ".join(f"--output-reading {a.output}=values" for a in moved)
    return (
        f"; {names} moved little while its argmax changed: if it holds values (a regression, scores), not class "
        f"scores, {flags} judges it by relative L2"
    )


def judgement(accuracy: list[OutputAccuracy]) -> str:
    """One line: which outputs the verdict judged how, and why."""
    rows = judged_split(accuracy)
    return "int8 judged: " + "; ".join(a.judged_as() for a in rows)


def budget_text(fraction: float) -> str:
    """0.01 -> '1%'."""
    return f"{fraction * 100:.3g}%"


def ceil_points(fraction: float) -> float:
    """A loss rounded up to the next tenth of a point, as a fraction (what a budget would have to allow)."""
    return math.ceil(fraction * 1000 - 1e-9) / 1000
