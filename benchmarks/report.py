"""BENCHMARKS.md is written by several scripts; each owns one marked section and keeps the others.

Every script prints ``machine()`` with its table: a figure means nothing without the CPU
it was measured on (the same code runs 2.5x apart from onnxruntime on two 2-core VMs).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PATH = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"
sys.path.insert(0, str(PATH.parent))  # this checkout's runtime_lite, for what it says about the host
from runtime_lite.tools import machine as host  # noqa: E402


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


cpu = host.cpu  # the CPU as every figure names it


def machine(threads: int | str | None = None) -> str:
    """The line every benchmark prints with its table: CPU, Python, numpy and its BLAS, onnxruntime, threads."""
    try:
        import onnxruntime

        ort = f"onnxruntime {onnxruntime.__version__}"
    except ImportError:
        ort = ""
    try:
        line = host.describe(also=ort)
    except Exception as error:  # a benchmark still runs where the runtime cannot say what its BLAS is
        line = f"{cpu()}; BLAS unknown ({type(error).__name__})"
    return line + (f"; {threads} threads for both runtimes" if threads is not None else "")
