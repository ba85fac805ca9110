"""Cold start of a ``--target onnxruntime`` bundle against onnxruntime on the original file, in fresh processes.

    python benchmarks/bench_cold_start.py                          # the five models of issue 41
    python benchmarks/bench_cold_start.py --models resnet50 --rounds 9

Cold start = a fresh Python process from spawn to its first result: for runtime_lite
``import runtime_lite; load(bundle)`` (the default, verifying load) and one run, for onnxruntime
``import onnxruntime; InferenceSession(original file)`` and one run, both at the same intra-op
thread count. The two alternate, one process each per round, so drift hits both alike; the
median over the rounds of the per-round ratio is reported. Before the rounds, one start of
each warms the page cache (and, with ``--graph-cache``, fills the cache of optimized graphs,
runtime_lite/backends/onnxruntime/optimized.py, as the first start on a host does).

``--phases`` also splits each start where the time goes, from the moments each child notes
(wall clock, against the parent's spawn): Python with numpy, the runtime's own import, the
engine's import (onnxruntime's, which both sides pay), the load or session, the first run;
and reports the first result apart from the exit (the issue's cold start ends at the first
result; a process's teardown is counted in the spawn-to-exit ratio).

Both sides read the byte code of their packages from ``__pycache__``, as an installed wheel
does: runtime_lite's is compiled first here (an environment with ``PYTHONDONTWRITEBYTECODE``
would otherwise compile every module of the working tree at every start).
"""

from __future__ import annotations

import argparse
import ast
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from modern_models import onnx_path  # noqa: E402
from report import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("resnet50", "mobilenet_v3_small", "efficientnet_b0", "vit_b_16", "bert_base")

#: Each child notes the wall clock after each phase (``note``), on one line of stdout at its exit.
NOTES = """
import sys, time
_notes = []
def note(name):
    _notes.append((name, time.time()))
"""
RUNTIME_LITE = (
    NOTES
    + """
import numpy as np
note("python + numpy")
import runtime_lite
note("runtime import")
import onnxruntime
note("onnxruntime import")
m = runtime_lite.load(sys.argv[1], backend_options={"onnxruntime": {"threads": int(sys.argv[2])}})
note("load / session")
m.run([np.zeros([1 if isinstance(d, str) else d for d in s.shape], s.dtype) for s in m.inputs])
note("first run")
print(repr(_notes))
"""
)
ONNXRUNTIME = (
    NOTES
    + """
import numpy as np
note("python + numpy")
note("runtime import")
import onnxruntime as ort
note("onnxruntime import")
o = ort.SessionOptions(); o.intra_op_num_threads = int(sys.argv[2]); o.inter_op_num_threads = 1
s = ort.InferenceSession(sys.argv[1], o, providers=["CPUExecutionProvider"])
note("load / session")
types = {"tensor(float)": np.float32, "tensor(int64)": np.int64}
s.run(None, {i.name: np.zeros([1 if isinstance(d, str) else d for d in i.shape], types[i.type]) for i in s.get_inputs()})
note("first run")
print(repr(_notes))
"""
)
PHASES = ("python + numpy", "runtime import", "onnxruntime import", "load / session", "first run")


@dataclass
class Start:
    """One fresh process: spawn to exit, and how long each phase took up to its first result (seconds)."""

    total: float
    phases: dict[str, float]

    @property
    def first_result(self) -> float:
        return sum(self.phases.values())


def start(code: str, path: Path, threads: int, env: dict[str, str]) -> Start:
    spawned, begin = time.time(), time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, str(path), str(threads)], check=True, env=env,
                          capture_output=True, text=True)  # fmt: skip
    total = time.perf_counter() - begin
    notes = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    phases, previous = {}, spawned
    for name, moment in notes:
        phases[name], previous = moment - previous, moment
    return Start(total, phases)


def seconds(code: str, path: Path, threads: int, env: dict[str, str]) -> float:
    return start(code, path, threads, env).total


def bench(name: str, workdir: Path, rounds: int, threads: int, env: dict[str, str]) -> dict:
    model = onnx_path(name)
    bundle = workdir / f"{name}.aotb"
    if not bundle.exists():
        import aot

        aot.build(str(model), targets=["onnxruntime"], log=None).save(bundle)
    seconds(RUNTIME_LITE, bundle, threads, env)  # the first start on this host (fills the graph cache where on)
    seconds(ONNXRUNTIME, model, threads, env)  # and the page cache, for both files
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(start(RUNTIME_LITE, bundle, threads, env))
        theirs.append(start(ONNXRUNTIME, model, threads, env))
    ratios = [a.total / b.total for a, b in zip(ours, theirs)]
    firsts = [a.first_result / b.first_result for a, b in zip(ours, theirs)]
    median = statistics.median
    return {"model": name, "runtime_lite": median(a.total for a in ours), "onnxruntime": median(b.total for b in theirs),
            "ratio": median(ratios), "spread": (min(ratios), max(ratios)), "first_result_ratio": median(firsts),
            "phases": {side: {phase: median(s.phases[phase] for s in starts) for phase in PHASES}
                       for side, starts in (("runtime_lite", ours), ("onnxruntime", theirs))}}  # fmt: skip


def print_phases(row: dict) -> None:
    """Where each side's start went, phase by phase (medians, ms): what is left to take out, and what is not ours."""
    print(f"  {row['model']}: spawn to first result {row['first_result_ratio']:.2f}x onnxruntime; phases, ms "
          "(runtime_lite / onnxruntime):")  # fmt: skip
    for phase in PHASES:
        mine, theirs = row["phases"]["runtime_lite"][phase], row["phases"]["onnxruntime"][phase]
        print(f"    {phase:<20}{mine * 1e3:8.1f} /{theirs * 1e3:8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", "2")))
    parser.add_argument("--graph-cache", action="store_true", help="onnxruntime.graph_cache=true (off by default)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the bundles here (default: a temp dir)")
    parser.add_argument("--phases", action="store_true", help="also where each start's time went, phase by phase")
    args = parser.parse_args()
    compileall.compile_dir(str(ROOT / "runtime_lite"), quiet=1)
    print(machine(args.threads), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "AOT_CACHE_DIR": str(workdir / "cache")}
        env["AOT_ONNXRUNTIME_GRAPH_CACHE"] = "1" if args.graph_cache else "0"
        print("| model | runtime_lite (s) | onnxruntime (s) | ratio (median of rounds) | spread |")
        print("|---|---:|---:|---:|---|")
        for name in args.models:
            row = bench(name, workdir, args.rounds, args.threads, env)
            low, high = row["spread"]
            print(f"| {name} | {row['runtime_lite']:.3f} | {row['onnxruntime']:.3f} | {row['ratio']:.2f} | "
                  f"{low:.2f}-{high:.2f} |", flush=True)  # fmt: skip
            if args.phases:
                print_phases(row)


if __name__ == "__main__":
    main()
