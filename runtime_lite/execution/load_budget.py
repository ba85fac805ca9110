"""The work a load may do, bounded by the bundle's size: the run budgets' counterpart for ``load``.

A run is held to ``max_memory`` and ``max_run_seconds``; a load did whatever the bundle
asked. A 4 MiB bundle holding a 200,000-node Relu chain as an onnxruntime recipe took
10 s in the recipe check and 83 s (1.2 GB) in load and first run, most of it onnxruntime
building a session node by node. What a load does grows with the graph nodes it hands
an engine, so those are bounded by what the bundle weighs: at most one node per
``BYTES_PER_NODE`` bytes of the bundle (a recipe's weights are most of a real model:
ResNet-50 holds ~800 KB per node, a BERT ~250 KB, MobileNetV3-small ~50 KB), and never
fewer than ``MIN_NODES``, so small and test models load as they are. The budget is the
bundle's, shared by every recipe in it; a recipe over it is a one-line BundleError
naming the field, refused while it is parsed, before onnxruntime sees it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from runtime_lite.errors import BundleError

#: A bundle may hand engines one graph node per this many of its bytes ...
BYTES_PER_NODE = 1024
#: ... and at least this many nodes, however small it is.
MIN_NODES = 10_000


@dataclass
class LoadBudget:
    """Graph nodes the load of one bundle of ``bundle_bytes`` may still hand an engine."""

    bundle_bytes: int
    used: int = 0

    @property
    def limit(self) -> int:
        return max(MIN_NODES, self.bundle_bytes // BYTES_PER_NODE)

    def left(self) -> int:
        return self.limit - self.used

    def charge(self, nodes: int, where: str) -> None:
        """Count ``nodes`` more; BundleError naming ``where`` when the bundle's budget is spent."""
        self.used += nodes
        if self.used > self.limit:
            raise BundleError(refusal(where, self.limit, self.bundle_bytes))


def refusal(where: str, limit: int, bundle_bytes: int) -> str:
    return (
        f"bundle field '{where}': more graph nodes than a {bundle_bytes:,}-byte bundle may load "
        f"({limit:,}: one per {BYTES_PER_NODE} bytes, at least {MIN_NODES:,})"
    )


_ACTIVE: contextvars.ContextVar[LoadBudget | None] = contextvars.ContextVar("runtime_lite_load_budget", default=None)


def current_load_budget() -> LoadBudget | None:
    """The budget of the load in progress in this thread; None outside a load (a build checking a recipe)."""
    return _ACTIVE.get()


@contextmanager
def loading(bundle_bytes: int) -> Iterator[LoadBudget]:
    """Everything in the block is one load of a bundle of ``bundle_bytes``."""
    budget = LoadBudget(bundle_bytes)
    token = _ACTIVE.set(budget)
    try:
        yield budget
    finally:
        _ACTIVE.reset(token)
