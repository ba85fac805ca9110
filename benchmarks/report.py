"""BENCHMARKS.md is one generated page: the current figure per benchmark and CPU kind, with its command and date.

A figure means nothing without the CPU it was measured on (the same code runs 1.0x onnxruntime
on one 2-core VM and 2.8x on another), and a page edited in place by every stop ends up with
corrected and superseded rows that no reader can tell apart. So every benchmark script writes
its last run to ``benchmarks/results/<benchmark>/<cpu kind>``: ``.json`` for the headline
figures the page shows (:func:`publish_figures`), ``.md`` for the script's full report, which
the page links (:func:`publish`). A new run on the same kind of CPU replaces that kind's files;
the page (``python benchmarks/report.py``) is rebuilt from all of them. Old figures live in
git and in CHANGELOG.md's "Benchmark history", never on the page.
"""

from __future__ import annotations

import datetime
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATH = ROOT / "BENCHMARKS.md"
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))  # this checkout's runtime_lite, for what it says about the host
from runtime_lite.tools import machine as host  # noqa: E402

cpu = host.cpu  # the CPU as every figure names it

#: The page's sections in order, with what a reader needs to read them. A benchmark not listed comes last.
SECTIONS: dict[str, tuple[str, str]] = {
    "delegate": (
        "onnxruntime delegate (`--target onnxruntime`) against onnxruntime",
        "Latency of the bundle's recipe run by runtime_lite over onnxruntime running the original ONNX file, batch 1, "
        "2 threads each; `verified load` is `runtime_lite.load` (private read, sha256 of every blob, recipe check, "
        "session) over onnxruntime's session creation.",
    ),
    "int8": (
        "int8 bundles",
        "Latency of int8 bundles over onnxruntime fp32 on the original file (2 threads, batch 1), accuracy against "
        "the float model, build time.",
    ),
    "openvino": (
        "OpenVINO delegate (`--target openvino`) and placement by measurement (`--target auto`)",
        "The same ONNX recipes run by OpenVINO's CPU plugin, over onnxruntime on the original file; `auto` times "
        "each installed engine per region on the first load and keeps the faster.",
    ),
    "host-models": (
        "Host plan (numpy) against onnxruntime: modern models",
        "runtime_lite's own numpy kernels over onnxruntime on the same ONNX file, batch 1, 2 threads each. The "
        "OpenBLAS kernel numpy runs decides most of it (`OPENBLAS_CORETYPE`, when a machine sets it).",
    ),
    "host": (
        "Host plan (numpy) against onnxruntime: the onnx model zoo",
        "The onnx wheel's model-zoo architectures (random weights), runtime_lite over onnxruntime, 2 threads each.",
    ),
    "cold-start": (
        "Cold start",
        "A fresh process from spawn to its first result, over onnxruntime's (session creation and first run on the "
        "original file).",
    ),
    "npu": (
        "Virtual NPU",
        "What the NPU's emulation costs over the host plan of the same model (it runs the host's kernels), and "
        "how many regions the partition makes.",
    ),
    "gpu-runner": (
        "TensorRT engine runner on a GPU",
        "What the runner costs per call over the bare copies it must make, on a lent GPU (files named by the GPU).",
    ),
    "runtime": ("Runtime costs: dispatch, loading, import", "Per-instruction dispatch, `load`, `import runtime_lite`."),
    "soak": ("Soak: mixed load / run / unload", "Minutes of mixed load, run and unload: every result checked, RSS."),
    "serving": (
        "Serving through Ray Serve",
        "What the v2-protocol server adds over a direct `Module.run`, and what dynamic batching gains.",
    ),
}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _stamp(command: str, cpu_kind: str | None, date: str | None) -> dict:
    return {
        "cpu": cpu_kind or host.cpu_kind(),
        "date": date or datetime.date.today().isoformat(),
        "command": command,
    }


def publish_figures(name: str, columns: list[str], rows: list[list], command: str, note: str = "", *,
                    cpu_kind: str | None = None, date: str | None = None, no_write: bool = False) -> None:  # fmt: skip
    """The headline figures of benchmark ``name`` on this CPU: ``rows`` of [setting, value per column]."""
    record = {"benchmark": name, **_stamp(command, cpu_kind, date), "columns": columns, "rows": rows, "note": note}
    if no_write:
        print(json.dumps(record, indent=1))
        return
    path = RESULTS / name / f"{slug(record['cpu'])}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    write_page()
    print(f"wrote {path.relative_to(ROOT)} and {PATH.name}")


def publish(name: str, text: str, no_write: bool) -> None:
    """A script's full report: printed with ``--no-write``, else kept as this CPU kind's details of ``name``."""
    if no_write:
        print(text)
        return
    write_section(name, text)
    print(f"wrote the {name} report for this CPU kind under {RESULTS.relative_to(ROOT)} and {PATH.name}")


def write_section(name: str, text: str) -> None:
    path = RESULTS / name / f"{slug(host.cpu_kind())}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = f"<!-- {host.cpu_kind()}; {datetime.date.today().isoformat()} -->\n"
    path.write_text(header + text.rstrip() + "\n")
    write_page()


def command_line(script: str) -> str:
    """How this run was invoked, for the report (``--no-write`` only changes where it goes)."""
    return " ".join([f"python benchmarks/{script}"] + [a for a in sys.argv[1:] if a != "--no-write"])


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


def _cell(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _section(name: str, figures: list[dict], details: list[Path]) -> list[str]:
    title, about = SECTIONS.get(name, (name, ""))
    lines = [f"## {title}", ""]
    if about:
        lines += [about, ""]
    by_columns: dict[tuple[str, ...], list[dict]] = {}
    for record in figures:
        by_columns.setdefault(tuple(record["columns"]), []).append(record)
    for columns, records in by_columns.items():
        lines += [
            "| CPU | date | setting | " + " | ".join(columns) + " |",
            "|---|---|---|" + "---:|" * len(columns),
        ]
        for record in records:
            for row in record["rows"]:
                cells = " | ".join(_cell(v) for v in row[1:])
                lines.append(f"| {record['cpu']} | {record['date']} | {row[0]} | {cells} |")
        lines.append("")
        for record in records:
            note = f" {record['note']}" if record.get("note") else ""
            lines.append(f"- {record['cpu']}: `{record['command']}`.{note}")
        lines.append("")
    if details:
        links = ", ".join(f"[{p.stem}]({p.relative_to(ROOT).as_posix()})" for p in details)
        lines += [f"Full reports of the last runs, per CPU kind: {links}.", ""]
    return lines


def build_page(results: Path = RESULTS) -> str:
    """The whole page from the results directory."""
    figures: dict[str, list[dict]] = {}
    details: dict[str, list[Path]] = {}
    for path in sorted(results.glob("*/*.json")):
        record = json.loads(path.read_text())
        figures.setdefault(path.parent.name, []).append(record)
    for path in sorted(results.glob("*/*.md")):
        details.setdefault(path.parent.name, []).append(path)
    names = [n for n in SECTIONS if n in figures or n in details]
    names += sorted((set(figures) | set(details)) - set(names))
    kinds = sorted({r["cpu"] for records in figures.values() for r in records})
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by `python benchmarks/report.py` from benchmarks/results/: edit those, not this page. -->",
        "",
        "The current figure of each benchmark on each kind of CPU it was run on, with the command that produced "
        "it and the date. Ratios are runtime_lite over its peer (onnxruntime on the original ONNX file, same "
        "thread count), measured side by side in one process, each timed run after 0.2 s of untimed runs of its "
        "own side; lower is better. These are shared 2-core machines: a figure moves by about 10% between runs, "
        "and by far more between CPU kinds, so a claim holds only for the rows that show it. Each benchmark "
        "script rewrites its own rows for the CPU it runs on; earlier figures and the corrections that "
        'superseded them are in CHANGELOG.md, "Benchmark history".',
        "",
        "CPU kinds measured: " + "; ".join(kinds) + ".",
        "",
    ]
    for name in names:
        lines += _section(name, figures.get(name, []), details.get(name, []))
    return "\n".join(lines).rstrip() + "\n"


def write_page() -> None:
    PATH.write_text(build_page())


if __name__ == "__main__":
    write_page()
    print(f"wrote {PATH} ({PATH.stat().st_size:,} bytes)")
