"""onnx's backend conformance cases (pytorch-converted, pytorch-operator, simple) through aot and runtime_lite.

Every case either matches onnx's expected outputs at onnx's tolerances, or is listed
in ``aot.testing.conformance.OUT_OF_SCOPE`` with its reason, and then must still fail
to build with a clear UnsupportedOpsError (so the list can never hide a case that
started to work, or one that fails for another reason).
"""

from __future__ import annotations

import pytest

from aot.errors import UnsupportedOpsError
from aot.testing.conformance import OUT_OF_SCOPE, case_names, load_case, run_case

CASES = case_names()
SUPPORTED = [c for c in CASES if c not in OUT_OF_SCOPE]


def test_the_suites_are_all_there():
    assert len(CASES) >= 140
    assert set(OUT_OF_SCOPE) <= set(CASES), sorted(set(OUT_OF_SCOPE) - set(CASES))


@pytest.mark.parametrize("name", SUPPORTED)
def test_case_matches_onnx_expected_outputs(name):
    run_case(name)


@pytest.mark.parametrize("name", sorted(OUT_OF_SCOPE))
def test_out_of_scope_case_is_refused_with_the_op_named(name):
    import aot

    with pytest.raises(UnsupportedOpsError) as info:
        aot.build(load_case(name).model)
    assert "\n" not in str(info.value)
    assert "unsupported ops" in str(info.value)


@pytest.mark.parametrize("name", [c for c in SUPPORTED if "Conv" in c or "Pool" in c or "BatchNorm" in c])
def test_npu_partitioned_case_matches_too(name):
    run_case(name, targets=("npu", "host"))
