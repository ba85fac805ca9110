"""Acceptance: the nine model-zoo architectures in the onnx wheel match onnxruntime.

Two variants per architecture:

* random weights (see aot.testing.zoo): every output, probabilities and logits, within
  1e-4 relative L2 of onnxruntime. This is the meaningful check;
* the wheel's models as shipped, whose weights are all 0.02: their softmax is flat
  (or flipped by a 1-ulp difference in logits around 1e10), so only the logits are
  compared.
"""

from __future__ import annotations

import numpy as np
import pytest

import runtime_lite
from aot.compiler import build
from aot.testing import load_zoo_model, relative_l2
from aot.testing.zoo import zoo_input
from tests.helpers import build_and_load, onnxruntime_outputs, zoo_params

TOLERANCE = 1e-4


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_model_with_random_weights_matches_onnxruntime(name):
    model = load_zoo_model(name, random_weights=True, logits=True)
    feeds = zoo_input(model)
    ours = build_and_load(model).run(feeds)
    expected = onnxruntime_outputs(model, feeds, threads=2)
    assert len(ours) == len(expected)
    for a, b in zip(ours, expected):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert relative_l2(a, b) <= TOLERANCE
    assert expected[-1].std() > 1.0, "logits are degenerate; the comparison would prove nothing"


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_model_as_shipped_logits_match_onnxruntime(name):
    model = load_zoo_model(name, random_weights=False, logits=True)
    feeds = zoo_input(model)
    logits = build_and_load(model).run(feeds)[-1]
    assert relative_l2(logits, onnxruntime_outputs(model, feeds, threads=2)[-1]) <= TOLERANCE


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_model_on_the_npu_equals_the_host(name):
    """Partitioned for the NPU, every architecture computes exactly what the host-only bundle does."""
    model = load_zoo_model(name, random_weights=True, logits=True)
    feeds = zoo_input(model)
    result = build(model, targets=["npu"])
    assert result.regions["npu"] > result.regions["host"], result.regions  # most ops offloaded
    bundle = result.to_bytes()
    del result  # one build's weights at a time (tests/memory.py)
    ours = runtime_lite.load(bundle).run(feeds)
    del bundle
    host = build_and_load(model).run(feeds)
    for a, b in zip(ours, host):
        np.testing.assert_array_equal(a, b)
    expected = onnxruntime_outputs(model, feeds, threads=2)
    assert relative_l2(ours[-1], expected[-1]) <= TOLERANCE


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "inception_v2"])
def test_zoo_model_at_batch_eight_matches_onnxruntime(name):
    """The benchmarks' batch-8 variant (first dim and Reshape targets rewritten) is the same network."""
    model = load_zoo_model(name, random_weights=True, batch=8)
    feeds = zoo_input(model)
    assert next(iter(feeds.values())).shape[0] == 8
    ours = build_and_load(model).run(feeds)
    for a, b in zip(ours, onnxruntime_outputs(model, feeds)):
        assert a.shape == b.shape and relative_l2(a, b) <= TOLERANCE
