"""Which CPU engine ran a region fastest on this host: measured once, cached, read defensively.

As the GEMM policy (runtime_lite/kernels/gemm_policy.py) is cached per machine, a
placement verdict is cached per *what it depends on*: the region (the sha256 of its
recipe and its input signature), the CPU (model, vector extension, VNNI, cores), the
thread count and every candidate engine's version. A later load with all of these the
same reads the verdict instead of measuring (the choice is then reproducible); any
change measures again. One small JSON file per key under
``default_cache_dir()/placement``, written atomically; a file that does not parse, names
another key or another engine is ignored and rewritten.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime_lite.files import atomic_write, default_cache_dir, read_regular

logger = logging.getLogger("runtime_lite.auto")

#: Bumped when the measurement or the record changes: older records are then ignored.
VERSION = 2  # 2: timed at working sizes within the bundle's bounds (1: every symbolic dim at 1 first)
MAX_RECORD_BYTES = 64 << 10


def cache_path(key: Mapping[str, Any], root: Path | None = None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return (root if root is not None else default_cache_dir()) / "placement" / f"{digest}.json"


def read_verdict(path: Path, key: Mapping[str, Any]) -> tuple[str, dict[str, float]] | None:
    """(the chosen engine, the median seconds each engine took) cached for ``key``, or None."""
    try:
        record = json.loads(read_regular(path, MAX_RECORD_BYTES, follow_symlinks=False))
        if not isinstance(record, dict) or record.get("key") != dict(key):
            raise ValueError("the record names another key")
        engine, seconds = record.get("engine"), record.get("seconds")
        if engine not in key["engines"] or not isinstance(seconds, dict):
            raise ValueError(f"engine {engine!r}")
        if not all(name in key["engines"] and isinstance(s, (int, float)) for name, s in seconds.items()):
            raise ValueError("timings of engines outside the key")
        return engine, {name: float(s) for name, s in seconds.items()}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError) as error:
        logger.info("ignoring the placement record %s (%s); measuring again", path, error)
        return None


def write_verdict(path: Path, key: Mapping[str, Any], engine: str, seconds: Mapping[str, float]) -> None:
    """Atomically (a reader never sees half a record); a read-only or missing home only logs."""
    data = json.dumps({"key": dict(key), "engine": engine, "seconds": dict(seconds)}, indent=1, sort_keys=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda out: out.write(data.encode()))
    except OSError as error:
        logger.info("could not cache the placement verdict in %s (%s)", path, error)


__all__ = ["VERSION", "cache_path", "read_verdict", "write_verdict"]
