"""Unique names, handed out in constant time.

A graph or recipe names thousands of values from a few bases (``Slice_node``, ``starts``); an
unrolled LSTM of 160 steps has 9000 ops. Trying ``base``, ``base_1``, ``base_2``... from the start
each time made naming quadratic: 9 s of a 9.5 s build, and every per-layer recipe of an int8
build paid it again. The pool remembers where each base's search stopped, so a name costs the
same as the first, and the names are the ones that search from the start would give.
"""

from __future__ import annotations


class NamePool:
    """``take(base)``: ``base`` if free, else the first free ``base_N`` (N = 1, 2, ...)."""

    def __init__(self, taken: set[str] | None = None):
        self.taken: set[str] = set() if taken is None else taken
        self._next: dict[str, int] = {}  # base -> the suffix its search resumes at (0: the bare base)

    def take(self, base: str) -> str:
        n = self._next.get(base, 0)
        name = f"{base}_{n}" if n else base
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self._next[base] = n + 1
        self.taken.add(name)
        return name

    def __contains__(self, name: str) -> bool:
        return name in self.taken

    def copy(self) -> NamePool:
        """An independent pool with the same names taken (a cloned graph names on without clashing)."""
        twin = NamePool(set(self.taken))
        twin._next = dict(self._next)
        return twin


__all__ = ["NamePool"]
