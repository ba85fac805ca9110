"""One rule for a test whose system tool, package index or library is missing here.

Outside CI a user's machine may lack Graphviz, Chromium, HAProxy or the package index:
the test skips and says what to install. CI (``CI`` set, as ``.ci/run`` sets it) installs
all of them, so there a missing one is a broken CI set-up and the test fails, instead of
going green by testing nothing.
"""

from __future__ import annotations

import os
import shutil

import pytest


def missing(message: str) -> None:
    """Skip with the reason, or fail under CI, which must have what the test needs."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide it: {message}", pytrace=False)
    pytest.skip(message)


def require_program(name: str, apt: str, *alternatives: str) -> str:
    """The program's path (the first of ``name`` and ``alternatives`` on PATH), else `missing`."""
    for candidate in (name, *alternatives):
        found = shutil.which(candidate)
        if found:
            return found
    missing(f"{name} is not installed (apt-get install -y {apt})")
    raise AssertionError("unreachable")  # missing() always raises
