"""The thread count every benchmark runs at, set before numpy or an engine is imported.

OpenBLAS, OpenMP and MKL read their thread counts once, when they load: a benchmark script
imports this module before numpy (``from bench_env import THREADS``), so both sides of a
comparison run at ``BENCH_THREADS`` (default 2) unless the caller set a library's own variable.
"""

from __future__ import annotations

import os

THREADS = int(os.environ.get("BENCH_THREADS", "2"))
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, str(THREADS))
