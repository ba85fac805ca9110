"""The kernel registry: each kernel module registers its functions here as it is imported.

Kept apart from ``runtime_lite.kernels`` (which imports every kernel module to fill it)
so that a kernel module never imports its own package: the package depends on the
modules, the modules on this registry, and nothing goes round in a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Kernel:
    name: str
    fn: Callable[..., np.ndarray | tuple[np.ndarray, ...]]
    inplace: tuple[int, ...] = ()
    view: bool = False
    check: Callable[[dict], None] | None = None


KERNELS: dict[str, Kernel] = {}


def kernel(*names: str, inplace: tuple[int, ...] = (), view: bool = False, check: Callable[[dict], None] | None = None):
    """Register ``fn`` as the host kernel of each canonical op in ``names``.

    Several names share one function where the IR distinguishes ranks that numpy
    does not (conv1d / conv2d / conv3d), so backends can match on the rank.
    """

    def register(fn):
        for name in names:
            if name in KERNELS:
                raise RuntimeError(f"kernel {name!r} registered twice")
            KERNELS[name] = Kernel(name, fn, inplace, view, check)
        return fn

    return register


def get_kernel(name: str) -> Kernel:
    try:
        return KERNELS[name]
    except KeyError:
        raise KeyError(f"no host kernel for op {name!r}") from None
