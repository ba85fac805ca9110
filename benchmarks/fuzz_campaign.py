"""A campaign of hostile bundles against runtime_lite: the figures in docs/RELIABILITY.md.

Each case is a real bundle (host, NPU or TensorRT partition of two small models)
with a meaning-level mutation and valid checksums, loaded with
``max_memory=64 MiB, max_run_seconds=1`` and run in a worker process under an
address-space cap and a 10 s timeout (tests/hostile.py). A clean outcome is
"rejected at load" (BundleError), "refused at run" (ExecutionError/InputError)
or "ran" with outputs the caller owns; anything else is a failure and is written
to ``--failures`` for replay.

    python benchmarks/fuzz_campaign.py --cases 100000 --seed 2026 --workers 2
    python benchmarks/fuzz_campaign.py --families onnxruntime --cases 10000   # onnxruntime recipes (issue 27)

``--families`` picks what is drawn (issue 27 added onnxruntime, issue 29 budget and cache), in equal shares per batch:

* ``bundle``: the mutated bundles above;
* ``onnxruntime``: onnxruntime bundles whose recipe or weight references are attacked;
* ``budget``: a seed's host plan with an amplifying chain (the input tiled to 1-60 MiB, cast, then
  any kernel one to four times, results kept), run under tracemalloc: a failure too if the traced
  peak passes the 64 MiB budget, i.e. a kernel allocated before the plan checked its cost;
* ``cache``: an engine cache attacked by someone who can write its directory while a process uses
  it; a failure if anything outside the cache is written, an engine is served under a key it was
  never stored under, or a timing cache is read from outside or unbounded (tests/hostile.py).

Issue 40 added (tests/hostile_surfaces.py, each with its own oracle):

* ``int8``: a calibrated int8 NPU bundle with one scale, zero point, multiplier or shift made hostile; a
  failure if an illegal value is not refused at load, or a parameter no kernel reads changes the outputs;
* ``device``: a lying ``__cuda_array_interface__`` or DLPack capsule (rank 2^31-1, NULL pointers, dims,
  dtype, device, version) passed to ``run``; anything but a one-line InputError/ExecutionError fails;
* ``signature``: a plan whose output goes through a tile, expand, pad, resize, concat or reshape the
  signature does not declare; a failure if it runs, or if a static plan is not refused at load;
* ``ortshape``: onnxruntime recipes with Resize's axes, aspect-ratio policies, sizes and scales, or up to 40
  graph outputs never fetched; a failure if a run goes through while onnxruntime held more than the
  budget (its graph outputs alone, sized by onnx's shape inference).

    python benchmarks/fuzz_campaign.py --families int8,device,signature,ortshape --cases 20000
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import machine  # noqa: E402

from tests import hostile, hostile_surfaces  # noqa: E402

#: The families of cases: each draws ``count`` cases from the bundle seeds (or, for onnxruntime,
#: its own seeds: bundles whose one module is an onnxruntime recipe).
FAMILY_CASES = {
    "bundle": lambda seeds, count, rng: hostile.cases(seeds["bundle"], count, rng),
    "onnxruntime": lambda seeds, count, rng: hostile.onnxruntime_cases(seeds["onnxruntime"], count, rng),
    "openvino": lambda seeds, count, rng: hostile.onnxruntime_cases(seeds["openvino"], count, rng),
    "budget": lambda seeds, count, rng: hostile.budget_cases(seeds["bundle"], count, rng),
    "cache": lambda seeds, count, rng: hostile.cache_cases(count, rng),
    # issue 40's surfaces (tests/hostile_surfaces.py)
    "int8": lambda seeds, count, rng: hostile_surfaces.int8_cases(seeds["int8"][0], count, rng),
    "device": lambda seeds, count, rng: hostile_surfaces.device_cases(seeds["bundle"][0], count, rng),
    "signature": lambda seeds, count, rng: hostile_surfaces.signature_cases(seeds["bundle"], count, rng),
    "ortshape": lambda seeds, count, rng: hostile_surfaces.ort_shape_cases(seeds["ortshape"][0], count, rng),
}
#: Seeds a family needs beyond the bundle seeds, made only when it is drawn.
EXTRA_SEEDS = {
    "onnxruntime": lambda: hostile.onnxruntime_seeds("onnxruntime"),
    "openvino": lambda: hostile.onnxruntime_seeds("openvino"),  # the same recipes, run by OpenVINO
    "int8": lambda: [hostile_surfaces.int8_npu_seed()],
    "ortshape": lambda: [hostile_surfaces.onnxruntime_relu_seed()],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--batch", type=int, default=2000, help="cases between progress lines")
    parser.add_argument("--failures", type=Path, default=Path("fuzz-failures"), help="where failing bundles go")
    parser.add_argument("--families", default="bundle,budget,cache", help=f"comma-separated: {', '.join(FAMILY_CASES)}")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="stop after the batch that passes this many seconds (the summary says so)")  # fmt: skip
    args = parser.parse_args()
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = sorted(set(families) - set(FAMILY_CASES))
    if unknown or not families:
        parser.error(f"unknown families {unknown}; choose from {sorted(FAMILY_CASES)}")

    seeds = {"bundle": hostile.seeds()}
    for family in families:
        if family in EXTRA_SEEDS:
            seeds[family] = EXTRA_SEEDS[family]()
    seed_list = [s for group in seeds.values() for s in group]
    rng = random.Random(args.seed)
    harness = hostile.Harness(workers=args.workers)
    started = time.perf_counter()
    done = 0
    reported = 0
    try:
        while done < args.cases:
            batch = min(args.batch, args.cases - done)
            for i, family in enumerate(families):
                share = batch // len(families) + (1 if i < batch % len(families) else 0)
                harness.run(FAMILY_CASES[family](seeds, share, rng))
            done += batch
            for what, outcome, data in harness.failures[reported:]:
                args.failures.mkdir(parents=True, exist_ok=True)
                (args.failures / f"case-{reported:05d}.bundle").write_bytes(data)  # a cache case: its seed
                print(f"FAIL case-{reported:05d} {what}: {outcome}", flush=True)
                reported += 1
            rate = done / (time.perf_counter() - started)
            print(f"{done:>7} cases  {rate:5.1f}/s  failures {len(harness.failures)}", flush=True)
            if args.max_seconds is not None and time.perf_counter() - started > args.max_seconds:
                print(f"stopped at --max-seconds {args.max_seconds:.0f}, after {done} of {args.cases} cases")
                break
    finally:
        harness.close()

    print(
        f"\n{done} cases ({', '.join(families)}) from seeds {[s.name for s in seed_list]}, seed {args.seed}, "
        f"{args.workers} workers, {time.perf_counter() - started:.0f} s on {machine()}"
    )
    for outcome, count in harness.outcomes.most_common():
        print(f"  {count:>7}  {outcome}")
    if harness.failures:
        print(f"{len(harness.failures)} failing bundles written to {args.failures}/")
    return 1 if harness.failures else 0


if __name__ == "__main__":
    sys.exit(main())
