"""Every core ATen op against eager PyTorch, on samples from PyTorch's own OpInfo database.

The op list comes from the installed torch (``torch.Tag.core``), so an op a torch upgrade
adds is run here too. Each sample is exported, read at core-ATen level (torch's
decompositions minus the op under test), built and run: float32 twice (static, then
symbolic dims), int64 once where the op takes it. A converted op must match
(relative L2 at most 1e-5, integers and bools exact) on at least one sample and never
give a wrong number; a sample may be refused with a one-line error (an unsupported
argument), as every sample of an op without a converter must be.
``benchmarks/op_coverage.py --aten`` runs more samples per op.
"""

from __future__ import annotations

import warnings

import pytest

from aot.testing import aten_coverage

OPS = [op for op in aten_coverage.core_ops() if aten_coverage.status(op) != "by design"]
PER_DTYPE = {"float32": 2, "int64": 1}  # bool too in benchmarks/op_coverage.py --aten


@pytest.mark.parametrize("op", OPS)
def test_core_op_matches_pytorch_or_is_refused(op):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = aten_coverage.sweep(op, PER_DTYPE, tries=3)
    wrong = [f"{dtype}: {r.detail}" for dtype, r in results if r.status == "fail"]
    assert not wrong, wrong
    for _, r in results:
        if r.status == "refused":
            assert r.detail and "\n" not in r.detail
    if aten_coverage.status(op) == "converted" and results:
        assert any(r.status == "pass" for _, r in results), [f"{d}: {r.status} {r.detail}" for d, r in results]
    if aten_coverage.status(op) == "missing":
        assert all(r.status == "refused" for _, r in results)
