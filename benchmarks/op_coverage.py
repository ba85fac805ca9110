"""Operator coverage against the official sets, written to docs/coverage.md.

    python benchmarks/op_coverage.py            # print the page (core ATen lists, every ONNX node test run)
    python benchmarks/op_coverage.py --write    # write docs/coverage.md
    python benchmarks/op_coverage.py --aten     # also sweep every core ATen op over more OpInfo samples

The page itself comes from ``aot.testing.coverage_page.render`` (the test that keeps it
current calls the same function). ``--aten`` runs the OpInfo comparison over up to
``--samples`` samples per op and dtype, dynamic dims on every other one, and prints each
op's pass/refused/fail counts; CI runs two per op and dtype (tests/test_aten_opinfo.py).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aot.testing import aten_coverage, coverage_page  # noqa: E402


def sweep_aten(samples: int) -> int:
    """Every converted or missing core op over OpInfo samples; returns how many samples gave a wrong result."""
    wrong = 0
    per_dtype = {dtype: samples for dtype in aten_coverage.DTYPES}
    for op in aten_coverage.core_ops():
        if aten_coverage.status(op) == "by design":
            continue
        results = aten_coverage.sweep(op, per_dtype)
        counts = Counter(r.status for _, r in results)
        notes = [f"{dtype}: {r.detail}" for dtype, r in results if r.status != "pass"]
        wrong += counts["fail"]
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no sample reaches it"
        print(f"{op:40s} {aten_coverage.status(op):10s} {summary}" + (f"  [{notes[0]}]" if notes else ""), flush=True)
    return wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write docs/coverage.md")
    parser.add_argument("--aten", action="store_true", help="sweep core ATen ops over OpInfo samples")
    parser.add_argument("--samples", type=int, default=6, help="OpInfo samples per op and dtype with --aten")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    start = time.perf_counter()
    if args.aten:
        wrong = sweep_aten(args.samples)
        print(f"ATen sweep: {wrong} wrong results, {time.perf_counter() - start:.0f} s", file=sys.stderr)
    page = coverage_page.render()
    if args.write:
        coverage_page.PAGE.write_text(page)
        print(f"wrote {coverage_page.PAGE}", file=sys.stderr)
    elif not args.aten:
        print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
