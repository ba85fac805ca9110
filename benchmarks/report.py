"""BENCHMARKS.md is written by several scripts; each owns one marked section and keeps the others.

Every script prints ``machine()`` with its table: a figure means nothing without the CPU
it was measured on (the same code runs 2.5x apart from onnxruntime on two 2-core VMs).
"""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path

PATH = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def write_section(name: str, text: str, path: Path = PATH) -> None:
    """Replace section ``name`` of BENCHMARKS.md with ``text`` (appended if absent)."""
    block = f"<!-- section: {name} -->\n{text.rstrip()}\n<!-- end: {name} -->\n"
    current = path.read_text() if path.exists() else ""
    pattern = re.compile(rf"<!-- section: {re.escape(name)} -->\n.*?<!-- end: {re.escape(name)} -->\n", re.S)
    if pattern.search(current):
        updated = pattern.sub(lambda _: block, current)
    elif name == "host" and current and "<!-- section:" not in current:
        updated = block  # the old single-script file: this section replaces all of it
    else:
        updated = current + ("\n" if current and not current.endswith("\n\n") else "") + block
    path.write_text(updated)


def publish(name: str, text: str, no_write: bool) -> None:
    """Print the report with ``--no-write``; otherwise write it as section ``name`` and say so."""
    if no_write:
        print(text)
    else:
        write_section(name, text)
        print(f"wrote the {name} section of {PATH}")


def command_line(script: str) -> str:
    """How this run was invoked, for the report (``--no-write`` only changes where it goes)."""
    return " ".join([f"python benchmarks/{script}"] + [a for a in sys.argv[1:] if a != "--no-write"])


def cpu() -> str:
    """The CPU as a reader needs it: model name, widest vector extension, cores ("AMD EPYC, AVX-512, 2 cores")."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name" and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            elif name.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    vector = (
        "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2" if flags else "vector unknown"
    )
    return f"{model}, {vector}, {os.cpu_count()} cores"


def blas() -> str:
    """numpy's BLAS and the kernel it picked (OpenBLAS's corename, as threadpoolctl reports it), if it says."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    try:
        from runtime_lite.kernels import gemm

        host = gemm._pool()
        policy = gemm.policy()
        if host is not None:  # "OpenBLAS 0.3.31.188.0 ... / SkylakeX" -> "OpenBLAS 0.3.31.188.0, SkylakeX kernel"
            build, _, kernel = host.blas.config.rpartition(" / ")
            config = f"{' '.join(build.split()[:2])}, {kernel} kernel"
        else:
            config = "numpy.matmul as is"
        return f"{config}; runtime_lite GEMM policy {policy.mode if policy else 'blas'}" + (
            f" ({policy.source})" if policy else ""
        )
    except Exception as error:  # a benchmark still runs where the runtime cannot say
        return f"BLAS unknown ({type(error).__name__})"


def machine(threads: int | str | None = None) -> str:
    """The line every benchmark prints with its table: CPU, Python, numpy and its BLAS, onnxruntime, threads."""
    import numpy as np

    try:
        import onnxruntime

        ort = f", onnxruntime {onnxruntime.__version__}"
    except ImportError:
        ort = ""
    overrides = [f"{v}={os.environ[v]}" for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if v in os.environ]
    line = f"{cpu()}; Python {platform.python_version()}, numpy {np.__version__} ({blas()}){ort}"
    if overrides:
        line += f"; {' '.join(overrides)}"
    return line + (f"; {threads} threads for both runtimes" if threads is not None else "")
