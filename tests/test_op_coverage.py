"""docs/coverage.md agrees with the code, and no official test case gets a wrong number.

The page is regenerated in full (the core ATen lists from the installed torch and the
converter table, every in-scope ONNX node test built and run: ~15 s) and compared with
the file, so a converter added, a refusal reason changed, a case that started or
stopped passing, or a torch or onnx upgrade that adds ops fails here until
``python benchmarks/op_coverage.py --write`` is run and the diff reviewed.
"""

from __future__ import annotations

import difflib

import pytest

from aot.testing import aten_coverage, coverage_page, onnx_node


@pytest.fixture(scope="module")
def outcomes():
    return coverage_page.onnx_outcomes()


def test_the_page_is_what_the_code_gives(outcomes):
    page = coverage_page.render(outcomes)
    written = coverage_page.PAGE.read_text()
    diff = "\n".join(difflib.unified_diff(written.splitlines(), page.splitlines(), "docs/coverage.md", "now", n=0))
    assert page == written, f"run python benchmarks/op_coverage.py --write:\n{diff[:3000]}"


def test_no_onnx_node_test_gives_a_wrong_result_or_crashes(outcomes):
    failed = {name: detail for name, (status, detail, _) in outcomes.items() if status == "fail"}
    assert not failed, failed


def test_every_onnx_refusal_is_one_line_naming_what(outcomes):
    for name, (status, detail, _) in outcomes.items():
        if status == "refused":
            assert detail and "\n" not in detail, name


def test_the_suites_are_there():
    assert len(onnx_node.cases()) >= 1500
    assert len(aten_coverage.core_ops()) >= 150


def test_by_design_lists_only_core_ops_without_converters():
    """A stale entry (an op torch dropped, or one that gained a converter) is an error, not a silent row."""
    core = set(aten_coverage.core_ops())
    for op in aten_coverage.BY_DESIGN:
        assert op in core, f"{op} is not a core ATen op of this torch"
        assert aten_coverage.status(op) == "by design", f"{op} has a converter and a by-design refusal"


def test_a_by_design_case_is_refused_when_built():
    """By-design cases are not run; the classification must still agree with the compiler."""
    import aot
    from aot.errors import AotError

    by_name = {c.name: c for c in onnx_node.cases()}
    for name in ("test_adam", "test_sequence_insert_at_back", "test_bernoulli", "test_loop11", "test_nonzero_example"):
        assert onnx_node.by_design(by_name[name])
        with pytest.raises(AotError):
            aot.build(by_name[name].model, log=None)


@pytest.mark.parametrize("targets", [("npu", "host"), ("tensorrt", "host")], ids=["npu", "tensorrt"])
def test_the_new_converters_partition_and_match(targets):
    """GroupNorm, F.interpolate and grid_sample (the gaps issue 28 named) between convolutions: the backends
    take what their patterns know, the host the rest, and the bundle matches PyTorch."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    import aot
    import runtime_lite

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.norm = torch.nn.GroupNorm(4, 8)
            self.head = torch.nn.Conv2d(8, 4, 1)

        def forward(self, x, grid):
            y = torch.relu(self.norm(self.conv(x)))
            y = F.interpolate(y, scale_factor=2, mode="bilinear") + F.interpolate(y, size=(16, 16), mode="nearest")
            return self.head(F.grid_sample(y, grid, align_corners=False))

    torch.manual_seed(0)
    model = Net().eval()
    x, grid = torch.randn(1, 3, 8, 8), torch.rand(1, 12, 12, 2) * 2.2 - 1.1
    with torch.no_grad():
        expected = model(x, grid).numpy()
    result = aot.build(torch.export.export(model, (x, grid)), targets=targets, log=None)
    assert result.regions.get(targets[0], 0) > 0, result.regions
    actual = runtime_lite.load(result.to_bytes()).run([x.numpy(), grid.numpy()])[0]
    assert np.linalg.norm(actual - expected) / np.linalg.norm(expected) <= 1e-5
