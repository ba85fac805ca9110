"""What this host is, said with every speed figure: the CPU, numpy's BLAS kernel, the GEMM policy.

A latency means little without the machine behind it: the same host plan ran 1.1x
onnxruntime on one 2-core VM and 2.8x on another (BENCHMARKS.md). The environment
matters as much as the CPU: ``OPENBLAS_CORETYPE`` holds numpy's OpenBLAS to the kernel
it names, and on an AVX-512 CPU held to ``Haswell`` (AVX2) its sgemm ran at 235 instead
of 430 GFLOP/s at 2 threads (AMD EPYC, OpenBLAS 0.3.31). ``runtime-lite bench`` prints
:func:`describe` and, where that is the case, :func:`kernel_note`; the benchmark
scripts print the same line.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from runtime_lite.cpu import DOT_PRODUCT_FLAGS, cpu_fields, cpu_flags_and_model

#: OpenBLAS kernels (``openblas_get_corename``) that use AVX-512.
AVX512_KERNELS = frozenset({"skylakex", "cooperlake", "sapphirerapids"})
#: The environment variables that change which kernel numpy's OpenBLAS runs, or how it blocks.
BLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def vector_extension(flags: set[str]) -> str:
    if "avx512f" in flags:
        return "AVX-512"
    return "AVX2" if "avx2" in flags else "no AVX2" if flags else "vector unknown"


def has_vnni(flags: set[str]) -> bool:
    """An 8-bit dot product (VNNI on x86): int8 kernels win over float with one and lose without."""
    return bool(flags & DOT_PRODUCT_FLAGS.keys())


#: AMD's Zen generations by (family, first model, last model): a cloud VM names its CPU only "AMD EPYC", and
#: a Zen 4 and a Zen 5 both have AVX-512 and VNNI but run the same kernels at different speeds.
ZEN_GENERATIONS = (
    (23, 0x00, 0x2F, "Zen"), (23, 0x30, 0xFF, "Zen2"), (25, 0x00, 0x0F, "Zen3"), (25, 0x10, 0x1F, "Zen4"),
    (25, 0x20, 0x5F, "Zen3"), (25, 0x60, 0xAF, "Zen4"), (26, 0x00, 0xFF, "Zen5"),
)  # fmt: skip


def zen_generation(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """``"Zen4 (family 25)"`` for an AMD CPU whose model name leaves the generation out; None elsewhere."""
    fields = cpu_fields(cpuinfo)
    try:
        family, model = int(fields["cpu family"]), int(fields["model"])
    except (KeyError, ValueError):
        return None
    if fields.get("vendor_id") != "AuthenticAMD":
        return None
    found = [name for fam, first, last, name in ZEN_GENERATIONS if fam == family and first <= model <= last]
    return f"{found[0]} (family {family})" if found else None


def cpu() -> str:
    """The CPU as a reader needs it: model name, widest vector extension, int8 dot products, cores
    ("AMD EPYC Zen4 (family 25), AVX-512, VNNI, 2 cores")."""
    model, flags = cpu_flags_and_model()
    if model.strip() == "AMD EPYC" and (generation := zen_generation()):
        model = f"{model} {generation}"
    vnni = "VNNI" if has_vnni(flags) else "no VNNI" if flags else "VNNI unknown"
    return f"{model}, {vector_extension(flags)}, {vnni}, {os.cpu_count()} cores"


def cpu_kind() -> str:
    """The kind of CPU a figure holds for, as BENCHMARKS.md groups them: ``cpu()`` without the core count."""
    return cpu().rsplit(", ", 1)[0]


def blas_kernel() -> tuple[str, str] | None:
    """(OpenBLAS's version words, the kernel it runs) for numpy's OpenBLAS; None where the runtime cannot see it
    (not OpenBLAS, one BLAS thread, or ``RUNTIME_LITE_GEMM=blas``)."""
    from runtime_lite.kernels import gemm

    host = gemm._pool()
    if host is None:
        return None
    build, _, kernel = host.blas.config.rpartition(" / ")  # "OpenBLAS 0.3.31.188.0 ... / SkylakeX"
    return " ".join(build.split()[:2]), kernel


def blas() -> str:
    """numpy's BLAS, the kernel it picked and the runtime's GEMM policy ("OpenBLAS 0.3.31, Haswell kernel; ...")."""
    from runtime_lite.kernels import gemm

    found = blas_kernel()
    config = f"{found[0]}, {found[1]} kernel" if found else "numpy.matmul as is"
    policy = gemm.policy()
    return f"{config}; runtime_lite GEMM policy " + (f"{policy.mode} ({policy.source})" if policy else "blas")


def overrides() -> list[str]:
    """The BLAS overrides set in this process's environment, as ``NAME=value``."""
    return [f"{name}={os.environ[name]}" for name in BLAS_OVERRIDES if name in os.environ]


def describe(also: str = "") -> str:
    """One line: CPU, Python, numpy and its BLAS (then ``also``: another runtime's version), BLAS overrides."""
    import numpy as np

    line = f"{cpu()}; Python {platform.python_version()}, numpy {np.__version__} ({blas()}){also and ', ' + also}"
    set_here = overrides()
    return line + (f"; {' '.join(set_here)}" if set_here else "")


def kernel_note(flags: set[str] | None = None, kernel: str | None = None) -> str | None:
    """A warning where ``OPENBLAS_CORETYPE`` holds OpenBLAS to a kernel without AVX-512 on a CPU that has it."""
    forced = os.environ.get("OPENBLAS_CORETYPE", "").strip()
    if not forced:
        return None
    flags = cpu_flags_and_model()[1] if flags is None else flags
    if kernel is None:
        found = blas_kernel()
        kernel = found[1] if found else forced
    if "avx512f" not in flags or kernel.lower() in AVX512_KERNELS:
        return None
    return (
        f"OPENBLAS_CORETYPE={forced} holds numpy's OpenBLAS to its {kernel} kernel on a CPU with AVX-512; "
        "without it OpenBLAS picks an AVX-512 kernel (sgemm 1.8x faster on an AMD EPYC with AVX-512)"
    )


__all__ = [
    "AVX512_KERNELS", "blas", "blas_kernel", "cpu", "cpu_flags_and_model", "describe", "kernel_note", "overrides",
    "vector_extension", "zen_generation",
]  # fmt: skip
