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

Both sides read the byte code of their packages from ``__pycache__``, as an installed wheel
does: runtime_lite's is compiled first here (an environment with ``PYTHONDONTWRITEBYTECODE``
would otherwise compile every module of the working tree at every start).
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from modern_models import onnx_path  # noqa: E402
from report import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("resnet50", "mobilenet_v3_small", "efficientnet_b0", "vit_b_16", "bert_base")

RUNTIME_LITE = """
import sys, numpy as np, runtime_lite
m = runtime_lite.load(sys.argv[1], backend_options={"onnxruntime": {"threads": int(sys.argv[2])}})
m.run([np.zeros([1 if isinstance(d, str) else d for d in s.shape], s.dtype) for s in m.inputs])
"""
ONNXRUNTIME = """
import sys, numpy as np, onnxruntime as ort
o = ort.SessionOptions(); o.intra_op_num_threads = int(sys.argv[2]); o.inter_op_num_threads = 1
s = ort.InferenceSession(sys.argv[1], o, providers=["CPUExecutionProvider"])
types = {"tensor(float)": np.float32, "tensor(int64)": np.int64}
s.run(None, {i.name: np.zeros([1 if isinstance(d, str) else d for d in i.shape], types[i.type]) for i in s.get_inputs()})
"""


def seconds(code: str, path: Path, threads: int, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, str(path), str(threads)], check=True, env=env)
    return time.perf_counter() - start


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
        ours.append(seconds(RUNTIME_LITE, bundle, threads, env))
        theirs.append(seconds(ONNXRUNTIME, model, threads, env))
    ratios = [a / b for a, b in zip(ours, theirs)]
    return {"model": name, "runtime_lite": statistics.median(ours), "onnxruntime": statistics.median(theirs),
            "ratio": statistics.median(ratios), "spread": (min(ratios), max(ratios))}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", "2")))
    parser.add_argument("--graph-cache", action="store_true", help="onnxruntime.graph_cache=true (off by default)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the bundles here (default: a temp dir)")
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


if __name__ == "__main__":
    main()
