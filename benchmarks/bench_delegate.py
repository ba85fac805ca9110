"""The onnxruntime delegate (``--target onnxruntime``) against onnxruntime running the original ONNX file.

    python benchmarks/bench_delegate.py                                 # all eight, writes BENCHMARKS.md
    python benchmarks/bench_delegate.py --models resnet50 squeezenet --no-write

For each model: ``aot.build(..., targets=["onnxruntime"])`` and the host-only build (bundle
size ratio), then in one process, side by side, with the same thread count for both:

* **latency**: ``runtime_lite.load(bundle)`` with ``onnxruntime.threads`` set, and an
  ``InferenceSession`` over the original file, alternating one run each per round (the
  median ratio, and the spread of per-round ratios);
* **outputs**: the largest relative L2 error of any output against onnxruntime's;
* **load**: ``runtime_lite.load`` (bundle read, every blob's sha256, the recipe check, the
  session) against ``InferenceSession`` creation from the file, alternating, median of 3.

Zoo models (ResNet-50, SqueezeNet, ShuffleNet) come from the onnx wheel with random weights
(aot/testing/zoo.py); the others are the random-init torchvision / transformers exports of
benchmarks/modern_models.py (cached under /tmp).
"""

from __future__ import annotations

import sys

from bench_env import THREADS  # before numpy: it sets the thread counts

# isort: split

import argparse  # noqa: E402
import gc  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_host  # noqa: E402
from bench_modern import model_feeds  # noqa: E402
from modern_models import onnx_path  # noqa: E402
from report import command_line, cpu, publish, publish_figures  # noqa: E402

import aot  # noqa: E402
import runtime_lite  # noqa: E402
from aot.testing import ZOO_MODELS, load_zoo_model  # noqa: E402

MODELS = (
    "resnet50", "squeezenet", "shufflenet", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny",
    "vit_b_16", "bert_base",
)  # fmt: skip
TARGETS = {"latency": 1.05, "rel_l2": 1e-5, "load": 1.10, "size": 1.05}


def source(name: str, workdir: Path) -> str:
    """The model as an ONNX file both runtimes read."""
    if name in ZOO_MODELS:
        path = workdir / f"{name}.onnx"
        if not path.exists():
            import onnx

            onnx.save(load_zoo_model(name), str(path))
        return str(path)
    return str(onnx_path(name))


#: Both sides' threads sleep between runs: two sessions in one process, alternating, would otherwise
#: each find the cores held by the other's spinning threads (the 1 ms models read 0.5x to 2x at random).
OPTIONS = {"onnxruntime": {"threads": THREADS, "spinning": False}}


def reference_session(path: str, spinning: bool = False) -> ort.InferenceSession:
    """onnxruntime on the original file. ``spinning``: its intra-op threads spin between runs (onnxruntime's
    default); off here by default, as the delegate's OPTIONS set it, so both sides run alike."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as the delegate's (OPTIONS)
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_model(name: str, rounds: int, workdir: Path) -> dict:
    path = source(name, workdir)
    start = time.perf_counter()
    result = aot.build(path, targets=["onnxruntime"], log=None)
    build_s = time.perf_counter() - start
    bundle = workdir / f"{name}.ort.aotb"
    size = result.save(bundle)
    regions = result.regions
    del result
    host_size = aot.build(path, log=None).save(workdir / f"{name}.host.aotb")
    gc.collect()
    options = OPTIONS
    module = runtime_lite.load(bundle, backend_options=options)
    session = reference_session(path)
    feeds = model_feeds(session)
    error, lite, ort_times = bench_host.against_onnxruntime(module, session, feeds, rounds)
    ratios = [a / b for a, b in zip(lite, ort_times)]
    placement = sorted({p["runs_on"] for p in module.placement.values()})
    module.close()
    module = session = None  # freed before the load timings
    gc.collect()
    loads, mapped, creates = [], [], []
    for _ in range(3):
        loads.append(timed(lambda: runtime_lite.load(bundle, backend_options=options).close()))
        gc.collect()
        mapped.append(
            timed(lambda: runtime_lite.load(bundle, backend_options=options, map_file=True, verify=False).close())
        )
        gc.collect()
        creates.append(timed(lambda: reference_session(path)))
        gc.collect()
    return {
        "model": name,
        "delegate_ms": statistics.median(lite) * 1e3,
        "onnxruntime_ms": statistics.median(ort_times) * 1e3,
        "ratio": statistics.median(lite) / statistics.median(ort_times),
        "paired": statistics.median(ratios),
        "best_ratio": min(lite) / min(ort_times),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "rel_l2": error,
        "load_s": statistics.median(loads),
        "mapped_s": statistics.median(mapped),
        "session_s": statistics.median(creates),
        "size_ratio": size / host_size,
        "regions": regions,
        "runs_on": ", ".join(placement),
        "build_s": build_s,
    }


def render(rows: list[dict], failures: dict[str, str], command: str, rounds: int) -> str:
    lines = [
        "## The onnxruntime delegate (issue 27)",
        "",
        "`aot-build --target onnxruntime` bundles run by runtime_lite (the recipe on onnxruntime's CPU",
        "provider, weights bound from the bundle's blobs) against onnxruntime running the original ONNX",
        f"file, both with {THREADS} intra-op threads that sleep between runs (`spinning: false`: two sessions spinning in one process hold each other's cores), alternating one timed run each (after 0.2 s of untimed runs of its own) for {rounds} rounds, batch 1.",
        "`ratio` is of the medians, `paired` the median of the per-round ratios, `best-of` the ratio of each",
        "side's fastest round (the figure least moved by other processes on a shared machine), `spread` the",
        "lowest..highest per-round ratio; `load` is `runtime_lite.load`",
        "(read into private memory, sha256 of every blob, recipe check, session), `mapped` the same with",
        "`map_file=True, verify=False` (the file mapped, blobs not hashed: what onnxruntime itself does with",
        "a model file), each over onnxruntime's session creation from the file (`session`); `size` is the",
        "bundle over the host-only bundle. Targets: latency <= "
        f"{TARGETS['latency']}, rel. L2 <= {TARGETS['rel_l2']:g}, load <= {TARGETS['load']}, size <= {TARGETS['size']}.",
        "",
        f"- Command: `{command}`",
        f"- CPU: {cpu()}; onnxruntime {ort.__version__}, numpy {np.__version__}",
        "",
        "| model | delegate (ms) | onnxruntime (ms) | ratio | paired | best-of | spread | rel. L2 | load (s) "
        "| mapped (s) | session (s) | load ratio | mapped ratio | size ratio | regions |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        regions = ", ".join(f"{k} {v}" for k, v in r["regions"].items() if v)
        lines.append(
            f"| {r['model']} | {r['delegate_ms']:.2f} | {r['onnxruntime_ms']:.2f} | {r['ratio']:.3f} "
            f"| {r['paired']:.3f} | {r['best_ratio']:.3f} "
            f"| {r['ratio_min']:.2f}..{r['ratio_max']:.2f} | {r['rel_l2']:.1e} | {r['load_s']:.3f} "
            f"| {r['mapped_s']:.3f} | {r['session_s']:.3f} | {r['load_s'] / r['session_s']:.2f} "
            f"| {r['mapped_s'] / r['session_s']:.2f} | {r['size_ratio']:.4f} | {regions} |"
        )
    for name, why in failures.items():
        lines.append(f"| {name} | failed: {why} | | | | | | | | | | | | | |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--no-write", action="store_true", help="print the report instead of writing BENCHMARKS.md")
    args = parser.parse_args()
    print(cpu(), flush=True)
    rows, failures = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            try:
                row = bench_model(name, args.rounds, Path(tmp))
            except Exception as e:  # one model's failure is a row of the report, not the end of the run
                failures[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                print(f"{name}: {failures[name]}", flush=True)
                continue
            rows.append(row)
            print({k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
            for f in Path(tmp).glob(f"{name}.*.aotb"):
                f.unlink()
    command = command_line("bench_delegate.py")
    publish("delegate", render(rows, failures, command, args.rounds), args.no_write)
    columns = [r["model"] for r in rows]
    publish_figures(
        "delegate", columns,
        [["latency", *(round(r["ratio"], 3) for r in rows)],
         ["verified load / session", *(round(r["load_s"] / r["session_s"], 2) for r in rows)],
         ["mapped load, no hashing / session", *(round(r["mapped_s"] / r["session_s"], 2) for r in rows)]],
        command, f"Outputs within {max((r['rel_l2'] for r in rows), default=0):.1e} relative L2 of onnxruntime.",
        no_write=args.no_write,
    )  # fmt: skip


if __name__ == "__main__":
    main()
