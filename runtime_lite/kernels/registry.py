"""The kernel registry: each kernel module registers its functions here as it is imported.

Kept apart from ``runtime_lite.kernels`` (which imports every kernel module to fill it)
so that a kernel module never imports its own package: the package depends on the
modules, the modules on this registry, and nothing goes round in a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


def _no_cost(*operands, **attrs) -> int:
    return 0


@dataclass(frozen=True)
class Kernel:
    """A host kernel and what the plan must know of it before it runs: aliasing, attribute checks, memory."""

    name: str
    fn: Callable[..., np.ndarray | tuple[np.ndarray, ...]]
    inplace: tuple[int, ...] = ()
    view: bool = False
    check: Callable[[dict], None] | None = None
    #: Bytes a call will allocate, outputs and scratch, from the operands' shapes (runtime_lite/kernels/cost.py).
    cost: Callable[..., int] = _no_cost
    #: How many results a call returns: a number, or a function of the attributes (split: one per size).
    outputs: int | Callable[[dict], int] = 1

    def result_count(self, attrs: dict) -> int:
        return self.outputs(attrs) if callable(self.outputs) else self.outputs


KERNELS: dict[str, Kernel] = {}


def kernel(
    *names: str,
    cost: Callable[..., int],
    inplace: tuple[int, ...] = (),
    view: bool = False,
    check: Callable[[dict], None] | None = None,
    outputs: int | Callable[[dict], int] = 1,
):
    """Register ``fn`` as the host kernel of each canonical op in ``names``.

    Several names share one function where the IR distinguishes ranks that numpy
    does not (conv1d / conv2d / conv3d), so backends can match on the rank.
    ``cost`` is required: the bytes a call will allocate, computed from its operands
    before it runs (runtime_lite/kernels/cost.py), which is how the run's budget is
    enforced for every kernel; a kernel cannot be registered without one.
    ``outputs`` is how many results it returns, checked against every instruction.
    """
    if not callable(cost):
        raise TypeError(f"kernel {names}: cost must be a function of the kernel's operands")

    def register(fn):
        for name in names:
            if name in KERNELS:
                raise RuntimeError(f"kernel {name!r} registered twice")
            KERNELS[name] = Kernel(name, fn, inplace, view, check, cost, outputs)
        return fn

    return register


def get_kernel(name: str) -> Kernel:
    try:
        return KERNELS[name]
    except KeyError:
        raise KeyError(f"no host kernel for op {name!r}") from None
