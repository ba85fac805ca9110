"""How long an int8 build takes: ``aot-build --precision int8`` beside onnxruntime's ``quantize_static``.

    python benchmarks/bench_int8_build.py MODEL.onnx CALIBRATION_DIR [--checkout DIR ...] [--target npu]

Each aot checkout given (default: this one) builds MODEL at int8 calibrating on
CALIBRATION_DIR (one .npy stack of samples), in a fresh process; onnxruntime's
``quantize_static`` (QDQ, per channel, MinMax) quantizes the same model on the same
samples, as the peer. Printed per run: wall seconds, CPU seconds (user + system, all
threads) and, for aot, each stage's seconds as the build reported them. Runs
alternate between the sides so a busy machine slows both alike.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

PEER = """
import sys, numpy as np, onnxruntime
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
model, data, out = sys.argv[1:4]
stack = np.load(data)
name = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).get_inputs()[0].name
class Reader(CalibrationDataReader):
    def __init__(self):
        self.items = iter([{name: s} for s in stack])
    def get_next(self):
        return next(self.items, None)
quantize_static(model, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
"""


def _timed(command: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, str]:
    """Run from ``cwd``: ``python -m`` puts the working directory ahead of PYTHONPATH."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed: {result.stderr.strip().splitlines()[-1:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, result.stderr + result.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("calibration", help="a directory holding one .npy stack of samples")
    parser.add_argument("--checkout", action="append", help="an aot checkout to time (repeatable)")
    parser.add_argument("--target", default="npu")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from report import machine

    print(machine(), flush=True)  # the CPU, its ISA and VNNI: a build time means little without them
    model, calibration = os.path.abspath(args.model), os.path.abspath(args.calibration)
    checkouts = args.checkout or [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    (stack,) = [os.path.join(calibration, f) for f in os.listdir(calibration) if f.endswith(".npy")]
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for checkout in checkouts:
                env = {**os.environ, "PYTHONPATH": os.path.abspath(checkout)}
                command = [sys.executable, "-m", "aot.cli.build", model, "-o", os.path.join(tmp, "m.aotb"),
                           "--target", args.target, "--precision", "int8", "--calibration", calibration]  # fmt: skip
                wall, cpu, text = _timed(command, env, tmp)
                stages = dict(re.findall(r"^  (\w+) +([\d.]+) s$", text, re.M))
                chosen = re.search(r"calibration table \S+ \(\w+, (\w+),", text)
                print(f"aot {checkout}: {wall:.1f} s wall, {cpu:.1f} s CPU, method {chosen and chosen.group(1)}; "
                      + ", ".join(f"{k} {v} s" for k, v in stages.items()))  # fmt: skip
            wall, cpu, _ = _timed([sys.executable, "-c", PEER, model, stack, os.path.join(tmp, "q.onnx")],
                                  dict(os.environ), tmp)  # fmt: skip
            print(f"onnxruntime quantize_static: {wall:.1f} s wall, {cpu:.1f} s CPU")


if __name__ == "__main__":
    main()
