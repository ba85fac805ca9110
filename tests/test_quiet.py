"""Quiet by default (issue 37): a build prints no third-party warning known to be harmless; -v shows them."""

from __future__ import annotations

import warnings

import pytest

import aot
from aot.quiet import show_third_party_warnings
from tests.torchvision_compat import import_torchvision

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def mobilenet_program():
    """MobileNetV3-small with a symbolic batch: torch 2.13's run_decompositions warns about LeafSpec on it."""
    torchvision = import_torchvision()
    model = torchvision.models.mobilenet_v3_small(weights=None).eval()
    batch = torch.export.Dim("batch")
    return torch.export.export(model, (torch.randn(2, 3, 32, 32),), dynamic_shapes={"x": {0: batch}})


def _warnings_of_build(program) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        aot.build(program, log=None)
    return [f"{w.category.__name__}: {w.message}" for w in caught]


def test_a_torch_build_prints_no_warning_and_verbose_shows_torchs_own(mobilenet_program):
    assert _warnings_of_build(mobilenet_program) == []
    show_third_party_warnings(True)
    try:
        shown = _warnings_of_build(mobilenet_program)
    finally:
        show_third_party_warnings(False)
    assert any("LeafSpec" in w for w in shown), shown  # what the filter hides is really raised, and only that
    assert all("LeafSpec" in w for w in shown), shown
