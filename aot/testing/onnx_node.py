"""ONNX's backend node tests (one operator each, ~1,900 cases) through aot and runtime_lite.

The onnx wheel ships the case generators (``onnx/backend/test/case/node``) rather than
the data files, so the cases are built in memory with ``collect_testcases``: a model
plus input and expected output arrays per data set, and onnx's own tolerances.

``by_design(case)`` is the one place that says which cases are outside what aot
compiles, and why (training ops, sequence and string types, random ops, operators
newer than opset 21, element types runtime_lite does not hold, ...). It reads only the
model, never a build, so the coverage page's list of refusals is cheap to regenerate
and compare. ``run(case)`` then builds and runs every other case and says how it went:
``pass``, ``refused`` (a clean one-line error: a gap, never a wrong number) or ``fail``
(a wrong number or a crash, which the coverage test never allows).

Attribute-like inputs (axes, pads, repeats, k, scales) are graph inputs in many node
tests; aot needs them as constants when it builds (as exporters write them), so when a
build says one must be a constant, the case is built again per data set with that
input's values baked in, and counted as passing ``with constant inputs``.
"""

from __future__ import annotations

import functools
import logging
import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import defs, numpy_helper

#: the newest opset whose operators are in scope
MAX_OPSET = 21

NEWER_OPSET = f"operator introduced after opset {MAX_OPSET}"
TRAINING = "training-only: optimisers, losses, gradients and training-mode outputs; aot compiles inference graphs"
SEQUENCES = "sequence, optional and map values: aot compiles tensor graphs only"
STRINGS = "string tensors and text processing: outside the numeric op set"
RANDOM = "random numbers: a bundle computes the same output for the same input"
CONTROL_FLOW = "loops (Loop, Scan) with subgraphs: aot compiles one static dataflow graph"
DATA_DEPENDENT = "output shape depends on the input values: the memory plan is fixed when the bundle is built"
DTYPES = "element type runtime_lite does not hold (float8, 4-bit and 2-bit ints, bfloat16, strings)"
PREVIEW = "ai.onnx.preview and preview-training domains: experimental and training operators are not compiled"
#: Domains whose ops are in scope: ONNX's own and classic ML (``ai.onnx.ml``: aot/frontend/onnx/ml_converters.py).
IN_SCOPE_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")
IMAGE = "image file decoding (ImageDecoder): input preprocessing, outside the numeric op set"

_OPS_BY_DESIGN: dict[str, str] = {
    **dict.fromkeys(
        (
            "NegativeLogLikelihoodLoss",
            "SoftmaxCrossEntropyLoss",
            "Gradient",
            "Adagrad",
            "Adam",
            "Momentum",
        ),
        TRAINING,
    ),
    **dict.fromkeys(
        (
            "SequenceAt",
            "SequenceConstruct",
            "SequenceEmpty",
            "SequenceErase",
            "SequenceInsert",
            "SequenceLength",
            "SequenceMap",
            "SplitToSequence",
            "ConcatFromSequence",
            "Optional",
            "OptionalGetElement",
            "OptionalHasElement",
        ),
        SEQUENCES,
    ),
    **dict.fromkeys(("StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch", "TfIdfVectorizer"), STRINGS),
    **dict.fromkeys(
        ("Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike"), RANDOM
    ),
    **dict.fromkeys(("Loop", "Scan"), CONTROL_FLOW),  # an If is inlined or a select (control_flow.py)
    **dict.fromkeys(("NonZero", "Unique", "Compress", "NonMaxSuppression"), DATA_DEPENDENT),
    "ImageDecoder": IMAGE,
}

_SUPPORTED_DTYPES = {
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.DOUBLE,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.INT8,
    onnx.TensorProto.INT16,
    onnx.TensorProto.INT32,
    onnx.TensorProto.INT64,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.UINT16,
    onnx.TensorProto.UINT32,
    onnx.TensorProto.UINT64,
    onnx.TensorProto.BOOL,
}


@dataclass
class Outcome:
    status: str  # "pass", "refused" or "fail"
    detail: str = ""  # the refusal's one line, or what went wrong
    constant_inputs: tuple[str, ...] = ()  # attribute-like inputs baked in as constants to build it


@functools.lru_cache(maxsize=1)
def cases() -> tuple[Any, ...]:
    """Every node test case of the installed onnx, built in memory (a few seconds, once)."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            return tuple(sorted(node.collect_testcases(""), key=lambda c: c.name))


def case(name: str) -> Any:
    by_name = {c.name: c for c in cases()}
    return by_name[name]


def _exists_at(op: str, domain: str) -> bool:
    try:
        defs.get_schema(op, MAX_OPSET, domain)
        return True
    except Exception:
        return False


def _element_types(model: onnx.ModelProto) -> set[int]:
    graph = model.graph
    types = set()
    for info in [*graph.input, *graph.output]:
        kind = info.type.WhichOneof("value")
        if kind != "tensor_type":
            types.add(-1)  # a sequence, optional or map value
        else:
            types.add(info.type.tensor_type.elem_type)
    for node in graph.node:
        for attr in node.attribute:
            if attr.name == "to" and node.op_type == "Cast":
                types.add(attr.i)
            if attr.type == onnx.AttributeProto.TENSOR:
                types.add(attr.t.data_type)
    for init in graph.initializer:
        types.add(init.data_type)
    return types


def by_design(case: Any) -> str | None:
    """Why aot does not compile this case, when that is by design; None when it is in scope."""
    model = case.model
    if any(o.domain not in IN_SCOPE_DOMAINS for o in model.opset_import) and not any(
        o.domain in ("", "ai.onnx") for o in model.opset_import
    ):
        return PREVIEW
    if case.name.startswith("test_training_dropout"):
        return TRAINING  # Dropout with training_mode=True draws a random mask
    for node in model.graph.node:
        reason = _OPS_BY_DESIGN.get(node.op_type)
        if reason:
            return reason
        if node.domain not in IN_SCOPE_DOMAINS:
            return PREVIEW
        if not _exists_at(node.op_type, node.domain):
            return NEWER_OPSET
        if node.op_type in ("BatchNormalization",) and any(a.name == "training_mode" and a.i for a in node.attribute):
            return TRAINING
    types = _element_types(model)
    if -1 in types:
        return SEQUENCES
    if types - _SUPPORTED_DTYPES - {onnx.TensorProto.UNDEFINED}:
        return STRINGS if onnx.TensorProto.STRING in types else DTYPES
    return None


def _array(value: Any) -> Any:
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value


_CONSTANT_NEEDED = re.compile(
    r"^(\w+) (?:node )?'([^']*)': (?:input '[^']*' must be a constant|scales or sizes must be)"
)


def _freeze(model: onnx.ModelProto, names: set[str], inputs: list[Any]) -> onnx.ModelProto:
    frozen = onnx.ModelProto()
    frozen.CopyFrom(model)
    graph_inputs = [i.name for i in model.graph.input]
    kept = [i for i in frozen.graph.input if i.name not in names]
    for name in names:
        frozen.graph.initializer.append(numpy_helper.from_array(np.asarray(inputs[graph_inputs.index(name)]), name))
    del frozen.graph.input[:]
    frozen.graph.input.extend(kept)
    return frozen


def _attribute_inputs(model: onnx.ModelProto, message: str) -> set[str]:
    """The graph inputs that feed the non-data inputs of the node a "must be a constant" refusal names."""
    match = _CONSTANT_NEEDED.match(message)
    if not match:
        return set()
    graph_inputs = {i.name for i in model.graph.input}
    producers = {out: node for node in model.graph.node for out in node.output}
    for node in model.graph.node:
        if node.name == match.group(2) or (not node.name and node.op_type == match.group(1)):
            first = node.input[:1] if node.op_type.endswith(_SIZED_BY_FIRST_INPUT) else []
            return _graph_inputs_behind([*first, *node.input[1:]], producers, graph_inputs)
    return set()


def _graph_inputs_behind(names: list[str], producers: dict, graph_inputs: set[str]) -> set[str]:
    """The graph inputs these values are computed from (pads from Max(Shape(x), shape): ``shape``, not x,
    since a Shape's value is known once shapes are)."""
    found, stack, seen = set(), list(names), set()
    while stack:
        name = stack.pop()
        if not name or name in seen:
            continue
        seen.add(name)
        if name in graph_inputs:
            found.add(name)
        elif name in producers and producers[name].op_type not in ("Shape", "Size"):
            stack.extend(producers[name].input)
    return found


#: ops whose first input is attribute-like too (a window's size, the number of mel bins)
_SIZED_BY_FIRST_INPUT = ("Window", "ConstantOfShape", "MelWeightMatrix")


#: Cases whose expected outputs carry float32 rounding where the exact value is 0: test_dft_inverse's
#: numbers come from numpy.fft.ifft on complex64 data (a float32 FFT), whose imaginary parts of a real
#: signal are residue up to 1.9e-7, above the case's atol of 1e-7 (onnxruntime is 1.9e-5 off). Compared
#: with an atol of one float32 step of the largest expected value instead.
_FLOAT32_FFT_RESIDUE = {"test_dft_inverse", "test_dft_inverse_opset19"}


def _compare(outputs: list[Any], expected: list[Any], case: Any, which: int) -> str | None:
    if len(outputs) != len(expected):
        return f"{len(outputs)} outputs, expected {len(expected)}"
    for k, (got, want) in enumerate(zip(outputs, expected)):
        want = np.asarray(_array(want))
        got = np.asarray(got)
        if got.shape != want.shape or got.dtype != want.dtype:
            return f"data set {which} output {k}: {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
        try:
            atol = case.atol
            if case.name in _FLOAT32_FFT_RESIDUE:
                atol = max(atol, float(np.abs(want).max(initial=0)) * 2.0**-23)
            np.testing.assert_allclose(got, want, rtol=case.rtol, atol=atol)
        except AssertionError as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            return f"data set {which} output {k}: " + "; ".join(lines[1:4])
    return None


class Refused(Exception):
    """aot refused the case: its one-line message, and the inputs baked in as constants when it gave up."""

    def __init__(self, message: str, frozen: set[str]):
        super().__init__(message)
        self.frozen = tuple(sorted(frozen))


@dataclass
class Built:
    """A case built: each data set as (bundle, the inputs that bundle takes, the expected outputs)."""

    data_sets: list[tuple[bytes, list[np.ndarray], list[Any]]]
    constant_inputs: tuple[str, ...]  # attribute-like inputs baked in (then each data set has its own bundle)


def build(case: Any) -> Built:
    """Build the case with aot as the coverage page counts it; ``Refused`` where aot refuses it."""
    import aot
    from aot.errors import AotError

    frozen: set[str] = set()
    data_sets = [([_array(x) for x in ins], outs) for ins, outs in case.data_sets]
    logging.disable(logging.WARNING)  # opsets past 21 log a warning per build
    try:
        while True:
            try:
                bundles = []
                for ins, _ in data_sets if frozen else data_sets[:1]:
                    model = _freeze(case.model, frozen, ins) if frozen else case.model
                    bundles.append(aot.build(model, log=None).to_bytes())
                break
            except AotError as e:
                more = _attribute_inputs(case.model, str(e)) - frozen
                if not more:
                    raise Refused(str(e).splitlines()[0], frozen) from None
                frozen |= more
    finally:
        logging.disable(logging.NOTSET)
    names = [i.name for i in case.model.graph.input]
    return Built(
        [
            (bundles[which if frozen else 0], [x for name, x in zip(names, ins) if name not in frozen], outs)
            for which, (ins, outs) in enumerate(data_sets)
        ],
        tuple(sorted(frozen)),
    )


def run(case: Any) -> Outcome:
    """Build the case with aot, run each data set with runtime_lite and compare at onnx's tolerances."""
    import runtime_lite

    try:
        built = build(case)
    except Refused as e:
        return Outcome("refused", str(e), e.frozen)
    except Exception as e:
        return Outcome("fail", f"build crashed: {type(e).__name__}: {str(e)[:200]}")
    for which, (bundle, feed, outs) in enumerate(built.data_sets):
        module = runtime_lite.load(bundle)
        try:
            outputs = module.run(feed)
        except Exception as e:
            return Outcome("fail", f"run crashed: {type(e).__name__}: {str(e)[:200]}")
        wrong = _compare(outputs, outs, case, which)
        if wrong:
            return Outcome("fail", f"wrong result: {wrong}")
    return Outcome("pass", "", built.constant_inputs)
