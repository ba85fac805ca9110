"""Third-party warnings that aot's own calls raise, known to be harmless: hidden unless asked for.

A user who calls ``aot.build`` on a ``torch.export`` program did nothing to earn a
torch ``FutureWarning`` about torch's own pytree internals; printing it on every build
teaches users to ignore warnings. Only warnings listed here, raised inside aot's calls,
are hidden; everything else passes. ``aot-build -v`` (or ``AOT_SHOW_WARNINGS=1``) shows
them all.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator

#: (category, message regex, why it is harmless)
KNOWN_HARMLESS: tuple[tuple[type[Warning], str, str], ...] = (
    (
        FutureWarning,
        r".*isinstance\(treespec, LeafSpec\)",
        "torch 2.13's run_decompositions copies the program's pytree specs through a deprecated check of its own",
    ),
)

_shown = False


def show_third_party_warnings(show: bool = True) -> None:
    """Show every warning, the known harmless ones too (``aot-build -v``)."""
    global _shown
    _shown = show


@contextlib.contextmanager
def known_warnings_hidden() -> Iterator[None]:
    """Hide the warnings of ``KNOWN_HARMLESS`` raised inside the block, unless they are to be shown."""
    if _shown or os.environ.get("AOT_SHOW_WARNINGS", "") not in ("", "0"):
        yield
        return
    with warnings.catch_warnings():
        for category, message, _ in KNOWN_HARMLESS:
            warnings.filterwarnings("ignore", message=message, category=category)
        yield
