"""A campaign of hostile bundles against runtime_lite: the figures in docs/RELIABILITY.md.

Each case is a real bundle (host, NPU or TensorRT partition of two small models)
with a meaning-level mutation and valid checksums, loaded with
``max_memory=64 MiB, max_run_seconds=1`` and run in a worker process under an
address-space cap and a 10 s timeout (tests/hostile.py). A clean outcome is
"rejected at load" (BundleError), "refused at run" (ExecutionError/InputError)
or "ran" with outputs the caller owns; anything else is a failure and is written
to ``--failures`` for replay.

    python benchmarks/fuzz_campaign.py --cases 100000 --seed 2026 --workers 2
    python benchmarks/fuzz_campaign.py --family onnxruntime --cases 10000   # onnxruntime recipes (issue 27)
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

from tests import hostile  # noqa: E402

#: Mutation families: (seed bundles, cases drawn from them).
FAMILIES = {
    "bundles": (hostile.seeds, hostile.cases),
    "onnxruntime": (hostile.onnxruntime_seeds, hostile.onnxruntime_cases),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--batch", type=int, default=2000, help="cases between progress lines")
    parser.add_argument("--failures", type=Path, default=Path("fuzz-failures"), help="where failing bundles go")
    parser.add_argument("--family", choices=sorted(FAMILIES), default="bundles", help="which mutations")
    args = parser.parse_args()

    make_seeds, make_cases = FAMILIES[args.family]
    seed_list = make_seeds()
    rng = random.Random(args.seed)
    harness = hostile.Harness(workers=args.workers)
    started = time.perf_counter()
    done = 0
    reported = 0
    try:
        while done < args.cases:
            batch = min(args.batch, args.cases - done)
            harness.run(make_cases(seed_list, batch, rng))
            done += batch
            for what, outcome, data in harness.failures[reported:]:
                args.failures.mkdir(parents=True, exist_ok=True)
                (args.failures / f"case-{reported:05d}.bundle").write_bytes(data)
                print(f"FAIL case-{reported:05d} {what}: {outcome}", flush=True)
                reported += 1
            rate = done / (time.perf_counter() - started)
            print(f"{done:>7} cases  {rate:5.1f}/s  failures {len(harness.failures)}", flush=True)
    finally:
        harness.close()

    print(
        f"\n{done} cases from seeds {[s.name for s in seed_list]}, seed {args.seed}, "
        f"{args.workers} workers, {time.perf_counter() - started:.0f} s on {machine()}"
    )
    for outcome, count in harness.outcomes.most_common():
        print(f"  {count:>7}  {outcome}")
    if harness.failures:
        print(f"{len(harness.failures)} failing bundles written to {args.failures}/")
    return 1 if harness.failures else 0


if __name__ == "__main__":
    sys.exit(main())
