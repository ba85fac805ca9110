"""Concurrency and crash safety: shared modules under load, and aot-build killed mid-write."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from onnx import helper

import runtime_lite
from aot.compiler import build
from tests.conftest import small_cnn_model
from tests.helpers import make_model

THREADS, RUNS = 16, 1000


def test_sixteen_threads_times_a_thousand_runs_match_single_threaded():
    """One NPU-partitioned Module, 16 threads, 1,000 runs each, every input different."""
    module = runtime_lite.load(build(small_cnn_model(1, 13), targets=["npu"]).to_bytes())
    assert module.modules  # host plan and NPU regions both under load
    rng = np.random.default_rng(0)
    inputs = rng.standard_normal((64, 1, 3, 8, 8)).astype(np.float32)
    expected = [module.run([x])[0] for x in inputs]

    def work(thread: int) -> int:
        mismatches = 0
        for k in range(RUNS):
            i = (thread * 7 + k) % len(inputs)
            mismatches += not np.array_equal(module.run([inputs[i]])[0], expected[i])
        return mismatches

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        assert sum(pool.map(work, range(THREADS))) == 0


def test_killed_builds_never_leave_a_bundle_that_loads_wrong(tmp_path):
    """SIGKILL aot-build at random moments: the output is absent, or complete and correct."""
    weights = np.random.default_rng(1).standard_normal((2048, 4096)).astype(np.float32)  # 32 MB to write
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": np.zeros((1, 2048), np.float32)}, ["y"], {"w": weights}
    )
    source = tmp_path / "big.onnx"
    source.write_bytes(model.SerializeToString())
    target = tmp_path / "big.aotb"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "aot.cli.build", str(source), "-o", str(target), "-q"], check=True)
    full = time.perf_counter() - start
    reference = target.read_bytes()  # builds are byte-identical, so any complete bundle equals this one
    x = np.ones((1, 2048), np.float32)
    np.testing.assert_allclose(runtime_lite.load(reference).run([x])[0], x @ weights, rtol=1e-4)
    rng = random.Random(0)
    outcomes = {"absent": 0, "complete": 0}
    for _ in range(12):
        target.unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, "-m", "aot.cli.build", str(source), "-o", str(target), "-q"])
        time.sleep(rng.uniform(0.3, 1.0) * full)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if target.exists():
            assert target.read_bytes() == reference  # all or nothing
            outcomes["complete"] += 1
        else:
            outcomes["absent"] += 1
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in ("big.onnx", "big.aotb")]
    # A kill between write and rename leaves only a dot-temporary file, which never loads as the bundle.
    assert all(name.startswith(".big.aotb.") and name.endswith(".tmp") for name in leftovers), leftovers
    assert outcomes["absent"] > 0, outcomes  # some kills landed before the rename
