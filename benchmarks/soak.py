"""Soak: minutes of mixed load / run / unload, with a memory ceiling, to prove RSS stays flat.

    python benchmarks/soak.py                          # 10 minutes, writes the soak section of BENCHMARKS.md
    python benchmarks/soak.py --minutes 1 --no-write   # a quick look

Bundles are built once up front (host-only, NPU-partitioned, TensorRT-partitioned with
its host fallback, and a zoo model); then only runtime_lite runs. Each step picks at
random: load a bundle (from its path, mapped, or from bytes) and drop it; run a loaded
module with fresh random inputs (batch sizes vary where the batch is symbolic); run a
shared module from four threads at once; or feed a bad input and expect InputError.
Outputs are checked against the first run of the same bundle on the same input.

RSS is sampled every few seconds. After the warm-up (the first 10% of the time), the
script asserts RSS never exceeds the warm-up maximum by more than 5%, and it stops at
once, with a non-zero exit, if RSS crosses ``--ceiling-mb``. This is a benchmark, not a
CI test: it takes minutes by design.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import command_line, machine, write_section  # noqa: E402

import runtime_lite  # noqa: E402

GROWTH_LIMIT = 0.05


def rss_mb() -> float:
    """Current resident set size, from /proc (Linux), in MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def build_bundles(directory: Path) -> None:
    """Write the bundles the soak cycles through (run in a child, so the soak never imports aot)."""
    import aot
    from aot.testing import load_zoo_model
    from tests.conftest import small_cnn_model

    recipes = {
        "small-host": (small_cnn_model("N"), ["host"]),
        "small-npu": (small_cnn_model(1), ["npu"]),
        "small-tensorrt": (small_cnn_model("N"), ["tensorrt"]),
        "squeezenet-npu": (load_zoo_model("squeezenet", random_weights=True), ["npu"]),
    }
    for name, (model, targets) in recipes.items():
        options = {"min_region_size": 1} if "tensorrt" in targets else {}
        (directory / f"{name}.aotb").write_bytes(aot.build(model, targets=targets, **options).to_bytes())


def random_inputs(module: runtime_lite.Module, rng: np.random.Generator, batch: int) -> list[np.ndarray]:
    return [
        rng.standard_normal([batch if isinstance(d, str) else d for d in spec.shape]).astype(spec.dtype)
        for spec in module.inputs
    ]


class Soak:
    """The mixed workload; ``expected`` holds each (bundle, input seed) result seen first."""

    def __init__(self, bundles: dict[str, Path], seed: int) -> None:
        self.bundles = bundles
        self.random = random.Random(seed)
        self.loaded: dict[str, runtime_lite.Module] = {}
        self.expected: dict[tuple[str, int, int], list[np.ndarray]] = {}
        self.counts = {"load": 0, "unload": 0, "run": 0, "threaded run": 0, "bad input refused": 0}
        self.pool = ThreadPoolExecutor(max_workers=4)

    def module(self) -> tuple[str, runtime_lite.Module]:
        name = self.random.choice(sorted(self.bundles))
        if name not in self.loaded:
            self.load(name)
        return name, self.loaded[name]

    def load(self, name: str) -> None:
        """(Re)load a bundle; the old copy goes first, as a service swapping in a new model version would."""
        path = self.bundles[name]
        self.loaded.pop(name, None)
        self.loaded[name] = runtime_lite.load(path if self.random.random() < 0.7 else path.read_bytes())
        self.counts["load"] += 1

    def unload(self) -> None:
        if self.loaded:
            del self.loaded[self.random.choice(sorted(self.loaded))]
            self.counts["unload"] += 1

    def run_checked(self, name: str, module: runtime_lite.Module, seed: int, batch: int) -> None:
        outputs = module.run(random_inputs(module, np.random.default_rng(seed), batch))
        key = (name, seed, batch)
        reference = self.expected.setdefault(key, outputs)
        for a, b in zip(outputs, reference):
            if not np.array_equal(a, b):
                raise AssertionError(f"{name}: seed {seed} batch {batch} gave a different result")

    def step(self) -> None:
        action = self.random.choices(["load", "unload", "run", "threads", "bad"], weights=[2, 2, 10, 2, 1])[0]
        if action == "load":
            self.load(self.random.choice(sorted(self.bundles)))
        elif action == "unload":
            self.unload()
        elif action in ("run", "threads"):
            name, module = self.module()
            symbolic = any(isinstance(d, str) for s in module.inputs for d in s.shape)
            batch = self.random.choice([1, 2, 5]) if symbolic else 1
            if action == "run":
                self.run_checked(name, module, self.random.randrange(8), batch)
                self.counts["run"] += 1
            else:
                seeds = [self.random.randrange(8) for _ in range(8)]
                list(self.pool.map(lambda s: self.run_checked(name, module, s, batch), seeds))
                self.counts["threaded run"] += len(seeds)
        else:
            _, module = self.module()
            try:
                module.run([np.zeros((2, 2), np.float64)] * (len(module.inputs) + 1))
            except runtime_lite.InputError:
                self.counts["bad input refused"] += 1
            else:
                raise AssertionError("a bad input was accepted")


def soak(bundles: dict[str, Path], seconds: float, ceiling_mb: float, sample_every: float) -> dict:
    work = Soak(bundles, seed=0)
    start = time.perf_counter()
    samples: list[tuple[float, float]] = [(0.0, rss_mb())]
    next_sample = sample_every
    while (elapsed := time.perf_counter() - start) < seconds:
        work.step()
        if elapsed >= next_sample:
            gc.collect()
            samples.append((elapsed, rss_mb()))
            next_sample += sample_every
            if samples[-1][1] > ceiling_mb:
                raise SystemExit(f"RSS {samples[-1][1]:.0f} MB crossed the ceiling of {ceiling_mb:.0f} MB")
            minute = int(elapsed // 60)
            if int((elapsed - sample_every) // 60) != minute:
                print(f"  {elapsed:6.0f} s  RSS {samples[-1][1]:7.1f} MB  {work.counts}", flush=True)
    work.pool.shutdown()
    warm_up = seconds * 0.1
    warm = [rss for t, rss in samples if t <= warm_up]
    after = [rss for t, rss in samples if t > warm_up]
    tail = [rss for t, rss in samples if t > seconds * 0.9]
    return {
        "samples": samples,
        "trend": statistics.median(tail or after or warm) / statistics.median(after[: len(tail)] or warm) - 1,
        "counts": work.counts,
        "warm_max": max(warm),
        "after_max": max(after) if after else max(warm),
        "final": samples[-1][1],
        "seconds": seconds,
    }


def curve(samples: list[tuple[float, float]], points: int = 11) -> list[tuple[float, float]]:
    """About ``points`` evenly spaced (time, RSS) samples, for the report."""
    step = max(1, (len(samples) - 1) // (points - 1))
    return samples[::step] if samples[-1] in samples[::step] else samples[::step] + [samples[-1]]


def report(result: dict, command: str) -> str:
    growth = result["after_max"] / result["warm_max"] - 1
    verdict = "met" if growth <= GROWTH_LIMIT else "MISSED"
    counts = ", ".join(f"{v:,} {k}" for k, v in result["counts"].items())
    rows = "\n".join(f"| {t:.0f} | {rss:.1f} |" for t, rss in curve(result["samples"]))
    return f"""## Soak: mixed load / run / unload

`{command}` on {machine()}: {result["seconds"] / 60:g} minutes of {counts}.
Every run matched the first result of the same bundle and input. RSS after the
warm-up (the first 10%) peaked at {result["after_max"]:.1f} MB, against
{result["warm_max"]:.1f} MB during it: growth {growth:+.1%} (target ≤ +{GROWTH_LIMIT:.0%}: {verdict}).
The median of the last 10% against the median of as many samples just after the
warm-up: {result["trend"]:+.1%} (the trend, without single peaks).

| seconds | RSS (MB) |
|---:|---:|
{rows}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--ceiling-mb", type=float, default=2048.0, help="stop with an error above this RSS")
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds between RSS samples")
    parser.add_argument("--no-write", action="store_true", help="print the report, leave BENCHMARKS.md alone")
    parser.add_argument("--build-into", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build_into:
        build_bundles(Path(args.build_into))
        return
    with tempfile.TemporaryDirectory() as directory:
        print("building bundles (in a child process: the soak itself runs on runtime_lite alone) ...", flush=True)
        subprocess.run([sys.executable, __file__, "--build-into", directory], check=True)
        bundles = {p.stem: p for p in sorted(Path(directory).glob("*.aotb"))}
        print(f"soaking for {args.minutes:g} minutes ...", flush=True)
        result = soak(bundles, args.minutes * 60, args.ceiling_mb, min(args.sample_every, args.minutes * 6))
    text = report(result, command_line("soak.py"))
    print(text)
    if not args.no_write:
        write_section("soak", text)
    if result["after_max"] / result["warm_max"] - 1 > GROWTH_LIMIT:
        raise SystemExit("RSS grew beyond the limit after warm-up")


if __name__ == "__main__":
    main()
