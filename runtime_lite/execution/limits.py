"""What one run may cost, whatever the bundle asks for.

A bundle of two kilobytes can ask for gigabytes: ``tile``, ``expand``, ``pad`` or
``constant_of_shape`` grow a tensor from a few attribute values, and broadcasting
or a matmul multiplies two small inputs into a large output. So a run has budgets
the caller sets at load (``load(..., max_memory=..., max_run_seconds=...)``):

* ``max_memory``: the live activations of a run plus what the next kernel call
  will allocate (its outputs and scratch) may not exceed it. Every kernel declares
  a ``cost`` computed from its operands' shapes and dtypes
  (runtime_lite/kernels/cost.py); the host plan checks it before each call, so the
  refusal comes before the memory is touched, whatever kernel a bundle names. A
  backend's own plan runs within what the host run has left. Kernels with
  intermediate steps also ask ``check_allocation`` before each step, and the
  executor adds up what each instruction produced and stops the run as soon as
  the live total is over.
* ``max_run_seconds``: checked between instructions, so a run stops at most one
  kernel after its deadline (a kernel itself is not interrupted).

Both end the run with ``ExecutionError`` naming the instruction and the figure.
The limit kernels read travels in a context variable, set for the duration of a
run, so kernels keep their plain signatures and threads do not share it.
"""

from __future__ import annotations

import contextvars
import functools
import math
import os
import time
from dataclasses import dataclass

#: Default for ``max_memory``: 4 GiB of activations, or ``$RUNTIME_LITE_MAX_MEMORY`` bytes.
DEFAULT_MAX_MEMORY = 4 << 30


class BudgetExceeded(MemoryError):
    """A kernel was about to allocate more than the run's budget allows."""


def _default_max_memory() -> int:
    text = os.environ.get("RUNTIME_LITE_MAX_MEMORY", "").strip()
    try:
        return int(text) if text else DEFAULT_MAX_MEMORY
    except ValueError:
        return DEFAULT_MAX_MEMORY


@dataclass(frozen=True)
class ActiveBudget:
    """The budget of the run in progress in this thread: bytes, and a deadline on ``time.monotonic``."""

    max_memory: int
    deadline: float | None = None


_ACTIVE: contextvars.ContextVar[ActiveBudget] = contextvars.ContextVar(
    "runtime_lite_budget",
    default=ActiveBudget(_default_max_memory()),  # noqa: B039 - frozen
)


def current_budget() -> ActiveBudget:
    """The budget of this thread's run (outside a run: the default, no deadline)."""
    return _ACTIVE.get()


def enter_budget(budget: ActiveBudget) -> contextvars.Token:
    """Run what follows in this thread under ``budget`` until ``RunLimits.reset(token)`` (a backend's
    plan inside a run gets what the run has left)."""
    return _ACTIVE.set(budget)


def check_allocation(shape, dtype_or_itemsize, what: str) -> None:
    """Raise BudgetExceeded if an array of ``shape`` would be larger than the current run allows."""
    itemsize = dtype_or_itemsize if isinstance(dtype_or_itemsize, int) else dtype_or_itemsize.itemsize
    nbytes = math.prod(map(int, shape)) * itemsize
    limit = _ACTIVE.get().max_memory
    if nbytes > limit:
        raise BudgetExceeded(
            f"{what} would allocate {nbytes:,} bytes {list(shape)}, more than max_memory = {limit:,} bytes"
        )


@dataclass(frozen=True)
class RunLimits:
    """The budgets of every run of one Module (``load`` keywords)."""

    max_memory: int = DEFAULT_MAX_MEMORY
    max_run_seconds: float | None = None

    @classmethod
    def from_options(cls, max_memory: int | None = None, max_run_seconds: float | None = None) -> RunLimits:
        memory = _default_max_memory() if max_memory is None else max_memory
        if isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0:
            raise ValueError(f"max_memory must be a positive number of bytes, got {max_memory!r}")
        if max_run_seconds is not None and not (
            isinstance(max_run_seconds, (int, float)) and 0 < max_run_seconds < float("inf")
        ):
            raise ValueError(f"max_run_seconds must be a positive number of seconds, got {max_run_seconds!r}")
        return cls(memory, max_run_seconds)

    def activate(self) -> contextvars.Token:
        """Start a run under these limits in this thread (the deadline counts from now), until ``reset``."""
        if self.max_run_seconds is None:
            return _ACTIVE.set(self._without_deadline)
        return _ACTIVE.set(ActiveBudget(self.max_memory, time.monotonic() + self.max_run_seconds))

    @functools.cached_property
    def _without_deadline(self) -> ActiveBudget:
        """The budget of every run when there is no deadline: made once (a frozen dataclass costs ~0.4 us to make)."""
        return ActiveBudget(self.max_memory)

    @staticmethod
    def reset(token: contextvars.Token) -> None:
        _ACTIVE.reset(token)


__all__ = [
    "DEFAULT_MAX_MEMORY",
    "ActiveBudget",
    "BudgetExceeded",
    "RunLimits",
    "check_allocation",
    "current_budget",
    "enter_budget",
]
