"""Where each backend module runs, and the caller's policy about it.

A bundle is compiled for backends (the NPU, TensorRT); a host may not have them.
The default is to run anywhere: a TensorRT region without a usable engine runs its
host plan, correctly but slower. That must not be silent: each module that does
not run where it was compiled for logs one WARNING (logger
``runtime_lite.placement``). A deployment that would rather fail names the backends
it requires, ``load(..., require=("tensorrt",))``, and the load stops at the first
module that misses it, with one line naming the module and what is missing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from runtime_lite.errors import PlacementError

logger = logging.getLogger("runtime_lite.placement")


@dataclass(frozen=True)
class Placement:
    """One module: the backend it was compiled for, where it runs, and the backend's reason."""

    module: str
    backend: str
    runs_on: str
    detail: str | None = None

    @property
    def as_compiled(self) -> bool:
        return self.runs_on == self.backend

    def to_dict(self) -> dict[str, str]:
        record = {"backend": self.backend, "runs_on": self.runs_on}
        if self.detail is not None:
            record["detail"] = self.detail
        return record


def normalize_require(require: Iterable[str] | str | None) -> tuple[str, ...]:
    """``"tensorrt"``, ``("tensorrt", "npu")`` or ``"tensorrt,npu"`` -> a tuple of backend names."""
    if require is None:
        return ()
    items = [require] if isinstance(require, str) else list(require)
    names = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"require must name backends as strings, got {item!r}")
        names += [name.strip() for name in item.split(",") if name.strip()]
    return tuple(dict.fromkeys(names))


def check_required_present(require: tuple[str, ...], backends: list[str]) -> None:
    """Before any backend starts: every required backend has at least one module in the bundle."""
    missing = [name for name in require if name not in backends]
    if missing:
        have = ", ".join(sorted(set(backends))) or "none: everything runs on the host"
        raise PlacementError(
            f"required backend {', '.join(missing)} has no module in this bundle (its backend modules: {have})"
        )


def enforce(placement: Placement, require: tuple[str, ...]) -> None:
    """Raise when a required backend's module runs elsewhere; otherwise warn once when it runs off its backend.

    Every module's placement is logged at INFO (``-v``), whichever backend it belongs to.
    """
    if placement.as_compiled:
        logger.info(
            "module %r compiled for %s runs on %s%s", placement.module, placement.backend, placement.runs_on,
            f" ({placement.detail})" if placement.detail else "",
        )  # fmt: skip
        return
    where = placement.detail or f"on the {placement.runs_on}"  # a backend's detail reads "on the host: ..."
    if placement.backend in require:
        raise PlacementError(f"module {placement.module!r} (compiled for {placement.backend}, required) runs {where}")
    logger.warning(
        "module %r compiled for %s runs %s; load with require=(%r,) or --require %s to refuse instead",
        placement.module, placement.backend, where, placement.backend, placement.backend,
    )  # fmt: skip
