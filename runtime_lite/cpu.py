"""The CPU's model name and feature flags, read once where the runtime decides by them and where tools report them.

The onnxruntime backend picks an int8 recipe's kernels by them (an 8-bit dot product or not,
backends/onnxruntime/int8.py); ``runtime_lite.tools.machine`` names the CPU beside every speed figure.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

#: /proc/cpuinfo's name for the feature list: x86 says ``flags``, Arm ``Features``.
FLAG_FIELDS = ("flags", "Features")
#: CPU flags (Linux's names) of an 8-bit dot product, which integer kernels need to beat float ones.
DOT_PRODUCT_FLAGS = {
    "avx512_vnni": "AVX512-VNNI",
    "avx_vnni": "AVX-VNNI",
    "amx_int8": "AMX-INT8",
    "asimddp": "the Arm dot-product extension",
}


@functools.cache
def cpu_fields(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo (each processor repeats them); empty where it cannot be read.

    Read once per process: every int8 load asks, and the file repeats the flags per core."""
    fields: dict[str, str] = {}
    try:
        for line in cpuinfo.read_text().splitlines():
            if not line.strip():
                if fields:
                    break  # the end of the first processor's block
                continue
            name, _, value = line.partition(":")
            fields.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    return fields


@functools.cache
def cpu_flags_and_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, frozenset[str]]:
    """The CPU's model name and feature flags (Linux); the platform's words and no flags elsewhere."""
    fields = cpu_fields(cpuinfo)
    model = fields.get("model name") or platform.processor() or platform.machine()
    flags = next((fields[name] for name in FLAG_FIELDS if name in fields), "")
    return model, frozenset(flags.split())


__all__ = ["DOT_PRODUCT_FLAGS", "FLAG_FIELDS", "cpu_fields", "cpu_flags_and_model"]
