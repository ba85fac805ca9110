"""Loading a bundle keeps freed memory mapped (glibc), so repeated runs stop page-faulting."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from onnx import helper

import aot
from tests.helpers import make_model, rand

GLIBC = bool(getattr(os, "confstr", None) and os.confstr("CS_GNU_LIBC_VERSION"))

FAULTS_PER_RUN = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np
    import runtime_lite
    from runtime_lite.execution import allocator
    module = runtime_lite.load(sys.argv[1])
    x = np.ones(module.inputs[0].shape, np.float32)
    for _ in range(3):
        module.run([x])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        module.run([x])
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10
    print(json.dumps({"state": allocator.keep_freed_memory(), "faults_per_run": faults}))
    """
)


@pytest.fixture(scope="module")
def chain_bundle(tmp_path_factory):
    """Twenty 2 MB intermediates: each run frees and reallocates all of them."""
    x = rand(1, 8, 256, 256)
    nodes = [helper.make_node("Sin" if i % 2 else "Cos", [f"t{i}" if i else "x"], [f"t{i + 1}"]) for i in range(20)]
    nodes.append(helper.make_node("Add", ["t20", "t10"], ["y"]))  # keeps t10 alive: no purely in-place chain
    path = tmp_path_factory.mktemp("alloc") / "chain.aotb"
    aot.build(make_model(nodes, {"x": x}, ["y"])).save(path)
    return path


def _measure(bundle, **env) -> dict:
    import json

    result = subprocess.run(
        [sys.executable, "-c", FAULTS_PER_RUN, str(bundle)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not GLIBC, reason="the allocator is tuned on glibc only")
def test_runs_after_the_first_do_not_page_fault(chain_bundle):
    measured = _measure(chain_bundle)
    assert measured["state"] == "tuned"
    # 20 fresh 2 MB arrays would be 10,000 page faults per run; reused heap memory needs none
    assert measured["faults_per_run"] < 50, measured


def test_opting_out_leaves_malloc_alone(chain_bundle):
    assert _measure(chain_bundle, RUNTIME_LITE_MALLOC="system")["state"] == "system"
