"""What a delegate ``Module.run`` adds over onnxruntime's own ``run``, side by side in one process.

    python benchmarks/bench_call_overhead.py                     # a one-op model: the overhead in microseconds
    python benchmarks/bench_call_overhead.py --models mobilenet_v3_small squeezenet1_1 efficientnet_b0

A one-op model (Relu over 16 floats) built with ``--target onnxruntime`` runs in a tight loop
against an ``InferenceSession`` over the same ONNX model, same threads, alternating blocks of
calls; the overhead is the difference of the medians of the blocks' per-call times. With
``--models`` (the random-weight exports of benchmarks/modern_models.py) each model's delegate
and onnxruntime on the original file alternate one run each per round, after 0.2 s of untimed
runs of their own (bench_host.alternate_times); the median ratio is printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_host  # noqa: E402
from bench_modern import model_feeds  # noqa: E402
from modern_models import onnx_path  # noqa: E402
from report import machine  # noqa: E402

import aot  # noqa: E402
import runtime_lite  # noqa: E402


def session(model: str | bytes, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def per_call_us(call, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def overhead(threads: int, blocks: int, calls: int) -> tuple[float, float]:
    """(onnxruntime's per-call us, the delegate's extra us), medians over alternating blocks."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    module = runtime_lite.load(aot.build(model, targets=["onnxruntime"], log=None).to_bytes(),
                               backend_options={"onnxruntime": {"threads": threads}})  # fmt: skip
    reference = session(model.SerializeToString(), threads)
    feeds = {"x": np.ones((1, 16), np.float32)}
    ours, theirs = [], []
    for _ in range(blocks):
        ours.append(per_call_us(lambda: module.run(feeds), calls))
        theirs.append(per_call_us(lambda: reference.run(None, feeds), calls))
    return statistics.median(theirs), statistics.median(ours) - statistics.median(theirs)


def model_ratio(name: str, threads: int, rounds: int, workdir: Path) -> tuple[float, float, float]:
    """(delegate ms, onnxruntime ms, median of the per-round ratios)."""
    path = str(onnx_path(name))
    bundle = workdir / f"{name}.aotb"
    aot.build(path, targets=["onnxruntime"], log=None).save(bundle)
    module = runtime_lite.load(bundle, backend_options={"onnxruntime": {"threads": threads}})
    reference = session(path, threads)
    feeds = model_feeds(reference)
    for _ in range(3):
        module.run(feeds)
        reference.run(None, feeds)
    lite, theirs = bench_host.alternate_times(lambda: module.run(feeds), lambda: reference.run(None, feeds), rounds)
    ratios = [a / b for a, b in zip(lite, theirs)]
    return statistics.median(lite) * 1e3, statistics.median(theirs) * 1e3, statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", "2")))
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--models", nargs="*", default=[])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    print(machine(args.threads), flush=True)
    base, extra = overhead(args.threads, args.blocks, args.calls)
    print(f"one-op model: onnxruntime {base:.1f} us a call, the delegate {extra:+.1f} us over it", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            lite, theirs, ratio = model_ratio(name, args.threads, args.rounds, Path(tmp))
            print(f"{name}: delegate {lite:.2f} ms, onnxruntime {theirs:.2f} ms, ratio {ratio:.3f}", flush=True)


if __name__ == "__main__":
    main()
