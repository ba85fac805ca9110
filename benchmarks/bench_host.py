"""Host latency and cold start: runtime_lite against onnxruntime, side by side in one process.

    python benchmarks/bench_host.py                   # all nine zoo models, writes BENCHMARKS.md
    python benchmarks/bench_host.py --models resnet50 --runs 30 --no-write

Both runtimes get the same thread count (BLAS threads for numpy, intra-op threads for
onnxruntime) and run the same model (the zoo architecture with random weights) on the
same input. Runs alternate, one of each per round, so machine noise hits both alike;
the median of the rounds is reported and compared as a ratio. onnxruntime's thread
spinning is turned off: in alternating runs its spinning threads would steal the
cores numpy's BLAS is using (and vice versa), slowing both.
"""

from __future__ import annotations

import argparse
import os
import sys

THREADS = int(os.environ.get("BENCH_THREADS", "2"))
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, str(THREADS))

import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

import aot  # noqa: E402
import runtime_lite  # noqa: E402
from aot.testing import ZOO_MODELS, load_zoo_model, relative_l2  # noqa: E402
from aot.testing.zoo import zoo_input  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import command_line, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: Latency targets as runtime_lite / onnxruntime ratios (issue "End-to-end skeleton": ResNet-50 within 2x).
TARGETS = {"resnet50": 2.0}

COLD_RUNTIME_LITE = """
import numpy as np, runtime_lite
m = runtime_lite.load({bundle!r})
m.run([np.zeros([1 if isinstance(d, str) else d for d in s.shape], s.dtype) for s in m.inputs])
"""
COLD_ONNXRUNTIME = """
import numpy as np, onnxruntime as ort
o = ort.SessionOptions(); o.intra_op_num_threads = {threads}; o.inter_op_num_threads = 1
s = ort.InferenceSession({model!r}, o, providers=["CPUExecutionProvider"])
s.run(None, {{i.name: np.zeros(i.shape, np.float32) for i in s.get_inputs()}})
"""


def onnxruntime_session(model_path: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])


def alternate(first, second, rounds: int) -> tuple[float, float]:
    """Median seconds of ``first`` and ``second`` over ``rounds`` alternating calls."""
    a, b = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        first()
        a.append(time.perf_counter() - start)
        start = time.perf_counter()
        second()
        b.append(time.perf_counter() - start)
    return statistics.median(a), statistics.median(b)


def time_process(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - start


def bench_model(name: str, rounds: int, workdir: Path) -> dict:
    model = load_zoo_model(name)
    model_path = workdir / f"{name}.onnx"
    model_path.write_bytes(model.SerializeToString())
    feeds = zoo_input(model)
    bundle_path = workdir / f"{name}.aotb"
    start = time.perf_counter()
    result = aot.build(str(model_path))
    result.save(bundle_path)
    build_seconds = time.perf_counter() - start
    module = runtime_lite.load(bundle_path)
    session = onnxruntime_session(str(model_path))
    ours, theirs = module.run(feeds), session.run(None, feeds)
    error = max(relative_l2(a, b) for a, b in zip(ours, theirs))
    for _ in range(2):  # warm up both
        module.run(feeds)
        session.run(None, feeds)
    lite, onnx_rt = alternate(lambda: module.run(feeds), lambda: session.run(None, feeds), rounds)
    return {
        "model": name,
        "runtime_lite_ms": lite * 1e3,
        "onnxruntime_ms": onnx_rt * 1e3,
        "ratio": lite / onnx_rt,
        "rel_l2": error,
        "build_s": build_seconds,
        "bundle_mb": bundle_path.stat().st_size / 1e6,
        "bundle": str(bundle_path),
        "model_path": str(model_path),
    }


def bench_cold_start(row: dict, rounds: int) -> tuple[float, float]:
    lite_code = COLD_RUNTIME_LITE.format(bundle=row["bundle"])
    ort_code = COLD_ONNXRUNTIME.format(model=row["model_path"], threads=THREADS)
    return alternate(lambda: time_process(lite_code), lambda: time_process(ort_code), rounds)


def bench_import(rounds: int) -> tuple[float, float]:
    """Seconds `import runtime_lite` adds beyond `import numpy`, and `import numpy` itself."""
    numpy_only, with_runtime = alternate(
        lambda: time_process("import numpy"), lambda: time_process("import numpy, runtime_lite"), rounds
    )
    return with_runtime - numpy_only, numpy_only


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores visible; Python {platform.python_version()}, numpy {np.__version__}, "
        f"onnxruntime {ort.__version__}; {THREADS} threads for both runtimes"
    )


def render(rows: list[dict], cold: tuple[str, float, float], import_cost: tuple[float, float], command: str) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Measured side by side in one process: runtime_lite and onnxruntime alternate, one run",
        "each per round, and each figure is the median over the rounds. Ratios are",
        "runtime_lite / onnxruntime (lower is better; below 1 means runtime_lite is faster).",
        "Models are the onnx wheel's model-zoo architectures with random weights (see",
        "`aot/testing/zoo.py`); `rel. L2` is the largest relative L2 error of any output against",
        "onnxruntime in the same run.",
        "",
        f"- Command: `{command}`",
        f"- Machine: {machine()}",
        "- onnxruntime: CPU execution provider, default graph optimisations, intra-op spinning off",
        "  (with spinning on, its idle threads steal the cores numpy's BLAS needs in alternating runs).",
        "",
        "## Host inference latency, batch 1",
        "",
        "| model | runtime_lite (ms) | onnxruntime (ms) | ratio | rel. L2 | aot-build (s) | bundle (MB) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['runtime_lite_ms']:.1f} | {r['onnxruntime_ms']:.1f} | {r['ratio']:.2f} | "
            f"{r['rel_l2']:.1e} | {r['build_s']:.2f} | {r['bundle_mb']:.1f} |"
        )
    name, lite, onnx_rt = cold
    extra, numpy_import = import_cost
    lines += ["", "Targets: " + "; ".join(
        f"{r['model']} ratio <= {TARGETS[r['model']]:.2f}: measured {r['ratio']:.2f}, "
        + ("met" if r["ratio"] <= TARGETS[r["model"]] else "MISSED")
        for r in rows if r["model"] in TARGETS
    ) + ". Ratios move by about 10% between invocations on these shared 2-core machines.",
        "",
        "Where time goes on the slower models (per-op profiles): ShuffleNet and SqueezeNet run",
        "many small convolutions where numpy's per-call overhead and separate ReLU passes",
        "weigh more than the GEMMs; DenseNet keeps 62 batch norms that follow concats (no",
        "convolution to fold them into). Fusing activations into convolutions and cheaper",
        "dispatch are the next levers.",
    ]  # fmt: skip
    lines += [
        "",
        "## Cold start",
        "",
        "A new Python process that imports the runtime, loads the model and runs it once, timed",
        "from outside the process (interpreter start-up included for both).",
        "",
        "| model | runtime_lite (s) | onnxruntime (s) | ratio |",
        "|---|---:|---:|---:|",
        f"| {name} | {lite:.3f} | {onnx_rt:.3f} | {lite / onnx_rt:.2f} |",
        "",
        f"`import runtime_lite` costs {extra * 1e3:.0f} ms beyond `import numpy` ({numpy_import * 1e3:.0f} ms, process start included).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(ZOO_MODELS), choices=ZOO_MODELS)
    parser.add_argument("--runs", type=int, default=15, help="alternating rounds per model (median reported)")
    parser.add_argument("--cold-runs", type=int, default=5)
    parser.add_argument("--cold-model", default="resnet50", choices=ZOO_MODELS)
    parser.add_argument("--no-write", action="store_true", help="print the report instead of writing BENCHMARKS.md")
    args = parser.parse_args()
    command = command_line("bench_host.py")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            row = bench_model(name, args.runs, Path(tmp))
            rows.append(row)
            print(f"{name:14s} runtime_lite {row['runtime_lite_ms']:7.1f} ms  onnxruntime {row['onnxruntime_ms']:7.1f} ms  "
                  f"ratio {row['ratio']:.2f}  rel.L2 {row['rel_l2']:.1e}", flush=True)  # fmt: skip
        cold_row = next((r for r in rows if r["model"] == args.cold_model), None) or bench_model(
            args.cold_model, 1, Path(tmp)
        )
        lite, onnx_rt = bench_cold_start(cold_row, args.cold_runs)
        print(f"cold start {args.cold_model}: runtime_lite {lite:.3f} s, onnxruntime {onnx_rt:.3f} s", flush=True)
        import_cost = bench_import(args.cold_runs * 2)
    report = render(rows, (args.cold_model, lite, onnx_rt), import_cost, command)
    if args.no_write:
        print(report)
    else:
        write_section("host", report)
        print(f"wrote the host section of {ROOT / 'BENCHMARKS.md'}")


if __name__ == "__main__":
    main()
