"""ONNX's own backend conformance cases, shipped inside the onnx wheel, as a checklist for aot.

Each case under ``onnx/backend/test/data/{pytorch-converted,pytorch-operator,simple}``
is a ``model.onnx`` plus ``test_data_set_*/{input,output}_N.pb``. ``run_case``
compiles the model with aot, runs the bundle with runtime_lite and compares with the
expected outputs at onnx's own backend-test tolerances. ``OUT_OF_SCOPE`` is the one
place that says which cases aot does not take, and why: each reason is a kind of
model outside the canonical op set, never a wrong result.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

SUITES = ("pytorch-converted", "pytorch-operator", "simple")

#: onnx's backend test runner compares with these tolerances (onnx/backend/test/runner).
RTOL, ATOL = 1e-3, 1e-7

_SEQUENCES = "sequence-typed values (Sequence* ops): aot compiles tensor graphs only"
_STRINGS = "string tensors (StringNormalizer): text preprocessing is outside the numeric op set"
_TRAINING = "training-only op (ai.onnx.preview.training.Gradient): aot compiles inference graphs"

#: case -> why it is outside what aot compiles (each must fail to build with that op named).
OUT_OF_SCOPE: dict[str, str] = {
    **{f"simple/test_sequence_model{i}": _SEQUENCES for i in range(1, 9)},
    **{
        f"simple/test_strnorm_model_{name}": _STRINGS
        for name in (
            "monday_casesensintive_lower",
            "monday_casesensintive_nochangecase",
            "monday_casesensintive_upper",
            "monday_empty_output",
            "monday_insensintive_upper_twodim",
            "nostopwords_nochangecase",
        )
    },
    "simple/test_gradient_of_add": _TRAINING,
    "simple/test_gradient_of_add_and_mul": _TRAINING,
}


def data_root() -> Path:
    return Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data"


def case_names() -> list[str]:
    """Every case of the three suites, as ``suite/test_name``."""
    root = data_root()
    return [f"{suite}/{case.name}" for suite in SUITES for case in sorted((root / suite).iterdir()) if case.is_dir()]


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    data_sets: list[tuple[list[np.ndarray], list[np.ndarray]]]  # (inputs, expected outputs) per data set


def _numbered(directory: Path, prefix: str) -> list[np.ndarray]:
    files = sorted(directory.glob(f"{prefix}_*.pb"), key=lambda p: int(re.findall(r"\d+", p.stem)[-1]))
    return [numpy_helper.to_array(onnx.load_tensor(str(f))) for f in files]


def load_case(name: str) -> Case:
    directory = data_root() / name
    sets = sorted(directory.glob("test_data_set_*"))
    return Case(
        name,
        onnx.load(str(directory / "model.onnx")),
        [(_numbered(s, "input"), _numbered(s, "output")) for s in sets],
    )


def run_case(name: str, targets: tuple[str, ...] = ("host",)) -> None:
    """Compile, run every data set and compare; raises AssertionError on a wrong result."""
    import aot
    import runtime_lite

    case = load_case(name)
    module = runtime_lite.load(aot.build(case.model, targets=targets).to_bytes())
    for i, (inputs, expected) in enumerate(case.data_sets):
        outputs = module.run(inputs)
        assert len(outputs) == len(expected), f"{name}: {len(outputs)} outputs, expected {len(expected)}"
        for k, (got, want) in enumerate(zip(outputs, expected)):
            # assert_allclose's strict=True, written out: numpy < 2.0 (aot declares 1.24) has no such keyword
            where = f"{name} data set {i} output {k}"
            assert (got.shape, got.dtype) == (want.shape, want.dtype), (
                f"{where}: {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
            )
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=where)
