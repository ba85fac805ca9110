"""The test suite's own memory discipline (tests/memory.py): cycles freed, big tests in their own process."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np
import pytest

from tests import memory

ROOT = Path(__file__).resolve().parents[1]
ON_PURPOSE = "AOT_TEST_FAIL_ON_PURPOSE"


class _Node:
    """Points at itself, as a compiled graph's nodes and values do."""

    def __init__(self, data: np.ndarray):
        self.data = data
        self.me = self


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm (Linux)")
def test_release_memory_frees_the_weights_a_dropped_cycle_holds():
    memory.release_memory(force=True)
    before = memory.rss_mib()
    enabled = gc.isenabled()
    gc.disable()  # what the test process sees: a few big arrays never trigger the collector
    try:
        node = _Node(np.ones((memory.SLACK_MIB + 128) << 18, np.float32))  # SLACK + 128 MiB
        del node
        assert memory.rss_mib() > before + memory.SLACK_MIB  # unreachable, still resident
        memory.release_memory()
        assert memory.rss_mib() < before + 64
    finally:
        if enabled:
            gc.enable()


@pytest.mark.own_process
def test_a_test_marked_own_process_runs_in_a_child_pytest():
    assert os.environ.get(memory.CHILD_ENV), "ran in the parent"
    assert memory.peak_rss_mib() > 0


@pytest.mark.skipif(not os.environ.get(ON_PURPOSE), reason="run by the test below, in a child")
def test_fails_on_purpose():
    raise AssertionError("failed on purpose")


def test_a_child_reports_its_failure_and_its_skip(monkeypatch):
    nodeid = "tests/test_memory.py::test_fails_on_purpose"
    skipped = memory.run_in_own_process(nodeid, ROOT)
    assert skipped["outcome"] == "skipped" and "run by the test below" in skipped["text"], skipped
    monkeypatch.setenv(ON_PURPOSE, "1")
    failed = memory.run_in_own_process(nodeid, ROOT)
    assert failed["outcome"] == "failed" and "failed on purpose" in failed["text"], failed
    assert failed["peak_mib"] > 0
