"""Which targets a build may name: the host, and every compiler backend installed."""

from __future__ import annotations

from collections.abc import Sequence

from aot.compiler.backends import available_compiler_backends, get_compiler_backend
from aot.errors import BuildError


def check_targets(targets: Sequence[str]) -> list[str]:
    """Target names in priority order, each one a loadable backend (or "host"); BuildError otherwise."""
    ordered: list[str] = []
    for t in targets:
        if t != "host" and t not in available_compiler_backends():
            installed = ", ".join(["host", *available_compiler_backends()])
            raise BuildError(f"unknown target {t!r} (installed: {installed})")
        if t not in ordered:
            if t != "host":
                get_compiler_backend(t)  # a plugin that fails to load says so now, before any work
            ordered.append(t)
    return ordered or ["host"]
