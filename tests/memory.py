"""Keep the test process lean (issue 19): free what tests leave behind, run the biggest models apart.

* ``release_memory()`` collects garbage cycles (a compiled graph is one: nodes and values
  point at each other, so its weight arrays outlive the last reference until the cycle
  collector runs, which a few large arrays never trigger) and hands freed heap back to
  the system (``malloc_trim``; runtime_lite's malloc settings otherwise keep up to 1 GB).
  It costs a collection only when the process has grown by ``SLACK_MIB`` since the last one.
* Tests marked ``own_process`` run in a child pytest (``run_in_own_process``): what a
  VGG-19 needs goes back to the system when the child exits, instead of setting the
  peak of the one process that runs every test.
* The peak RSS of the pytest process is reported at the end of a run, with the test that
  set it, and a run whose peak exceeds ``AOT_TEST_MAX_RSS_GB`` (default 3; 0 turns the
  check off) fails.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

SLACK_MIB = 256
CHILD_ENV = "AOT_TEST_OWN_PROCESS_REPORT"  # set in a child: where it writes its peak and outcome
LIMIT_ENV = "AOT_TEST_MAX_RSS_GB"
DEFAULT_LIMIT_GB = 3.0

_floor = [0.0]


def rss_mib() -> float:
    """This process's resident memory now."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux
        return 0.0


def peak_rss_mib() -> float:
    """The most this process has held resident so far.

    Linux: VmHWM, this program's own high-water mark. Not ru_maxrss: a child started by
    vfork + exec (as subprocess does) inherits its parent's peak in that figure.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**10
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, or bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def _malloc_trim() -> None:
    try:
        if os.confstr("CS_GNU_LIBC_VERSION"):
            ctypes.CDLL(None).malloc_trim(0)
    except (ValueError, OSError, AttributeError):
        pass


def release_memory(force: bool = False) -> None:
    """Free unreachable cycles and return free heap to the system, if the process has grown since last time."""
    if force or rss_mib() > _floor[0] + SLACK_MIB:
        gc.collect()
        _malloc_trim()
        _floor[0] = rss_mib()


def limit_gb() -> float:
    return float(os.environ.get(LIMIT_ENV, DEFAULT_LIMIT_GB) or 0)


def run_in_own_process(nodeid: str, rootdir: Path) -> dict:
    """Run one test in a child pytest; its outcome ("passed", "failed", "skipped"), report text and peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        env = {**os.environ, CHILD_ENV: str(report)}
        child = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "--no-header", "-p", "no:cacheprovider", nodeid],
            cwd=rootdir, env=env, capture_output=True, text=True,
        )  # fmt: skip
        if not report.exists():
            return {"outcome": "failed", "text": (child.stdout + child.stderr)[-5000:], "peak_mib": 0.0}
        result = json.loads(report.read_text())
    result.setdefault("outcome", "failed")
    if result["outcome"] == "failed" and not result.get("text"):
        result["text"] = (child.stdout + child.stderr)[-5000:]
    return result


def write_child_report(path: str, outcome: str, text: str) -> None:
    Path(path).write_text(json.dumps({"outcome": outcome, "text": text, "peak_mib": peak_rss_mib()}))
