"""Counts in messages read as English: "1 instruction", "3 instructions"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, with the plural (``noun + "s"`` unless given) for any count but one."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
