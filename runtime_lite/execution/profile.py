"""What one profiled run did: every host instruction and every backend dispatch, timed.

Plan-level events (``module`` is None) are the host's instructions and its
``call_module`` calls; backend events (``module`` = a region id) are the
dispatches inside a call, with whatever the backend records (for the NPU: engine,
memory tiers, tiles, fusion, estimated cycles). Each event has ``start_s`` (on
``time.perf_counter``'s clock) and ``wall_s``.

A profile exports as JSON (``to_json``) and as a Chrome trace (``to_chrome_trace``),
the format ``chrome://tracing``, Perfetto (ui.perfetto.dev) and onnxruntime's
``enable_profiling`` share, so a run can be looked at on a timeline.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Chrome trace rows: the host plan first, then one row per backend, in this order when present.
_PLAN_ROW = "plan"
_TIMING_KEYS = ("start_s", "wall_s")


@dataclass(frozen=True)
class OpSummary:
    """Time spent in one kind of plan step: an op on the host, or the calls of one backend's regions."""

    backend: str
    op: str
    count: int
    total_s: float
    share: float  # of the profile's total

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "op": self.op,
            "count": self.count,
            "total_ms": self.total_s * 1e3,
            "share": self.share,
        }


def _jsonable(value: Any) -> Any:
    """Event fields as JSON: numpy scalars become numbers; anything else unknown becomes its text."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _step_name(event: dict[str, Any]) -> str:
    """What an event did, for a timeline: the host op, or the ops a dispatch fused."""
    if event.get("op") == "call_module":
        return f"{event['backend']} region {event['node']}"
    return event.get("op") or "+".join(event.get("ops", [])) or event.get("composite") or event["node"]


@dataclass
class Profile:
    """A profiled run: its outputs, and one event per plan instruction and backend call."""

    outputs: list[np.ndarray]
    events: list[dict[str, Any]]

    @property
    def plan_events(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("module") is None]

    @property
    def dispatches(self) -> list[dict[str, Any]]:
        """Events recorded by backends, one per dispatch, in execution order."""
        return [e for e in self.events if e.get("module") is not None]

    @property
    def total_s(self) -> float:
        return sum(e["wall_s"] for e in self.plan_events)

    def seconds_by_backend(self) -> dict[str, float]:
        totals: dict[str, float] = defaultdict(float)
        for e in self.plan_events:
            totals[e["backend"]] += e["wall_s"]
        return dict(totals)

    def op_summary(self) -> list[OpSummary]:
        """Plan steps grouped by (backend, op type), slowest first; shares add up to 1.

        A backend's region calls are one row (op ``call_module``): what happens
        inside them is in ``dispatches``, which the shares do not count twice.
        """
        counts: dict[tuple[str, str], int] = defaultdict(int)
        seconds: dict[tuple[str, str], float] = defaultdict(float)
        for e in self.plan_events:
            key = (e["backend"], e.get("op", "?"))
            counts[key] += 1
            seconds[key] += e["wall_s"]
        total = self.total_s or 1.0
        rows = [OpSummary(b, op, counts[b, op], s, s / total) for (b, op), s in seconds.items()]
        return sorted(rows, key=lambda r: (-r.total_s, r.backend, r.op))

    def to_dict(self) -> dict[str, Any]:
        """Totals, the per-op summary and every event (times in ms), ready for ``json.dumps``."""
        events = []
        for e in self.events:
            record = {k: _jsonable(v) for k, v in e.items() if k not in _TIMING_KEYS}
            record["wall_ms"] = e["wall_s"] * 1e3
            events.append(record)
        return {
            "total_ms": self.total_s * 1e3,
            "by_backend_ms": {b: s * 1e3 for b, s in self.seconds_by_backend().items()},
            "summary": [row.to_dict() for row in self.op_summary()],
            "events": events,
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_chrome_trace(self) -> dict[str, Any]:
        """The run as a Chrome trace: one complete ("X") event per instruction and per dispatch.

        Times are microseconds from the first event's start. The host plan is one row
        (``tid`` 1); each backend's dispatches are a row of their own under their
        region's ``call_module`` event, with the backend's record (cycles, engine,
        tiers, tiles, fusion) as ``args``.
        """
        rows = {_PLAN_ROW: 1}
        for e in self.dispatches:
            rows.setdefault(e["backend"], len(rows) + 1)
        starts = [e["start_s"] for e in self.events if "start_s" in e]
        origin = min(starts) if starts else 0.0
        cursor: dict[int, float] = defaultdict(float)  # a backend that records no start: laid end to end
        trace: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "runtime_lite"}}
        ]
        for name, tid in rows.items():
            label = "host plan" if name == _PLAN_ROW else f"{name} dispatches"
            trace.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": label}})
        for e in self.events:
            tid = rows[_PLAN_ROW] if e.get("module") is None else rows[e["backend"]]
            start = (e["start_s"] - origin) * 1e6 if "start_s" in e else cursor[tid]
            duration = e["wall_s"] * 1e6
            cursor[tid] = start + duration
            args = {k: _jsonable(v) for k, v in e.items() if k not in _TIMING_KEYS}
            trace.append(
                {"name": _step_name(e), "cat": e["backend"], "ph": "X", "ts": start, "dur": duration,
                 "pid": 1, "tid": tid, "args": args}
            )  # fmt: skip
        return {"traceEvents": trace, "displayTimeUnit": "ms"}

    def write_chrome_trace(self, path: str | os.PathLike[str]) -> int:
        """Write ``to_chrome_trace()`` to ``path``, all or nothing; returns the bytes written."""
        from runtime_lite.files import atomic_write

        data = json.dumps(self.to_chrome_trace()).encode()
        return atomic_write(path, lambda out: out.write(data))

    def summary_lines(self) -> list[str]:
        """The per-op summary as a table."""
        lines = [f"{'backend':<9} {'op':<24} {'count':>6} {'total ms':>10} {'share':>7}"]
        for row in self.op_summary():
            lines.append(
                f"{row.backend:<9} {row.op:<24.24} {row.count:>6} {row.total_s * 1e3:>10.3f} {row.share:>7.1%}"
            )
        return lines

    def __str__(self) -> str:
        lines = [f"{'backend':<8} {'node':<28} {'what':<28} {'engine':<10} {'cycles':>10} {'ms':>8}"]
        for e in self.events:
            what = "+".join(e.get("ops", [])) or e.get("op", "")
            lines.append(
                f"{e['backend']:<8} {str(e.get('module') or '') + ' ' + e['node']:<28.28} {what:<28.28} "
                f"{e.get('engine', ''):<10} {e.get('cycles', ''):>10} {e['wall_s'] * 1e3:8.3f}"
            )
        totals = ", ".join(f"{b} {s * 1e3:.2f} ms" for b, s in self.seconds_by_backend().items())
        lines.append(f"total {self.total_s * 1e3:.2f} ms ({totals})")
        return "\n".join(lines)
