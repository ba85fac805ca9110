"""What one profiled run did: every host instruction and every backend dispatch, timed.

Plan-level events (``module`` is None) are the host's instructions and its
``call_module`` calls; backend events (``module`` = a region id) are the
dispatches inside a call, with whatever the backend records (for the NPU: engine,
memory tiers, tiles, fusion, estimated cycles).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Profile:
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
