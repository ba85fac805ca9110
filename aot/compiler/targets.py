"""Which targets a build may name, and which of them this version can compile for."""

from __future__ import annotations

from collections.abc import Sequence

from aot.errors import BuildError

KNOWN_TARGETS = ("host", "npu", "tensorrt")
#: Targets with a compiler backend in this version; the others are accepted and run on the host.
IMPLEMENTED_TARGETS = ("host", "npu", "tensorrt")


def check_targets(targets: Sequence[str]) -> tuple[list[str], list[str]]:
    """Validate target names; return (targets in priority order, notes for the build summary)."""
    ordered: list[str] = []
    for t in targets:
        if t not in KNOWN_TARGETS:
            raise BuildError(f"unknown target {t!r} (known targets: {', '.join(KNOWN_TARGETS)})")
        if t not in ordered:
            ordered.append(t)
    notes = [
        f"target '{t}' has no compiler backend in this version yet; its ops are placed on the host"
        for t in ordered
        if t not in IMPLEMENTED_TARGETS
    ]
    return ordered or ["host"], notes
