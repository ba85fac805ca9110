"""Robustness sweep of the onnxruntime delegate: any ONNX file, built three ways, checked against onnxruntime.

    python benchmarks/sweep_delegate.py model.onnx [more.onnx ...] --batches 1,3,0 --dim seq=9

Each model is built for the host, ``--target onnxruntime`` and ``--target npu --target
onnxruntime``; each bundle is loaded in a fresh ``python -P`` process (this checkout's
runtime_lite, checked by path), run at every batch size (the first dim when it is
symbolic; 0 is an empty batch) and compared with onnxruntime running the original file.
A row gives where the regions ran, the worst relative L2 over all outputs and batches,
the same for the bundle loaded with ``onnxruntime.enabled=false`` (its host plans), and
whether ``require=("onnxruntime",)`` loads (the host-only build has neither). Other symbolic dims take ``--dim NAME=SIZE``
(default 8); integer inputs get random ids below ``--vocab``, masks (a name with "mask")
ones. Correctness only: no timing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILDS = {"host": ["host"], "onnxruntime": ["onnxruntime"], "npu+onnxruntime": ["npu", "onnxruntime"]}


def feeds(model: str, batch: int, dims: dict[str, int], vocab: int, seed: int = 0) -> dict:
    """Random inputs for ``model`` from onnxruntime's view of its signature."""
    import numpy as np
    import onnxruntime

    rng = np.random.default_rng(seed)
    out = {}
    for spec in onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).get_inputs():
        shape = [
            d if isinstance(d, int) else batch if i == 0 else dims.get(str(d), 8) for i, d in enumerate(spec.shape)
        ]
        kind = spec.type[len("tensor(") : -1]
        if kind in ("float", "double", "float16"):
            dtype = {"float": np.float32, "double": np.float64, "float16": np.float16}[kind]
            out[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif kind == "bool":
            out[spec.name] = rng.random(shape) > 0.3
        else:
            high = 2 if "mask" in spec.name else vocab
            value = np.ones(shape) if "mask" in spec.name else rng.integers(0, high, shape)
            out[spec.name] = value.astype({"int64": np.int64, "int32": np.int32, "uint8": np.uint8}.get(kind, np.int64))
    return out


def worker(model: str, bundle: str, batches: list[int], dims: dict[str, int], vocab: int) -> dict:
    """In a fresh process: load ``bundle`` (delegate on, then off), run every batch, compare with onnxruntime."""
    import numpy as np
    import onnxruntime

    import runtime_lite

    if not Path(runtime_lite.__file__).resolve().is_relative_to(ROOT):
        raise SystemExit(f"imported {runtime_lite.__file__}, not this checkout's runtime_lite")
    reference = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    row: dict = {}
    for label, options in (("on", None), ("off", {"onnxruntime": {"enabled": False}})):
        try:
            module = runtime_lite.load(bundle, backend_options=options)
        except Exception as e:
            row[label] = f"load: {type(e).__name__}: {e}"[:200]
            continue
        if label == "on":
            row["runs_on"] = sorted({f"{p['backend']}->{p['runs_on']}" for p in module.placement.values()})
        worst = 0.0
        for batch in batches:
            inputs = feeds(model, batch, dims, vocab, seed=batch)
            try:
                expected = reference.run(None, inputs)
            except Exception as e:  # onnxruntime refuses the input itself: nothing to compare with
                row[f"skipped batch {batch}"] = f"onnxruntime: {str(e).splitlines()[0][:100]}"
                continue
            try:
                actual = module.run(inputs)
            except Exception as e:
                worst = f"batch {batch}: {type(e).__name__}: {e}"[:200]
                break
            for a, e in zip(actual, expected, strict=True):
                if a.shape != e.shape:
                    worst = f"batch {batch}: shape {a.shape}, onnxruntime's {e.shape}"
                    break
                if e.size and e.dtype.kind == "f":
                    scale = max(float(np.linalg.norm(e.astype(np.float64))), 1e-12)
                    worst = max(worst, float(np.linalg.norm((a - e).astype(np.float64))) / scale)
                elif not np.array_equal(a, e):
                    worst = f"batch {batch}: {e.dtype} values differ"
                    break
            if isinstance(worst, str):
                break
        row[label] = worst
    try:
        runtime_lite.load(bundle, require=("onnxruntime",))
        row["require"] = "loads"
    except Exception as e:
        row["require"] = f"{type(e).__name__}: {e}"[:120]
    return row


def sweep(model: str, args, workdir: Path) -> list[dict]:
    import aot

    rows = []
    for name, targets in BUILDS.items():
        bundle = workdir / f"{Path(model).stem}.{name}.aotb"
        try:
            aot.build(model, targets=targets, log=None).save(str(bundle))
        except Exception as e:
            rows.append({"model": Path(model).name, "build": name, "error": f"{type(e).__name__}: {e}"[:200]})
            continue
        command = [sys.executable, "-P", __file__, "--worker", str(bundle), model, "--batches", args.batches]
        command += [f"--dim={d}" for d in args.dim] + ["--vocab", str(args.vocab)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            tail = [line for line in done.stderr.splitlines() if line.strip()][-1:] or [""]
            row = {"error": f"worker exit {done.returncode}: {tail[0][:200]}"}
        else:
            row = json.loads(lines[-1])
        rows.append({"model": Path(model).name, "build": name, **row})
    return rows


def cell(value) -> str:
    return f"{value:.1e}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="ONNX files")
    parser.add_argument("--batches", default="1,3,0", help="batch sizes for a symbolic first dim (0: empty)")
    parser.add_argument("--dim", action="append", default=[], help="NAME=SIZE for another symbolic dim")
    parser.add_argument("--vocab", type=int, default=50, help="integer inputs are random ids below this")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per bundle")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    dims = dict((k, int(v)) for k, v in (d.split("=", 1) for d in args.dim))
    if args.worker:
        print(json.dumps(worker(args.models[0], args.worker, batches, dims, args.vocab)))
        return 0
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from report import machine

    print(f"# onnxruntime delegate sweep ({machine()}); relative L2 against onnxruntime on the original file")
    print("| model | build | runs on | delegate on | delegate off | require onnxruntime |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as workdir:
        for model in args.models:
            for row in sweep(model, args, Path(workdir)):
                if "error" in row:
                    print(f"| {row['model']} | {row['build']} | ✗ {row['error']} | | | |", flush=True)
                    continue
                runs_on = ", ".join(row.get("runs_on", [])) or "host"
                if row["build"] == "host":  # no delegate to turn off or require
                    row["off"] = row["require"] = "—"
                print(f"| {row['model']} | {row['build']} | {runs_on} | {cell(row.get('on'))} | "
                      f"{cell(row.get('off'))} | {row.get('require')} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
