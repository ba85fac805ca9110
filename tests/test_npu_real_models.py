"""The NPU on real-weight OCR networks from a pip package: few regions, the host plan's numbers.

PaddleOCR's PP-OCRv4 detector and recognizer and its orientation classifier
(tests/ocr_data.py) are what issue 42 measured at 30-48 backend calls: hard-swish,
hard-sigmoid, squeeze-excite means, resizes, transposed convolutions, layer norms and
the recognizer's reshapes/transposes/slices all stayed on the host. With shapes pinned
each must now run as at most a handful of NPU calls (one each today), within 1e-5
relative L2 of the host plan.
"""

from __future__ import annotations

import numpy as np
import pytest

import aot
import runtime_lite
from aot.testing import relative_l2
from tests.ocr_data import model_path, text_lines, text_page

CASES = {"det": (1, 3, 96, 160), "rec": (1, 3, 48, 320), "cls": (1, 3, 48, 192)}


def _input(kind: str, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "det":
        return text_page(shape[2], shape[3], seed=3)
    return text_lines(1, seed=5, width=shape[3])[0][1]


@pytest.mark.parametrize("kind", sorted(CASES))
def test_real_ocr_networks_run_as_few_npu_calls_with_the_host_plans_numbers(kind):
    shape = CASES[kind]
    path = str(model_path(kind))
    pinned = {"x": shape}
    npu = aot.build(path, targets=["npu"], input_shapes=pinned, log=None)
    host = runtime_lite.load(aot.build(path, input_shapes=pinned, log=None).to_bytes())
    module = runtime_lite.load(npu.to_bytes())
    x = _input(kind, shape)
    profile = module.profile({"x": x})
    calls = [e for e in profile.plan_events if e.get("backend") == "npu"]
    left = sorted({e.get("op", "?") for e in profile.plan_events if e.get("backend") not in ("npu", None)})
    assert 1 <= len(calls) <= 5, f"{kind}: {len(calls)} NPU calls; on the host: {left}"
    assert relative_l2(profile.outputs[0], host.run({"x": x})[0]) <= 1e-5


@pytest.mark.parametrize("kind", ["cls", "rec"])
def test_real_ocr_networks_at_int8_are_one_region_bit_exact_to_the_integer_reference(kind):
    """Calibrated on rendered lines: every integer kernel the NPU ran is replayed by tests/int8_reference.py."""
    import collections

    from tests import int8_reference

    shape = CASES[kind]
    samples = [{"x": image} for _, image in text_lines(8, seed=11, width=shape[3])]
    config = aot.QuantizeConfig(samples, holdout=0.25, method="minmax", report=False)
    result = aot.build(str(model_path(kind)), targets=["npu"], input_shapes={"x": shape}, quantize=config, log=None)
    assert len(result.partitioned.regions) == 1
    kinds = collections.Counter(c.name for c in result.partitioned.composites)
    integer = sum(n for k, n in kinds.items() if k.startswith("npu.int8_"))
    assert integer > 10, kinds
    checked, _ = int8_reference.replay_npu_int8(result.to_bytes(), [samples[-1]["x"]])
    assert checked == integer
