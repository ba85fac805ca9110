"""Run a bundle from the shell: ``python -m runtime_lite run model.aotb --input x=x.npy``.

argparse rather than click: the runtime's only dependencies are numpy and msgpack.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

import runtime_lite
from runtime_lite.errors import RuntimeLiteError


def _parse_input(text: str) -> tuple[str, Path]:
    name, sep, path = text.rpartition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--input must look like NAME=FILE.npy, got {text!r}")
    return name, Path(path)


def _safe_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "output"


def output_filenames(names: list[str]) -> list[str]:
    """One distinct, safe ``.npy`` file name per output: ``a/b`` and ``a_b`` must not overwrite each other.

    Names are compared without case, for case-insensitive file systems; a clash gets the
    output's index appended.
    """
    files, taken = [], set()
    for index, name in enumerate(names):
        stem = _safe_filename(name)
        if stem.lower() in taken:
            stem = f"{stem}.{index}"
        taken.add(stem.lower())
        files.append(f"{stem}.npy")
    return files


#: ``--random-inputs`` refuses to invent more than this many bytes for one input.
MAX_RANDOM_INPUT_BYTES = 1 << 30


def _random_input(spec: runtime_lite.TensorSpec, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(1 if isinstance(d, str) else d for d in spec.shape)
    nbytes = int(np.prod(shape, dtype=object)) * spec.dtype.itemsize
    if nbytes > MAX_RANDOM_INPUT_BYTES:
        raise RuntimeLiteError(
            f"input {spec}: random data would take {nbytes:,} bytes; pass --input {spec.name}=FILE.npy"
        )
    if spec.dtype.kind == "f":
        return rng.standard_normal(shape).astype(spec.dtype)
    if spec.dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 10, shape).astype(spec.dtype)


def _preview(array: np.ndarray, count: int = 6) -> str:
    values = ", ".join(f"{v:.6g}" if array.dtype.kind == "f" else str(v) for v in array.reshape(-1)[:count].tolist())
    return f"[{values}{', ...' if array.size > count else ''}]"


def _load_inputs(module, pairs, random: bool, seed: int) -> dict[str, np.ndarray]:
    inputs = {}
    for name, path in pairs:
        try:
            inputs[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise RuntimeLiteError(f"cannot read input {name!r} from '{path}': {e}") from None
    if random:
        rng = np.random.default_rng(seed)
        for spec in module.inputs:
            inputs.setdefault(spec.name, _random_input(spec, rng))
    missing = [s for s in module.inputs if s.name not in inputs]
    if missing:
        raise RuntimeLiteError(
            "no value for input "
            + ", ".join(str(s) for s in missing)
            + "; pass --input NAME=FILE.npy or --random-inputs"
        )
    return inputs


def _run(args) -> int:
    start = time.perf_counter()
    module = runtime_lite.load(args.bundle)
    loaded = time.perf_counter()
    inputs = _load_inputs(module, args.input, args.random_inputs, args.seed)
    outputs = module.run(inputs)
    done = time.perf_counter()
    print(f"{args.bundle}: loaded in {(loaded - start) * 1e3:.1f} ms, ran in {(done - loaded) * 1e3:.1f} ms")
    if args.output_dir:
        args.output_dir.mkdir(parents=True, exist_ok=True)
    files = output_filenames([spec.name for spec in module.outputs])
    for spec, array, file in zip(module.outputs, outputs, files):
        print(f"  {spec.name}: {array.dtype}{list(array.shape)} {_preview(array)}")
        if args.output_dir:
            np.save(args.output_dir / file, array, allow_pickle=False)
    if args.output_dir:
        print(f"outputs written to {args.output_dir}/")
    return 0


def _info(args) -> int:
    module = runtime_lite.load(args.bundle)
    print(f"bundle {args.bundle} (format {module.format_version[0]}.{module.format_version[1]})")
    producer = ", ".join(f"{k} {v}" for k, v in module.producer.items())
    print(f"  produced by: {producer}")
    for spec in module.inputs:
        print(f"  input  {spec}")
    for spec in module.outputs:
        print(f"  output {spec}")
    for record in module.modules:
        print(f"  module {record['id']} on backend {record['backend']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime_lite", description="Run aot bundles.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a bundle on inputs stored as .npy files")
    run.add_argument("bundle", type=Path)
    run.add_argument("--input", action="append", default=[], type=_parse_input, metavar="NAME=FILE.npy")
    run.add_argument("--random-inputs", action="store_true", help="fill inputs not given with random data")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--output-dir", type=Path, help="write each output as NAME.npy here")
    run.set_defaults(handler=_run)
    info = commands.add_parser("info", help="print a bundle's signature and producer")
    info.add_argument("bundle", type=Path)
    info.set_defaults(handler=_info)
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except RuntimeLiteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
