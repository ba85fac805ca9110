"""The runtime's own costs: dispatch per instruction, loading (time and memory), import.

    python benchmarks/bench_runtime.py              # writes the runtime section of BENCHMARKS.md
    python benchmarks/bench_runtime.py --no-write

* dispatch: a chain of 1,000 tiny elementwise ops (Add, Mul, Sub on a 1x4 tensor),
  runtime_lite and onnxruntime alternating in one process; time per op;
* loading: ResNet-50 (random weights) and a synthetic bundle with 500 MB of weights.
  Each load runs in a fresh process after the file is in the page cache. The process
  reports the load time, with blob verification (the default) and without, and the
  peak RSS it added over the weights' size;
* import: ``import runtime_lite`` beyond ``import numpy``, in fresh processes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import bench_env  # noqa: F401  (before numpy: it sets the thread counts)

# isort: split

import numpy as np  # noqa: E402
from onnx import helper  # noqa: E402

import aot  # noqa: E402
import runtime_lite  # noqa: E402
from aot.testing import load_zoo_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_host import alternate, bench_import, machine, onnxruntime_session  # noqa: E402
from report import command_line, write_section  # noqa: E402

from tests.helpers import make_model  # noqa: E402

CHAIN = 1000
#: (verify, map_file) pairs each bundle is loaded with
LOAD_MODES = ((True, False), (False, False), (True, True), (False, True))

LOAD = """
import json, sys, time
import numpy as np
import runtime_lite
path, verify, map_file = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
def status(key):  # VmRSS / VmHWM (the peak); ru_maxrss would include the parent's peak before exec
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))
def rss():
    return status("VmRSS")
before = rss()
start = time.perf_counter()
module = runtime_lite.load(path, verify=verify, map_file=map_file)
load_s = time.perf_counter() - start
after_load = rss()
module.run([np.zeros([1 if isinstance(d, str) else d for d in s.shape], s.dtype) for s in module.inputs])
peak = status("VmHWM")
print(json.dumps({"load_s": load_s, "load_rss": after_load - before, "peak_rss": peak - before}))
"""


def chain_model():
    ops = ("Add", "Mul", "Sub")
    nodes = [helper.make_node(ops[i % 3], ["x" if i == 0 else f"t{i - 1}", "c"], [f"t{i}"]) for i in range(CHAIN)]
    nodes.append(helper.make_node("Identity", [f"t{CHAIN - 1}"], ["y"]))
    return make_model(nodes, {"x": np.zeros((1, 4), np.float32)}, ["y"], {"c": np.full((1, 4), 1.0001, np.float32)})


def bench_dispatch(rounds: int, workdir: Path) -> dict:
    model = chain_model()
    path = workdir / "chain.onnx"
    path.write_bytes(model.SerializeToString())
    module = runtime_lite.load(aot.build(model).to_bytes())
    session = onnxruntime_session(str(path))
    x = np.ones((1, 4), np.float32)
    for _ in range(5):
        module.run([x])
        session.run(None, {"x": x})
    ours, theirs = alternate(lambda: module.run([x]), lambda: session.run(None, {"x": x}), rounds)
    return {"ours_us": ours / CHAIN * 1e6, "onnxruntime_us": theirs / CHAIN * 1e6}


def big_weights_model(megabytes: int):
    """A chain of MatMuls whose weights add up to ``megabytes``, as distinct 16 MB tensors."""
    count = max(1, megabytes // 16)
    weights = {f"w{i}": np.random.default_rng(i).standard_normal((2048, 2048)).astype(np.float32) for i in range(count)}
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i - 1}", f"w{i}"], [f"h{i}"]) for i in range(count)]
    nodes.append(helper.make_node("Identity", [f"h{count - 1}"], ["y"]))
    return make_model(nodes, {"x": np.zeros((1, 2048), np.float32)}, ["y"], weights)


def bench_load(name: str, model, workdir: Path, rounds: int) -> dict:
    path = workdir / f"{name}.aotb"
    result = aot.build(model)
    result.save(path)
    weights = sum(c.nbytes for c in result.plan.constants)
    path.read_bytes()  # into the page cache
    rows = {}
    for mode in LOAD_MODES:
        verify, map_file = mode
        runs = [
            json.loads(
                subprocess.run(
                    [sys.executable, "-c", LOAD, str(path), str(int(verify)), str(int(map_file))],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )  # fmt: skip
            for _ in range(rounds)
        ]
        rows[mode] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    return {"name": name, "weights": weights, "bundle": path.stat().st_size, "modes": rows}


def render(dispatch: dict, loads: list[dict], import_cost: tuple[float, float], command: str) -> str:
    extra, numpy_import = import_cost
    lines = [
        "## Runtime costs: dispatch, loading, import",
        "",
        f"- Command: `{command}`",
        f"- Machine: {machine()}",
        "",
        f"**Dispatch**: a chain of {CHAIN:,} elementwise ops on a 1x4 tensor, alternating runs:",
        f"{dispatch['ours_us']:.2f} µs per op for runtime_lite, {dispatch['onnxruntime_us']:.2f} µs for onnxruntime "
        f"(ratio {dispatch['ours_us'] / dispatch['onnxruntime_us']:.2f}; target ≤ 3 µs: "
        f"{'met' if dispatch['ours_us'] <= 3 else 'MISSED'}). Each op is one numpy ufunc call on",
        "a closure bound at load; the loop does nothing else.",
        "",
        "**Loading**, in a fresh process, file in the page cache (median of the runs). `RSS after",
        "load` is what `load` added to the resident set (target ≤ 1.1x the weights); `peak /",
        "weights` is the peak RSS (VmHWM) added by the load and a first run, activations",
        "included. `private` (the default) reads the file once into private read-only memory,",
        "so a file replaced or truncated later cannot reach the loaded model",
        "(docs/RELIABILITY.md, 1b); `map_file` maps it: no copy, pages shared with the page",
        "cache and other processes, only what verification or a run touches becomes resident.",
        "",
        "| bundle | weights (MB) | read | verify | load (ms) | RSS after load (MB) | after load / weights | peak / weights |",
        "|---|---:|---|---|---:|---:|---:|---:|",
    ]
    for row in loads:
        for (verify, map_file), r in row["modes"].items():
            read, label = ("map_file" if map_file else "private"), ("sha256" if verify else "off")
            lines.append(
                f"| {row['name']} | {row['weights'] / 1e6:.0f} | {read} | {label} | {r['load_s'] * 1e3:.1f} | "
                f"{r['load_rss'] / 1e6:.1f} | {r['load_rss'] / row['weights']:.2f} | {r['peak_rss'] / row['weights']:.2f} |"
            )
    lines += [
        "",
        f"**Import**: `import runtime_lite` costs {extra * 1e3:.0f} ms beyond `import numpy` "
        f"({numpy_import * 1e3:.0f} ms with process start); target ≤ 150 ms: {'met' if extra <= 0.15 else 'MISSED'}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--big-mb", type=int, default=500, help="weights of the synthetic large bundle")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        workdir = Path(directory)
        print("dispatch ...", flush=True)
        dispatch = bench_dispatch(max(args.rounds, 15), workdir)
        loads = []
        for name, model in (("resnet50", load_zoo_model("resnet50")), (f"{args.big_mb} MB of weights",
                                                                       big_weights_model(args.big_mb))):  # fmt: skip
            print(f"loading {name} ...", flush=True)
            loads.append(bench_load(name.split()[0] if name == "resnet50" else "synthetic", model, workdir, 5))
        print("import ...", flush=True)
        import_cost = bench_import(max(args.rounds, 15))
    text = render(dispatch, loads, import_cost, command_line("bench_runtime.py"))
    print(text)
    if not args.no_write:
        write_section("runtime", text)


if __name__ == "__main__":
    main()
