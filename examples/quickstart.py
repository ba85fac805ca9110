"""Quickstart: compile an ONNX model into one bundle and run it in a new process with runtime_lite.

    python examples/quickstart.py                      # the small CNN shipped in examples/models
    python examples/quickstart.py MODEL.onnx --input NAME:1x3x224x224

1. ``aot-build`` compiles the model into a single .aotb bundle and prints what it built,
   once for the host and once partitioned for the virtual NPU (``--target npu``);
2. a fresh ``runtime-lite run`` process (which imports neither aot nor onnx) loads
   each bundle and runs it on a random input saved as .npy;
3. the outputs are compared with onnx's reference evaluator on the same input.

The commands are printed as you would type them; they run as ``python -m`` so the
example works from a source checkout too. A temporary directory is removed at the end
unless ``--out`` names one to keep.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL = HERE / "models" / "small_cnn.onnx"


#: How each ``python -m`` module is typed once the packages are installed.
CONSOLE_SCRIPTS = {"aot.cli.build": "aot-build", "runtime_lite": "runtime-lite"}


def step(command: list[str]) -> None:
    """Run ``python -m MODULE ...``, showing it as its console script.

    A failing command has already said why in one line (a bad model path, a bad
    ``--input``): the example exits with its status instead of adding a traceback.
    """
    shown = [CONSOLE_SCRIPTS[command[2]], *command[3:]]
    print(f"\n$ {' '.join(shown)}", flush=True)
    status = subprocess.run(command).returncode
    if status != 0:
        raise SystemExit(status)


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
    try:
        worst = max(build_and_run(args, work, target) for target in ("host", "npu"))
    finally:
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)
    if worst > 1e-4:
        print("MISMATCH: runtime_lite and the reference disagree")
        return 1
    print("\nOK: runtime_lite matches the reference, on the host and on the NPU" + ("" if args.out else
          " (temporary files removed; --out DIR keeps them)"))  # fmt: skip
    return 0


def fixed_shapes(model: Path, batch: int) -> list[str]:
    """``NAME:2x3x32x32`` for each graph input, symbolic dims set to ``batch``."""
    graph = onnx.load(model, load_external_data=False).graph
    weights = {init.name for init in graph.initializer}
    specs = []
    for value in graph.input:
        if value.name not in weights:
            dims = [d.dim_value if d.HasField("dim_value") else batch for d in value.type.tensor_type.shape.dim]
            specs.append(f"{value.name}:{'x'.join(map(str, dims))}")
    return specs


def build_and_run(args: argparse.Namespace, work: Path, target: str) -> float:
    """Build for ``target``, run in a fresh runtime process, return the worst relative error."""
    bundle = work / f"{args.model.stem}-{target}.aotb"
    build = [sys.executable, "-m", "aot.cli.build", str(args.model), "-o", str(bundle), "--target", target]
    # The NPU plans static shapes: give a symbolic batch its size, or every op stays on the host (and the
    # build summary says so).
    for spec in args.input or (fixed_shapes(args.model, args.batch) if target == "npu" else []):
        build += ["--input", spec]
    step(build)

    # Inputs for the run: random data in the shape the bundle declares (symbolic dims -> --batch).
    import runtime_lite  # only to read the signature here; the run below is a separate process

    module = runtime_lite.load(bundle)
    rng = np.random.default_rng(0)
    outputs = work / f"outputs-{target}"
    feeds, run = {}, [sys.executable, "-m", "runtime_lite", "run", str(bundle), "--output-dir", str(outputs)]
    for i, spec in enumerate(module.inputs):
        shape = [args.batch if isinstance(d, str) else d for d in spec.shape]
        feeds[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
        np.save(work / f"input{i}.npy", feeds[spec.name])
        run += ["--input", f"{spec.name}={work / f'input{i}.npy'}"]
    step(run)

    print("\nchecking against onnx's reference evaluator ...")
    reference = ReferenceEvaluator(onnx.load(args.model)).run(None, feeds)
    worst = 0.0
    for spec, expected in zip(module.outputs, reference):
        got = np.load(outputs / f"{''.join(c if c.isalnum() or c in '._-' else '_' for c in spec.name)}.npy")
        error = float(np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-30))
        worst = max(worst, error)
        print(f"  {spec.name}: shape {list(got.shape)}, relative L2 error {error:.2e}")
    print(f"bundle: {bundle.name} ({bundle.stat().st_size / 1e3:.1f} kB), modules: {module.placement or 'host only'}")
    return worst


if __name__ == "__main__":
    sys.exit(main())
