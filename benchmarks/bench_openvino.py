"""The OpenVINO delegate (``--target openvino``) against OpenVINO and onnxruntime on the original ONNX file.

    python benchmarks/bench_openvino.py                                  # resnet50 squeezenet mobilenet_v3_small
    python benchmarks/bench_openvino.py --models squeezenet --rounds 40

For each model, in one process, 2 threads each (``BENCH_THREADS``), batch 1, f32 on every side:

* **latency**: ``runtime_lite.load(bundle)`` on OpenVINO, OpenVINO compiling the original file, and an
  onnxruntime ``InferenceSession`` over it; one timed run of each per round, each after ~0.2 s of
  untimed runs of its own side (bench_host.settle), median of the rounds, as ratios to onnxruntime;
* **overhead**: ``Module.run`` against a bare ``infer()`` of the delegate's own OpenVINO request with the
  inputs already in place, alternating (the median of the per-pair differences, microseconds): what the
  bundle adds over the engine (the runtime's checks, the input and output copies);
* **outputs**: the relative L2 of the bundle's outputs against onnxruntime's on the original file.

Prints the CPU (runtime_lite.tools.machine.cpu(): ISA and VNNI); writes nothing (the figures go in reports).
"""

from __future__ import annotations

import sys

from bench_env import THREADS  # before numpy: it sets the thread counts

# isort: split

import argparse  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import openvino as ov  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_host  # noqa: E402
from bench_delegate import reference_session, source  # noqa: E402
from bench_modern import model_feeds  # noqa: E402

import aot  # noqa: E402
import runtime_lite  # noqa: E402
from aot.testing import relative_l2  # noqa: E402
from runtime_lite.tools.machine import cpu  # noqa: E402

MODELS = ("resnet50", "squeezenet", "mobilenet_v3_small")
OPTIONS = {"openvino": {"threads": THREADS, "hint": "latency", "precision": "f32"}}


def original_on_openvino(path: str):
    """OpenVINO's own path for the file: read it, compile it for the CPU with the delegate's settings."""
    config = {
        "INFERENCE_NUM_THREADS": str(THREADS),
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": OPTIONS["openvino"]["precision"],
    }
    if OPTIONS["openvino"].get("pinning") is not None:
        config["ENABLE_CPU_PINNING"] = "YES" if OPTIONS["openvino"]["pinning"] else "NO"
    return ov.Core().compile_model(path, "CPU", config)


def sides_times(sides: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds of each side in each round, each timed call after ~0.2 s of its own side's untimed calls."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, call in sides.items():
            bench_host.settle(call)
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return times


def bench_model(name: str, rounds: int, workdir: Path, auto: bool = False) -> dict:
    path = source(name, workdir)
    bundle = workdir / f"{name}.openvino.aotb"
    aot.build(path, targets=["openvino"], log=None).save(bundle)
    module = runtime_lite.load(bundle, backend_options=OPTIONS)
    sides = {}
    if auto:  # --target auto, measured at load (no cached verdict: cache=false), at the same thread count
        auto_bundle = workdir / f"{name}.auto.aotb"
        aot.build(path, targets=["auto"], log=None).save(auto_bundle)
        placed = runtime_lite.load(auto_bundle, backend_options={"auto": {"threads": THREADS, "cache": False}})
        sides["auto"] = lambda: placed.run(feeds)
    placement = sorted({p["runs_on"] for p in module.placement.values()})
    # onnxruntime as a user runs it (its threads spin between runs: on a 2 ms model that is 1.3 vs 1.9 ms without)
    session = reference_session(path, spinning=True)
    feeds = model_feeds(session)
    compiled = original_on_openvino(path)
    file_request = compiled.create_infer_request()
    ordered = [feeds[i.name] for i in session.get_inputs()]
    error = max(relative_l2(a, b) for a, b in zip(module.run(feeds), session.run(None, feeds)))
    times = sides_times(
        {
            "bundle": lambda: module.run(feeds),
            "openvino_file": lambda: file_request.infer(ordered, share_inputs=True),
            "onnxruntime": lambda: session.run(None, feeds),
            **sides,
        },
        rounds,
    )
    row = {"model": name, "placement": placement, "rel_l2": error}
    if auto:
        (detail,) = {p["detail"] for p in placed.placement.values()}
        row["auto_chose"] = detail.split(" (")[0].removeprefix("on ")
        row["auto_vs_faster_file"] = statistics.median(times["auto"]) / min(
            statistics.median(times["openvino_file"]), statistics.median(times["onnxruntime"])
        )
    ort_ms = statistics.median(times["onnxruntime"]) * 1e3
    row["onnxruntime_ms"] = ort_ms
    for side in ("bundle", "openvino_file"):
        row[f"{side}_ratio"] = statistics.median(times[side]) * 1e3 / ort_ms
    if module._modules and getattr(module._modules[0].handle, "engine", None) is not None and len(module._modules) == 1:
        engine = module._modules[0].handle.engine
        request = engine._request()
        # The engine's floor: a bare infer() of the request with its inputs already in place (set once here).
        engine._feed(request, [feeds[spec.name] for spec in module._modules[0].handle.inputs])
        # Same engine, same threads on both sides: no settling, paired rounds, enough of them for ~2 s.
        pairs = max(rounds, int(2.0 / max(min(times["bundle"]), 1e-4)))
        mine, its = bench_host.alternate_times(
            lambda: module.run(feeds), lambda: request.infer(share_outputs=True), pairs, False
        )
        row["overhead_us"] = statistics.median(a - b for a, b in zip(mine, its)) * 1e6
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--precision", choices=("f32", "bf16"), default="f32", help="OpenVINO's (both sides'); onnxruntime's is f32"
    )
    parser.add_argument("--unpinned", action="store_true", help="OpenVINO's threads not pinned (both sides)")
    parser.add_argument(
        "--auto", action="store_true", help="also a --target auto bundle: what it chose, its time over the faster file"
    )
    args = parser.parse_args()
    OPTIONS["openvino"]["precision"] = args.precision
    if args.unpinned:
        OPTIONS["openvino"]["pinning"] = False
    print(
        f"CPU: {cpu()}; {THREADS} threads each; openvino {ov.get_version().split('-')[0]} in {args.precision}"
        + (", unpinned" if args.unpinned else "")
    )
    print("model               placement   onnxruntime ms   bundle/ort   ov-file/ort   Module.run over engine   rel L2")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            row = bench_model(name, args.rounds, Path(tmp), args.auto)
            overhead = f"{row['overhead_us']:8.1f} us" if "overhead_us" in row else "       n/a"
            print(
                f"{name:<20}{','.join(row['placement']):<12}{row['onnxruntime_ms']:>14.2f}"
                f"{row['bundle_ratio']:>13.3f}{row['openvino_file_ratio']:>14.3f}{overhead:>25}{row['rel_l2']:>10.1e}",
                flush=True,
            )
            if args.auto:
                print(f"{'':<20}auto chose {row['auto_chose']}: {row['auto_vs_faster_file']:.3f}x the faster file")


if __name__ == "__main__":
    main()
