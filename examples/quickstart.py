"""Quickstart: compile an ONNX model into one bundle and run it in a new process with runtime_lite.

    python examples/quickstart.py                      # the small CNN shipped in examples/models
    python examples/quickstart.py MODEL.onnx --input NAME:1x3x224x224

1. ``aot-build`` compiles the model into a single .aotb bundle and prints what it built;
2. a fresh ``python -m runtime_lite run`` process (which imports neither aot nor onnx)
   loads the bundle and runs it on a random input saved as .npy;
3. the outputs are compared with onnx's reference evaluator on the same input.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL = HERE / "models" / "small_cnn.onnx"


def step(title: str, command: list[str]) -> None:
    print(f"\n$ {' '.join(Path(c).name if c == sys.executable else c for c in command)}", flush=True)
    subprocess.run(command, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", nargs="?", type=Path, default=DEFAULT_MODEL)
    parser.add_argument(
        "--input", action="append", default=[], metavar="NAME:SHAPE", help="fix an input shape (aot-build --input)"
    )
    parser.add_argument("--batch", type=int, default=2, help="batch size for a symbolic batch dim (default 2)")
    parser.add_argument("--out", type=Path, help="directory for the bundle and outputs (default: a temporary one)")
    args = parser.parse_args()

    work = args.out or Path(tempfile.mkdtemp(prefix="aot-quickstart-"))
    work.mkdir(parents=True, exist_ok=True)
    bundle = work / (args.model.stem + ".aotb")
    build = [sys.executable, "-m", "aot.cli.build", str(args.model), "-o", str(bundle)]
    for spec in args.input:
        build += ["--input", spec]
    step("build", build)

    # Inputs for the run: random data in the shape the bundle declares (symbolic dims -> --batch).
    import runtime_lite  # only to read the signature here; the run below is a separate process

    module = runtime_lite.load(bundle)
    rng = np.random.default_rng(0)
    feeds, run = {}, [sys.executable, "-m", "runtime_lite", "run", str(bundle), "--output-dir", str(work / "outputs")]
    for i, spec in enumerate(module.inputs):
        shape = [args.batch if isinstance(d, str) else d for d in spec.shape]
        feeds[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
        np.save(work / f"input{i}.npy", feeds[spec.name])
        run += ["--input", f"{spec.name}={work / f'input{i}.npy'}"]
    step("run", run)

    print("\nchecking against onnx's reference evaluator ...")
    reference = ReferenceEvaluator(onnx.load(args.model)).run(None, feeds)
    worst = 0.0
    for spec, expected in zip(module.outputs, reference):
        got = np.load(work / "outputs" / f"{''.join(c if c.isalnum() or c in '._-' else '_' for c in spec.name)}.npy")
        error = float(np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-30))
        worst = max(worst, error)
        print(f"  {spec.name}: shape {list(got.shape)}, relative L2 error {error:.2e}")
    print(f"\nbundle: {bundle} ({bundle.stat().st_size / 1e3:.1f} kB); outputs in {work / 'outputs'}")
    if worst > 1e-4:
        print("MISMATCH: runtime_lite and the reference disagree")
        return 1
    print("OK: runtime_lite matches the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
