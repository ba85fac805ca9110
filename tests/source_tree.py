"""The project's own source files, for tests that scan the tree.

An install leaves copies behind (setuptools' build/lib, egg-info, __pycache__), and a scan
that reads them checks a stale second copy instead of the code. Tracked files are the
source where this is a git checkout; elsewhere (an unpacked sdist) anything under a
build or metadata folder is skipped.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_BUILD_PARTS = {"build", "dist", "__pycache__", ".eggs"}


def python_sources(package: str, name: str = "*.py") -> list[Path]:
    """Every source file of ``package`` (a folder under the repository root) matching ``name``."""
    found = sorted((ROOT / package).rglob(name))
    tracked = _tracked(package)
    if tracked is not None:
        # Untracked new files count too: `git ls-files --others --exclude-standard` lists them.
        return [p for p in found if p in tracked]
    return [
        p
        for p in found
        if not any(part in _BUILD_PARTS or part.endswith(".egg-info") for part in p.relative_to(ROOT).parts)
    ]


def _tracked(package: str) -> set[Path] | None:
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", package],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return {ROOT / line for line in out.splitlines() if line}
