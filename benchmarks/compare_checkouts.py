"""runtime_lite against an earlier commit of itself: load and run time on the same bundles.

    python benchmarks/compare_checkouts.py --base bd4bf5c            # ResNet-50, SqueezeNet, a 1,000-op chain
    python benchmarks/compare_checkouts.py --base HEAD~3 --rounds 9
    python benchmarks/compare_checkouts.py --base 44269aa --models mobilenet_v3_small efficientnet_b0

The base commit's ``runtime_lite`` is exported into a temporary directory; each
round loads and runs every bundle once with each checkout, in fresh processes,
alternating which goes first, so both see the same machine noise. Reported: the
median of the per-round ratios (this checkout / base) and their spread. Bundles
are built with this checkout's ``aot``; the bundle format must be readable by both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

THREADS = os.environ.get("BENCH_THREADS", "2")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import machine  # noqa: E402

PROBE = """
import json, sys, time
import numpy as np
import runtime_lite
assert runtime_lite.__file__.startswith(sys.argv[3]), (runtime_lite.__file__, sys.argv[3])
path, runs = sys.argv[1], int(sys.argv[2])
start = time.perf_counter()
module = runtime_lite.load(path)
load_s = time.perf_counter() - start
feeds = [np.random.default_rng(0).standard_normal([1 if isinstance(d, str) else d for d in s.shape]).astype(s.dtype)
         for s in module.inputs]
module.run(feeds)
times = []
for _ in range(runs):
    t = time.perf_counter()
    module.run(feeds)
    times.append(time.perf_counter() - t)
times.sort()
print(json.dumps({"load_s": load_s, "run_s": times[len(times) // 2]}))
"""


def export_runtime(revision: str, into: Path) -> Path:
    """``runtime_lite`` as it was at ``revision``, unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision, "runtime_lite"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def probe(pythonpath: Path, bundle: Path, runs: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(pythonpath), OPENBLAS_NUM_THREADS=THREADS, OMP_NUM_THREADS=THREADS)
    # -P: ``python -c`` would otherwise put the working directory first on sys.path, and run from the
    # repository root both probes would import this checkout's runtime_lite.
    out = subprocess.run(
        [sys.executable, "-P", "-c", PROBE, str(bundle), str(runs), str(pythonpath)], check=True, capture_output=True, text=True,
        env=env, cwd=bundle.parent,
    )  # fmt: skip
    return json.loads(out.stdout)


#: The default bundles: ResNet-50, SqueezeNet and the 1,000-op chain of bench_runtime.py.
DEFAULT_MODELS = ("resnet50", "squeezenet", "chain-1000")


def load_model(name: str):
    """A model by name: ``chain-1000``, a modern model of modern_models.py (an ONNX path) or a zoo model."""
    from bench_runtime import chain_model
    from modern_models import MODELS, onnx_path

    from aot.testing import load_zoo_model

    if name == "chain-1000":
        return chain_model()
    if name in MODELS:
        return str(onnx_path(name))
    return load_zoo_model(name)


def build_bundles(workdir: Path, names: list[str]) -> dict[str, Path]:
    sys.path.insert(0, str(ROOT))
    import aot

    bundles = {}
    for name in names:
        path = workdir / f"{name}.aotb"
        aot.build(load_model(name)).save(path)
        bundles[name] = path
    return bundles


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} (range {min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the earlier commit to compare with")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=20, help="runs per process; the median is kept")
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS),
                        help="zoo models, modern models (modern_models.py) or chain-1000")  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        workdir = Path(directory)
        base = export_runtime(args.base, workdir / "base")
        print(f"bundles built with {ROOT}; base runtime_lite from {args.base}", flush=True)
        bundles = build_bundles(workdir, args.models)
        ratios: dict[str, dict[str, list[float]]] = {n: {"load_s": [], "run_s": []} for n in bundles}
        for r in range(args.rounds):
            for name, bundle in bundles.items():
                order = [ROOT, base] if r % 2 == 0 else [base, ROOT]
                results = {str(p): probe(p, bundle, args.runs) for p in order}
                ours, theirs = results[str(ROOT)], results[str(base)]
                for key in ("load_s", "run_s"):
                    ratios[name][key].append(ours[key] / theirs[key])
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(f"\nthis checkout / {args.base}, median of {args.rounds} rounds (range), on {machine()}:")
    print("| bundle | load | run |")
    print("|---|---:|---:|")
    for name, values in ratios.items():
        print(f"| {name} | {spread(values['load_s'])} | {spread(values['run_s'])} |")


if __name__ == "__main__":
    main()
