"""Formulations of one kernel picked by timing them once, on this machine's numpy.

numpy's SIMD loops differ by CPU. Its float32 ``tanh`` is twice as fast as its ``exp``
where numpy dispatches AVX-512 (AMD EPYC with AVX-512: 0.15 against 0.29 ns per
element) and 1.3x slower where it dispatches AVX2 (the same CPU with numpy's AVX-512
loops turned off, ``NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"``: 0.88
against 0.66 ns). A formulation tuned on one CPU loses on the other, so a kernel with
several names its candidates, and the first call times each on a cache-sized sample,
alternating, best of a few (well under a millisecond in all), and keeps the winner for
the process. The first candidate is the default: another replaces it only when it is
``margin`` times faster, so a noisy measurement does not flip a near tie between
processes. ``RUNTIME_LITE_<NAME>=<candidate>`` skips the measurement.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping

logger = logging.getLogger("runtime_lite.kernels.measured")

#: Alternating rounds of the measurement; each candidate's best round counts.
ROUNDS = 7

_choices: dict[str, str] = {}
_lock = threading.Lock()


def pick(
    name: str, candidates: tuple[str, ...], trials: Callable[[], Mapping[str, Callable[[], object]]],
    margin: float = 1.2,
) -> str:  # fmt: skip
    """The candidate to use for ``name`` in this process, measured at the first call, then remembered.

    ``trials()`` makes one timed call per candidate (its sample is made only when a measurement runs).
    """
    choice = _choices.get(name)
    if choice is not None:
        return choice
    with _lock:
        if name not in _choices:
            _choices[name] = _forced(name, candidates) or _measure(name, trials(), margin)
        return _choices[name]


def _forced(name: str, candidates: tuple[str, ...]) -> str | None:
    variable = f"RUNTIME_LITE_{name.upper()}"
    value = os.environ.get(variable, "auto").strip().lower()
    if value in candidates:
        return value
    if value not in ("", "auto"):
        warnings.warn(f"{variable}={value!r} is not one of auto, {', '.join(candidates)}; measuring instead",
                      RuntimeWarning, stacklevel=4)  # fmt: skip
    return None


def best_times(candidates: Mapping[str, Callable[[], object]], rounds: int = ROUNDS) -> dict[str, float]:
    """Each candidate's best time in seconds over ``rounds`` rounds that call every candidate in turn."""
    best = dict.fromkeys(candidates, float("inf"))
    for _ in range(rounds):
        for key, run in candidates.items():
            start = time.perf_counter()
            run()
            best[key] = min(best[key], time.perf_counter() - start)
    return best


def _measure(name: str, candidates: Mapping[str, Callable[[], object]], margin: float) -> str:
    best = best_times(candidates)
    default = next(iter(candidates))
    fastest = min(best, key=best.__getitem__)
    choice = fastest if best[fastest] * margin < best[default] else default
    logger.info("%s: %s (%s)", name, choice, ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in best.items()))
    return choice


def forget() -> None:
    """Measure again at the next call (tests; a process whose CPU features changed)."""
    with _lock:
        _choices.clear()
