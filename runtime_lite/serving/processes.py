"""The processes a ``serve`` command leaves behind: adopt them while serving, end them when it stops.

A local Ray instance is a tree of processes (GCS, raylet, its agents, workers, and the
HAProxy that a worker spawns). ``ray.shutdown()`` ends the ones it started itself, but
a grandchild whose parent dies first (a raylet's DashboardAgent and RuntimeEnvAgent, a
worker's HAProxy) is re-parented to init and keeps running. Marking the command a
child subreaper makes such orphans its children instead, so that after Ray's own
shutdown every process still below it can be found by parentage and ended. Linux
only (``/proc`` and ``prctl``); elsewhere these are no-ops and Ray's shutdown is all.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36


def adopt_orphans() -> bool:
    """Make orphaned descendants this process's children (``PR_SET_CHILD_SUBREAPER``); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after its last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(pid: int | None = None) -> list[int]:
    """Every living process below ``pid`` (default: this one), zombies excluded."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found, stack = [], list(children.get(root, []))
    while stack:
        current = stack.pop()
        if _alive(current):
            found.append(current)
        stack.extend(children.get(current, []))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X")


def command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace") or f"pid {pid}"
    except OSError:
        return f"pid {pid}"


def end_descendants(grace_s: float = 2.0) -> list[str]:
    """SIGTERM every process still below this one, SIGKILL those alive after ``grace_s``; reap our children.

    Returns the command names of the processes that had to be ended (nothing, after a clean shutdown).
    """
    if not sys.platform.startswith("linux"):
        return []
    ended = []
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 1.0)):
        pids = descendants()
        if not pids:
            break
        for pid in pids:
            if sig == signal.SIGTERM:
                ended.append(command_name(pid))
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and descendants():
            _reap()
            time.sleep(0.05)
    _reap()
    return ended


def _reap() -> None:
    """Collect exited children (adopted orphans included), so none lingers as a zombie."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
