"""The host plan's GEMM policies side by side with onnxruntime, one process, runs interleaved.

    python benchmarks/compare_policies.py                              # issue 27's eight models
    python benchmarks/compare_policies.py --models resnet50 vit_b_16 --runs 30

Each round runs the model under every policy and on onnxruntime, in turn, so a
co-tenant's load hits them alike (on a shared 2-core machine, onnxruntime's own
ResNet-50 time moves 2-3x between minutes); each way runs untimed for 0.2 s before its
timed run, so that it does not meet the threads the previous way left spinning
(bench_host.alternate_times). Policies (kernels/gemm_policy.py):

- ``split``: the fixed policy before issue 27 (blocks on the caller and a pool,
  OpenBLAS at one thread, 8M multiply-adds threshold): the base's behaviour;
- ``auto``: the policy measured for this machine (cached), with its watchdog;
- ``blas``: OpenBLAS's own threads for every product, no pool (the env override).

Reported per model: each policy's median ratio to onnxruntime over the rounds and the
range of the per-round ratios. Zoo models come from the onnx wheel (random weights);
modern ones from modern_models.py's cache.
"""

from __future__ import annotations

import os
import sys

THREADS = os.environ.get("BENCH_THREADS", "2")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, THREADS)  # before numpy loads its BLAS

import argparse  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_host  # noqa: E402
from bench_modern import model_feeds  # noqa: E402
from modern_models import MODELS, onnx_path  # noqa: E402

import aot  # noqa: E402
import runtime_lite  # noqa: E402
from aot.testing import ZOO_MODELS, load_zoo_model  # noqa: E402
from runtime_lite.kernels import gemm, gemm_policy  # noqa: E402

ISSUE_27_MODELS = ["resnet50", "vit_b_16", "bert_base", "mobilenet_v3_small", "efficientnet_b0", "shufflenet",
                   "squeezenet", "convnext_tiny"]  # fmt: skip
TARGETS = {"resnet50": 1.5, "vit_b_16": 1.5, "bert_base": 1.5}
DEFAULT_TARGET = 2.5


def model_file(name: str, workdir: Path) -> Path:
    if name in ZOO_MODELS:
        path = workdir / f"{name}.onnx"
        path.write_bytes(load_zoo_model(name).SerializeToString())
        return path
    return onnx_path(name)


def policies() -> dict[str, object]:
    """The gemm.py states to swap in: the measured one, the fixed split, and none (numpy.matmul as is)."""
    measured = gemm._pool()
    if measured is None:
        raise SystemExit("numpy's BLAS is not a multi-threaded OpenBLAS here: there is only one policy")
    split = gemm._Host(measured.blas, measured.workers, gemm_policy.default_policy("split"))
    return {"split": split, "auto": measured, "blas": gemm._NO_HOST}


def bench(name: str, runs: int, workdir: Path, states: dict[str, object]) -> dict:
    path = model_file(name, workdir)
    bundle = workdir / f"{name}.aotb"
    aot.build(str(path)).save(bundle)
    module = runtime_lite.load(bundle)
    session = bench_host.onnxruntime_session(str(path))
    feeds = model_feeds(session)

    def under(state):
        def run():
            gemm._state = state
            module.run(feeds)

        return run

    ways = {policy: under(state) for policy, state in states.items()}
    ways["onnxruntime"] = lambda: session.run(None, feeds)
    for way in ways.values():  # warm up
        way()
    times: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(runs):
        for way, run in ways.items():
            bench_host.settle(run)  # untimed: outlasts the threads the previous way left spinning
            start = time.perf_counter()
            run()
            times[way].append(time.perf_counter() - start)
    gemm._state = states["auto"]
    ort = times.pop("onnxruntime")
    row = {"model": name, "onnxruntime_ms": statistics.median(ort) * 1e3}
    for policy, values in times.items():
        ratios = [a / b for a, b in zip(values, ort)]
        row[policy] = (statistics.median(values) * 1e3, statistics.median(ratios), min(ratios), max(ratios))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=ISSUE_27_MODELS, choices=list(ZOO_MODELS) + list(MODELS))
    parser.add_argument("--runs", type=int, default=15, help="interleaved rounds per model")
    args = parser.parse_args()
    print(bench_host.machine(), flush=True)
    states = policies()
    print(f"measured policy: {states['auto'].policy}", flush=True)
    names = list(states)
    print("| model | onnxruntime (ms) | " + " | ".join(f"{p}: ms, ratio (range)" for p in names) + " | target |")
    print("|---|---:|" + "---:|" * len(names) + "---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            row = bench(name, args.runs, Path(tmp), states)
            cells = [f"{row[p][0]:.1f}, {row[p][1]:.2f} ({row[p][2]:.2f}-{row[p][3]:.2f})" for p in names]
            target = TARGETS.get(name, DEFAULT_TARGET)
            verdict = "met" if row["auto"][1] <= target else "missed"
            print(f"| {name} | {row['onnxruntime_ms']:.1f} | " + " | ".join(cells) + f" | ≤ {target} (auto): {verdict} |",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
